"""``dtlab capstone hang``: the capstone's FSDP2 job broken for a real reason on gloo ranks, the
evidence collected by dtlab.run, the diagnosis right (or honestly unsure), nothing left running.
Each run is bounded by a 5 s collective timeout: about 5-12 s per run on 2 CPU cores."""

import json
import os

import pytest
from conftest import assert_no_descendants

from dtlab.capstone.hang import BUGS, CULPRIT, hang
from dtlab.cli import main


def _run(bug, nprocs, tmp_path):
    out = str(tmp_path / bug)
    r = hang(bug, nprocs=nprocs, backend="gloo", out=out)
    assert_no_descendants()
    assert r["evidence_dir"] == out and r["wall_s"] < 60
    assert os.path.exists(os.path.join(out, "run.json"))
    with open(os.path.join(out, "diagnosis.json")) as f:
        assert json.load(f)["failure_class"] == r["diagnosis"]["failure_class"]
    assert r["expected"]["failure_class"] == BUGS[bug].expect_class
    return r, r["diagnosis"]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_extra_metric_is_an_op_mismatch_at_fsdp2s_all_gather(nprocs, tmp_path):
    r, d = _run("extra_metric", nprocs, tmp_path)
    assert r["outcome"] != "ok"
    assert d["failure_class"] == "op_mismatch"
    assert d["op"] == "all_gather" and d["collective_seq"]   # Flight Recorder position
    if nprocs == 2:   # no majority: both candidates, and it says it is unsure
        assert d["culprit_ranks"] == [0, 1] and d["confident"] is False
    else:
        assert d["culprit_ranks"] == [CULPRIT] and d["confident"] is True
    assert d["sites"][str(CULPRIT)].startswith("hang.py:")   # the culprit's extra all_reduce


def test_gather_shapes_fails_at_once_as_a_size_mismatch(tmp_path):
    r, d = _run("gather_shapes", 2, tmp_path)
    # on gloo: no hang; the culprit (shorter buffers) is aborted by gloo's size check
    assert r["outcome"] == "RankError" and "SIGABRT" in r["error"]
    assert r["wall_s"] < 30
    assert d["failure_class"] == "size_mismatch"
    assert CULPRIT in d["culprit_ranks"]
    assert d["confident"] is False or d["culprit_ranks"] == [CULPRIT]


def test_stuck_loader_hangs_the_others_in_fsdp2s_all_gather(tmp_path):
    r, d = _run("stuck_loader", 2, tmp_path)
    assert r["outcome"] != "ok"
    # what is true, and the evidence shows it: the culprit is stuck in the loader, the other
    # rank timed out inside FSDP2's all-gather of the next forward (train_step's model(x))
    assert d["sites"][str(CULPRIT)].startswith("hang.py:")
    assert d["sites"]["0"].startswith("train.py:")
    # FSDP2's frame (distributed_c10d.all_gather_single) reads as all_gather: rank 0 in a
    # collective, rank 1 outside any -> the one that never reached it
    assert d["failure_class"] == BUGS["stuck_loader"].expect_class
    assert CULPRIT in d["culprit_ranks"]


CASES = {
    "bug": (["--bug", "uneven_batch"], "--bug 'uneven_batch' is not one of: extra_metric"),
    "nprocs": (["--nprocs", "1"], "--nprocs 1 must be at least 2"),
    "backend": (["--backend", "foo"], "--backend 'foo' is not one of"),
    "out": (["--out", __file__], "exists and is not an empty folder"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, capsys, no_orphans):
    argv, words = CASES[case]
    assert main(["capstone", "hang", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("dtlab capstone: ") and words in err, err
