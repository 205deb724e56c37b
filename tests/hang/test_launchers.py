"""Evidence dtlab did not produce: torchrun consoles captured here (real torchrun, gloo) and SLURM
consoles written from documented message formats (fixtures/README.md says how each was made).

A rank the launcher stopped, or that an outside timeout stopped with the whole job, is never a
culprit; a rank that only lost its peer is never the root cause."""

import os
import shutil

import pytest

from dtlab.hang import diagnose

FIX = os.path.join(os.path.dirname(__file__), "fixtures")
DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "h200x2-hang")


def test_torchrun_one_rank_raises():
    # rank 1 raises ValueError; rank 0 gets "Connection closed by peer" in all_reduce and is then
    # torn down by torchrun with SIGTERM (exitcode -15 in its summary)
    d = diagnose(os.path.join(FIX, "captured_torchrun_raise"))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == \
        ("exception", [1], [1], True), d.summary
    assert "ValueError: bad batch at step 2" in d.summary and "without a Python" not in d.summary


def test_torchrun_rank_exits_early_unnamed():
    # rank 1 calls sys.exit(0): torchrun lists only rank 0 (a lost peer) and names it "Root
    # Cause"; rank 1 appears nowhere, so no rank can be named -- and rank 0 must not be
    d = diagnose(os.path.join(FIX, "captured_torchrun_exit"))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == \
        ("missing_collective", [], [], False), d.summary
    assert "lost its peer" in d.summary and "Root Cause" in d.summary


def test_torchrun_rank_exits_early_with_tee():
    # the same run with --tee 3: rank 1's own lines name it; two ranks, no majority
    d = diagnose(os.path.join(FIX, "captured_torchrun_exit_tee"))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == \
        ("missing_collective", [0, 1], [1], False), d.summary
    assert "Rank 1 left" in d.summary and "any of ranks 0, 1 may be the odd one out" in d.summary


def test_torchrun_abort_on_exit_is_the_root_not_the_sigtermed_peers():
    # 3 ranks: rank 1's sys.exit(0) aborted (SIGABRT) with gloo threads running; ranks 0 and 2
    # lost their peer, then torchrun sent them SIGTERM
    d = diagnose(os.path.join(FIX, "captured_torchrun_exit3_abort"))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks) == ("rank_died", [1], [1]), d.summary
    assert "SIGABRT" in d.summary and "SIGTERM" not in d.summary


def test_torchrun_hang_killed_from_outside_is_judged_by_its_stacks():
    # `timeout -s TERM` killed torchrun while rank 0 waited in all_reduce and rank 1 slept
    d = diagnose(os.path.join(FIX, "captured_torchrun_hang_killed"))
    assert (d.failure_class, d.culprit_ranks, d.confident) == ("missing_collective", [1], False)
    assert d.root_ranks == []
    assert any("stopped from outside" in e["finding"] for e in d.evidence)
    assert "SIGTERM" not in d.summary


def test_slurm_time_limit_is_no_culprit_and_the_traces_decide(tmp_path):
    # the hung H200 size mismatch's COLL lines, with a SLURM console that cancelled the job
    ev = tmp_path / "job"
    shutil.copytree(os.path.join(DATA, "size_mismatch", "nccl"), ev / "nccl")
    shutil.copy(os.path.join(FIX, "synthetic_slurm_timelimit", "slurm-4242.out"), ev)
    d = diagnose(str(ev))
    assert (d.failure_class, d.culprit_ranks, d.collective_seq, d.confident, d.root_ranks) == \
        ("size_mismatch", [0, 1], 3, False, []), d.summary
    assert any("DUE TO TIME LIMIT" in e["finding"] for e in d.evidence)


def test_slurm_time_limit_alone_blames_nobody():
    d = diagnose(os.path.join(FIX, "synthetic_slurm_timelimit"))
    assert (d.failure_class, d.culprit_ranks, d.confident) == ("timeout_unknown", [], False)
    assert "stopped from outside" in d.summary


@pytest.mark.parametrize("name, cls", [("synthetic_slurm_task_failure", "rank_died"),
                                       ("synthetic_slurm_oom", "oom")])
def test_slurm_the_task_that_failed_not_the_terminated_ones(name, cls):
    d = diagnose(os.path.join(FIX, name))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == (cls, [1], [1], True)
