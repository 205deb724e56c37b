"""A stack snapshot is of the hang, not of a slow step before it: when a rank's stdout moves on
after a quiet spell, that spell's snapshot is dropped and the next quiet spell takes another."""

import os

import pytest
from conftest import assert_no_descendants

from dtlab import HangError
from dtlab.runtime.launch import launch
import rank_fns
from rank_fns import slow_step_then_hang


@pytest.mark.slow
def test_a_slow_step_does_not_leave_its_snapshot_behind(tmp_path):
    out = str(tmp_path / "ev")
    with pytest.raises(HangError):
        launch(slow_step_then_hang, nprocs=2, backend="gloo", timeout=9, evidence_dir=out,
               snapshot_quiet=1.0)
    assert_no_descendants()
    with open(os.path.join(out, "stacks", "snapshot-rank1.txt")) as f:
        stack = f.read()
    with open(rank_fns.__file__) as f:
        lines = f.read().splitlines()
    hang_line = next(i for i, ln in enumerate(lines, 1) if "time.sleep(600)   # the hang" in ln)
    slow_line = next(i for i, ln in enumerate(lines, 1) if "time.sleep(2.5)" in ln)
    assert f"rank_fns.py:{hang_line}" in stack or f"line {hang_line}" in stack, stack
    assert f"rank_fns.py:{slow_line}" not in stack and f"line {slow_line}" not in stack, stack

