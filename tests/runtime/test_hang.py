"""A hang: the timeout passes, every live rank's stack is captured, all ranks are stopped."""

import os
import re

import psutil
import pytest

import dtlab
from conftest import pid_gone
from rank_fns import SlowToLoad, child_then_hang, hang_mismatched, quick

pytestmark = pytest.mark.usefixtures("no_orphans")

HERE = os.path.join(os.path.dirname(__file__), "rank_fns.py")


def blocking_line(tag: str) -> int:
    for i, line in enumerate(open(HERE), 1):
        if f"# BLOCKS HERE {tag}" in line or (tag == "" and "# BLOCKS HERE" in line):
            return i
    raise AssertionError(tag)


@pytest.mark.slow
@pytest.mark.parametrize("prefer", ["py-spy", "faulthandler"])
def test_hang_names_the_blocking_line_of_every_rank(prefer, monkeypatch):
    monkeypatch.setenv("DTLAB_STACKS", prefer)
    with pytest.raises(dtlab.HangError) as ei:
        dtlab.run(hang_mismatched, nprocs=2, timeout=3)
    e = ei.value
    assert isinstance(e, TimeoutError)
    assert set(e.stacks) == {0, 1}
    assert e.method == prefer
    for rank in (0, 1):
        line = blocking_line(f"rank {rank}")
        assert re.search(rf"rank_fns\.py\"?(:|, line ){line}\b", e.stacks[rank]), e.stacks[rank]
        assert f"rank_fns.py:{line}" in str(e)  # the summary names it too
    assert "dist.recv(t, src=0)" in str(e)
    assert e.results[0].exit_code is not None  # stopped


@pytest.mark.slow
def test_hang_stops_grandchildren_too():
    with pytest.raises(dtlab.HangError) as ei:
        dtlab.run(child_then_hang, nprocs=2, timeout=4)
    pids = [int(m) for r in (0, 1)
            for m in re.findall(r"(?:CHILD|RANKPID) (\d+)", ei.value.results[r].stdout)]
    assert len(pids) == 4
    for pid in pids:
        assert pid_gone(pid), psutil.Process(pid).cmdline()


@pytest.mark.slow
def test_timeout_counts_from_fn_not_from_a_slow_start():
    """A start-up slower than timeout= (here a 3 s unpickle; on a busy machine, import torch)
    is not the user's code hanging: timeout counts once every rank is inside fn."""
    res = dtlab.run(quick, SlowToLoad(3.0), nprocs=2, backend="gloo", timeout=1.5)
    assert res.values == [0, 1]


def test_start_up_has_its_own_bound_and_says_so(tmp_path):
    from dtlab.runtime.launch import launch

    with pytest.raises(dtlab.HangError) as ei:
        launch(quick, (SlowToLoad(30.0),), nprocs=2, backend="gloo", timeout=60,
               start_timeout=1.0, evidence_dir=str(tmp_path))
    e = ei.value
    assert e.phase == "start" and e.late == [0, 1]
    assert "did not reach fn within start_timeout=1 s" in str(e)
    assert "raise start_timeout=" in str(e)
    assert e.diagnosis.failure_class == "start_timeout"
    assert e.diagnosis.culprit_ranks == [0, 1]
