"""Helpers of the bad-input tables: nothing may start, and a command runs in a fork with a time
limit (and the fixture :func:`nothing_starts`; not a conftest.py: tests import theirs as
``conftest``, and a second one here would shadow it).

A fork of this process (every module the commands import already imported) runs
``dtlab.cli.main`` with stdout and stderr as a terminal has them -- stderr escapes what is not
UTF-8, stdout is strict -- and the exit status ``python -m dtlab`` would give, a traceback
included. So a case that hangs (a FIFO read) is killed at its limit instead of hanging the suite,
and costs milliseconds instead of a fresh interpreter's seconds of ``import torch``."""

from __future__ import annotations

import io
import multiprocessing.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import pytest

_fork = os.fork  # the real one, for run_cli, whatever a test patched since


class Started(BaseException):
    """Raised where a process would have started (BaseException: no ``except Exception`` on
    the way swallows it)."""


def _refuse(*args, **kwargs):
    raise Started("a process was about to start")


# every way dtlab starts a process: subprocess (ranks, the reaper, nvidia-smi, alembic),
# multiprocessing's spawn, a fork (the zygote)
_STARTERS = [(subprocess.Popen, "_execute_child"), (os, "fork"), (os, "forkpty"),
             (os, "posix_spawn"), (os, "posix_spawnp"), (multiprocessing.util, "spawnv_passfds")]


def refuse_starts(setattr=setattr) -> None:
    """Make every way of starting a process raise :class:`Started` (``setattr``: pytest's
    ``monkeypatch.setattr`` to undo it after a test)."""
    for owner, name in _STARTERS:
        setattr(owner, name, _refuse)


# what the commands import lazily: imported once here, so that a case's time limit measures the
# command's own work, not a first import of torch or SQLAlchemy
WARM = ["dtlab.bench", "dtlab.bench.engine", "dtlab.capstone.baseline", "dtlab.capstone.hang",
        "dtlab.course.api", "dtlab.hang.diagnose.pipeline", "dtlab.hang.reproduce",
        "dtlab.nccl_log", "dtlab.nccl_log.report", "dtlab.runtime.plan", "dtlab.topology",
        "dtlab.tuning", "dtlab.tuning.runner", "sqlalchemy.engine", "pandas"]


def warm() -> None:
    import importlib

    from dtlab import cli

    cli.build_parser()  # imports every command's module (capstone's: torch)
    for name in WARM:
        importlib.import_module(name)


@dataclass
class Outcome:
    status: int | str  # exit status, or "killed at the limit"
    stdout: str
    stderr: str
    seconds: float


def run_cli(argv: list[str], limit: float = 5.0) -> Outcome:
    """``dtlab ARGV`` in a fork of this process, killed (with its process group) after
    ``limit`` seconds; starting any process inside raises :class:`Started`."""
    from dtlab import cli

    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    start = time.monotonic()
    pid = _fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setpgid(0, 0)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                          errors="strict", line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace", line_buffering=True)
            refuse_starts()
            try:
                code = cli.main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # what the interpreter prints for an uncaught exception
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    status: int | str = "killed at the limit"
    while time.monotonic() - start < limit:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(wait_status)
            break
        time.sleep(0.005)
    else:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    out.seek(0)
    err.seek(0)
    return Outcome(status, out.read().decode("utf-8", "replace"),
                   err.read().decode("utf-8", "replace"), seconds)


@pytest.fixture
def nothing_starts(monkeypatch):
    """Any attempt to start a process raises :class:`Started`."""
    refuse_starts(monkeypatch.setattr)
