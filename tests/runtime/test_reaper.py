"""The reaper's "undo" entries: run when the parent dies, not when the parent cleaned up itself."""

import json
import os

from dtlab.runtime import reaper


def _reap(run_dir, lines: list[str]) -> None:
    p = reaper.start(str(run_dir))
    for line in lines:
        reaper.tell(p, line)
    p.stdin.close()  # the parent's end of the pipe closes: as if it died, unless "done" came first
    p.wait(timeout=30)


def test_undo_runs_when_the_parent_dies_last_first(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "undone"
    run_dir.mkdir()
    _reap(run_dir, [f"undo {json.dumps(['sh', '-c', f'echo {w} >> {log}'])}" for w in ("a", "b")])
    assert log.read_text().split() == ["b", "a"]  # what was made last is undone first
    assert not run_dir.exists()


def test_undo_is_not_run_after_done(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "undone"
    run_dir.mkdir()
    _reap(run_dir, [f"undo {json.dumps(['touch', str(log)])}", "done"])
    assert not os.path.exists(log) and run_dir.exists()
