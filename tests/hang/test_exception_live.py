"""A plain Python exception, live on gloo: diagnosed ``exception``, blaming the ranks whose
exception is primary -- never a rank that only lost its peer, and never "without a Python
exception" beside a traceback (issue 10). Every shape of exception Python prints is read as one:
no message, a class of the program's own, a bare assert, a chain, a KeyboardInterrupt the
program raised itself; sys.exit with a code that wraps to status 0 is named for what it is."""

import json
import sys
import traceback

import pytest

from dtlab.hang import diagnose
from dtlab.hang.diagnose.signals import tracebacks
from dtlab.runtime import RankError
from dtlab.runtime.launch import launch

pytestmark = pytest.mark.timeout(60)


def stub():
    raise NotImplementedError()  # an exercise unanswered, exactly as the notebooks' stubs raise


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
    assert "raised NotImplementedError at test_exception_live.py:" in d.summary
    assert "without a Python exception" not in text and "no Python traceback" not in text


def test_one_rank_raises_while_the_other_waits(tmp_path, no_orphans):
    d = diagnose(_evidence(one_rank_raises, tmp_path))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks) == ("exception", [1], [1]), d.summary
    assert d.op == "all_reduce" and "ValueError: bad batch on rank 1" in d.summary
    assert "only report that a peer went away" in d.summary


class Boom(Exception):
    pass


def _raise_chained():
    try:
        {}["k"]
    except KeyError as e:
        raise RuntimeError("wrapped") from e


def _raise_during_handling():
    try:
        1 / 0
    except ZeroDivisionError:
        raise ValueError("while handling")


SHAPES = [  # (raises, the type read, the message read, the cause read)
    (lambda: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError", "", None),
    (lambda: (_ for _ in ()).throw(Boom("x")), "test_exception_live.Boom", "x", None),
    (lambda: (_ for _ in ()).throw(ValueError("line one\nline two")), "ValueError", "line one", None),
    (_raise_chained, "RuntimeError", "wrapped", "KeyError: 'k'"),
    (_raise_during_handling, "ValueError", "while handling", "ZeroDivisionError: division by zero"),
    (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), "KeyboardInterrupt", "", None),
]


def _assert_false():
    exec("assert 1 == 2", {})  # compiled here, not rewritten by pytest: a bare AssertionError


@pytest.mark.parametrize("raises,kind,message,cause", SHAPES + [(_assert_false, "AssertionError", "", None)],
                         ids=["bare", "own class", "multi-line", "from", "while handling",
                              "KeyboardInterrupt", "bare assert"])
def test_every_shape_of_traceback_is_one_exception(raises, kind, message, cause):
    try:
        raises()
    except BaseException as e:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    lines = ["some output before", *text.splitlines(), "and after"]
    got = tracebacks(lines, 0, "rank0.stderr.txt")
    assert [(s.data["type"].rsplit(".", 1)[-1], s.data["message"], s.data["cause"]) for s in got] == \
        [(kind.rsplit(".", 1)[-1], message, cause)], text


def exit_256():
    sys.exit(256)


def test_sys_exit_that_wraps_to_status_0_is_named(tmp_path, no_orphans):
    d = diagnose(_evidence(exit_256, tmp_path))
    assert d.failure_class == "rank_died" and d.culprit_ranks == [0, 1], d.summary
    assert "sys.exit(256)" in d.summary and "low 8 bits" in d.summary
    assert "OOM" not in d.summary and "os._exit(0)" not in d.summary
