"""What test cells call for their own work: the same in JupyterLab, under the grader, and in CI.

A test cell runs jobs of its own -- a program whose result a learner predicts, a job that fails
on purpose -- and, when it needs hidden inputs drawn at random, a random generator::

    from dtlab import course
    res = course.run_graded(program, nprocs=2)     # the test's own code, never the learner's
    rng = course.rng()                             # one draw per grading session

Under the grader (``NBGRADER_EXECUTION`` is set by ``dtlab course grade``, as by ``nbgrader
validate``) or on a machine without enough GPUs the ranks run on gloo and the CPU, so every
grader computes the same answer key whatever hardware it has. GPU-only observations come from
recorded real data (:func:`dtlab.course.recorded`), never from skipping a check. (A learner's
own function runs through :func:`dtlab.course.answer` or :class:`dtlab.course.Ranks`.)
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from typing import Any, Callable

SEED_ENV = "DTLAB_GRADING_SEED"     # one seed per grading session (an autograde run)
CACHE_ENV = "DTLAB_GRADING_CACHE"   # a folder the session's gradings share (hidden inputs made once)

# The test's own jobs (a program whose result a learner predicts, a job that fails on purpose):
# 2-3 s on 2 idle cores, and they end by themselves; the bound is for a machine as busy as it
# gets, which must not cost a learner a mark.
GRADED_RUN_TIMEOUT = 300.0


def grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate).

    >>> from dtlab import course
    >>> course.grading()          # in JupyterLab or a terminal; True inside nbgrader
    False
    """
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def rng() -> random.Random:
    """A random generator for hidden inputs: the grading session's (``DTLAB_GRADING_SEED``, set
    by ``dtlab course autograde`` for all of its submissions, so each hidden input is made once
    and every student meets the same ones), else a fresh one."""
    seed = os.environ.get(SEED_ENV)
    return random.Random(seed) if seed else random.Random()


def backend(nprocs: int | None = None) -> str:
    """The backend graded cells use: ``"gloo"`` under nbgrader or without ``nprocs`` GPUs, else
    ``"auto"`` (NCCL, one GPU per rank).

    >>> from dtlab import course
    >>> course.backend(nprocs=1024)
    'gloo'
    """
    if grading():
        return "gloo"
    from ..runtime.plan import gpu_count

    return "auto" if gpu_count() >= (nprocs or 1) else "gloo"


def run_graded(fn: Callable[..., Any], *args, nprocs: int = 2,
               timeout: float = GRADED_RUN_TIMEOUT, **kwargs):
    """``dtlab.run`` as a graded test cell needs it: the course backend, a bounded timeout, and
    nothing on stderr.

    nbgrader scores a test cell that writes anything to stderr as failed, whatever its asserts
    say. So rank output (a gloo warning, a learner's debug print to stderr) is not relayed at
    all, and what the launcher itself says on stderr in this process (a note about the backend,
    a diagnostic) goes to stdout instead. Nothing is lost: every rank's stdout/stderr is in the
    returned results, and a failure still raises :class:`dtlab.RankError` /
    :class:`dtlab.HangError` with the tracebacks.

    >>> import os
    >>> from dtlab import course
    >>> res = course.run_graded(os.getpid, nprocs=2)     # doctest: +SKIP
    >>> res.values == [res[0].pid, res[1].pid]          # doctest: +SKIP
    True
    """
    from ..runtime.launch import run

    previous = os.environ.get("DTLAB_OUTPUT")
    os.environ["DTLAB_OUTPUT"] = "none"
    try:
        with contextlib.redirect_stderr(sys.stdout):
            return run(fn, *args, nprocs=nprocs, backend=backend(nprocs), timeout=timeout, **kwargs)
    finally:
        if previous is None:
            os.environ.pop("DTLAB_OUTPUT", None)
        else:
            os.environ["DTLAB_OUTPUT"] = previous
