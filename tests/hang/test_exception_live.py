"""A plain Python exception, live on gloo: diagnosed ``exception``, blaming the ranks whose
exception is primary -- never a rank that only lost its peer, and never "without a Python
exception" beside a traceback (issue 10)."""

import json

import pytest

from dtlab.hang import diagnose
from dtlab.runtime import RankError
from dtlab.runtime.launch import launch

pytestmark = pytest.mark.timeout(60)


def stub():
    raise NotImplementedError("write gather_pids")  # 00's first exercise, unanswered


def one_rank_raises():
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("bad batch on rank 1")
    dist.all_reduce(torch.ones(4))  # rank 0 waits here, then loses its peer


def _evidence(fn, tmp_path) -> str:
    out = str(tmp_path / "ev")
    with pytest.raises(RankError):
        launch(fn, nprocs=2, backend="gloo", timeout=30, evidence_dir=out, failure_grace=5.0)
    return out


def test_every_rank_raises(tmp_path, no_orphans):
    d = diagnose(_evidence(stub, tmp_path))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == \
        ("exception", [0, 1], [0, 1], True), d.summary
    text = d.summary + json.dumps(d.evidence)
    assert "NotImplementedError: write gather_pids" in d.summary
    assert "without a Python exception" not in text and "no Python traceback" not in text


def test_one_rank_raises_while_the_other_waits(tmp_path, no_orphans):
    d = diagnose(_evidence(one_rank_raises, tmp_path))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks) == ("exception", [1], [1]), d.summary
    assert d.op == "all_reduce" and "ValueError: bad batch on rank 1" in d.summary
    assert "only report that a peer went away" in d.summary
