"""Broken capstone runs on 3 gloo ranks, made once per pytest process and shared: the hang
tests (tests/capstone/test_capstone_hang.py) assert dtlab's diagnosis of them, and the 08
shortcut suite (tests/grading/test_shortcuts_08.py) grades postmortems on unlabeled copies of
the same folders. Each run costs about 8-12 s on 2 cores; sharing saves a batch of four."""

import atexit
import os
import shutil
import tempfile

_RUNS: dict = {}
_DIR: list = []


def _dir() -> str:
    if not _DIR:
        _DIR.append(tempfile.mkdtemp(prefix="dtlab-test-capstone-"))
        atexit.register(shutil.rmtree, _DIR[0], True)
    return _DIR[0]


def run(bug: str, culprit: int | None = None, at_step: int | None = None,
        baseline: str | None = None) -> dict:
    """``dtlab capstone hang`` on 3 gloo ranks (its report), made once per set of arguments."""
    from dtlab.capstone.hang import hang

    key = (bug, culprit, at_step, baseline)
    if key not in _RUNS:
        out = os.path.join(_dir(), f"{bug}-{len(_RUNS)}")
        _RUNS[key] = hang(bug, nprocs=3, backend="gloo", out=out, culprit=culprit,
                          at_step=at_step, baseline=baseline)
    return _RUNS[key]


def unseen(bug: str, default_culprit: int = 2) -> dict:
    """A run of ``bug`` whose culprit is not rank 1 (the notebook's): one made already if any,
    else a new one on ``default_culprit``."""
    for (b, culprit, _, _), report in _RUNS.items():
        if b == bug and report["culprit_rank"] != 1:
            return report
    return run(bug, culprit=default_culprit)
