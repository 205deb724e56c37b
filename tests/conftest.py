"""Shared fixtures: every test that starts ranks proves that none is left afterwards.

Grading: the whole test run is one grading session (as one `dtlab course autograde` run is): one
seed for hidden inputs and one cache, so 08's broken capstone runs are made once per test run, not
once per test. Tests marked ``sandbox`` need bubblewrap; they skip without it, unless
DTLAB_REQUIRE_SANDBOX=1 (CI sets it), where they fail."""

import os
import secrets
import shutil
import tempfile
import time

import psutil
import pytest

from dtlab.course.graded import CACHE_ENV, SEED_ENV
from dtlab.runtime import sandbox


def _descendants():
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def _zygotes() -> set[int]:
    """The shared zygotes (dtlab.runtime.zygote: the grader's, and the ranks' of
    dtlab.runtime.procs) live as long as this process, by design; what they fork does not."""
    import sys

    z, procs = sys.modules.get("dtlab.runtime.zygote"), sys.modules.get("dtlab.runtime.procs")
    shared = list(z.Zygote._shared.values()) if z is not None else []
    shared += list(procs._ZYGOTES.values()) if procs is not None else []
    return {x.proc.pid for x in shared}


def assert_no_descendants(timeout: float = 5.0, ignore=()):
    deadline = time.monotonic() + timeout
    left = []
    while time.monotonic() < deadline:
        left = [p for p in _descendants() if p.pid not in ignore and p.pid not in _zygotes()]
        if not left:
            return
        time.sleep(0.1)
    desc = []
    for p in left:
        try:
            desc.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            pass
    if desc:
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        raise AssertionError("processes left behind:\n" + "\n".join(desc))


def pid_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def no_orphans():
    """Use in every test that starts ranks: fails if any descendant process outlives the test."""
    before = {p.pid for p in _descendants()}
    yield
    assert_no_descendants(ignore=before)


@pytest.fixture
def sigint_raises():
    """SIGINT -> KeyboardInterrupt in this process, as in a terminal or a kernel, even when the
    test run itself was started with SIGINT ignored (a background job of a non-interactive
    shell, where Python then installs no handler)."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch):
    # tests read rank output from results; keep the parent's streams to labelled lines
    monkeypatch.setenv("DTLAB_OUTPUT", os.environ.get("DTLAB_TEST_OUTPUT", "lines"))


def cuda_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def needs_gpus(n: int = 2) -> None:
    """Skip the calling test unless this machine has ``n`` GPUs (the GPU tests' one guard)."""
    if cuda_gpus() < n:
        pytest.skip(f"needs {n} GPUs")


# The longest modules first, each kept whole (its module fixtures made once): under
# pytest-xdist a long test that starts last leaves the other worker idle at the end
# (--durations on 2 cores: test_term's gradings ~300 s, 05's notebook ~140 s, test_answers
# ~300 s in all).
FIRST = ("grading/test_term.py", "test_notebooks.py", "grading/test_answers.py",
         "parity/test_ddp.py", "parity/test_checkpoint.py", "multinode/test_simulate.py")


def _first(item) -> int:
    path = item.nodeid.split("::")[0]
    return next((i for i, p in enumerate(FIRST) if path.endswith(p)), len(FIRST))


def pytest_collection_modifyitems(config, items):
    items.sort(key=_first)  # stable: the order inside each module and among the rest is kept
    if cuda_gpus() >= 1:
        return
    skip = pytest.mark.skip(reason="needs CUDA GPUs (run on a GPU machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# One grading session for the whole run, made at import (so that every process the tests start
# inherits it).
GRADING_SEED = os.environ.setdefault(SEED_ENV, secrets.token_hex(8))
_OWN_CACHE = CACHE_ENV not in os.environ
if _OWN_CACHE:
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="dtlab-test-session-")


# Under pytest-xdist (make test runs two workers) each worker has a temp dir of its own: tests
# that look for what a tool left in the temp dir see their own worker's leftovers only.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_OWN_TMP = None
if _WORKER:
    _OWN_TMP = tempfile.mkdtemp(prefix=f"dtlab-test-{_WORKER}-")
    os.environ["TMPDIR"] = _OWN_TMP
    tempfile.tempdir = None


# evidence folders a tool makes when not told where (dtlab-evidence/ in the current folder for
# a learner): the session's own, removed at the end
_OWN_EVIDENCE = "DTLAB_EVIDENCE_ROOT" not in os.environ
if _OWN_EVIDENCE:
    os.environ["DTLAB_EVIDENCE_ROOT"] = tempfile.mkdtemp(prefix="dtlab-test-evidence-")


def pytest_report_header(config):
    return f"grading seed: {GRADING_SEED} (rerun with {SEED_ENV}={GRADING_SEED} for the same hidden inputs)"


def pytest_unconfigure(config):
    if _OWN_TMP:
        shutil.rmtree(_OWN_TMP, ignore_errors=True)
    if _OWN_CACHE:
        shutil.rmtree(os.environ[CACHE_ENV], ignore_errors=True)
    if _OWN_EVIDENCE:
        shutil.rmtree(os.environ["DTLAB_EVIDENCE_ROOT"], ignore_errors=True)


@pytest.fixture(autouse=True)
def _needs_sandbox(request):
    if request.node.get_closest_marker("sandbox") is None:
        return
    why = sandbox.unavailable()
    if why is None:
        return
    if os.environ.get("DTLAB_REQUIRE_SANDBOX"):
        pytest.fail(f"no sandbox here ({why}) but DTLAB_REQUIRE_SANDBOX is set: "
                    "apt-get install bubblewrap")
    pytest.skip(f"no sandbox here: {why}")
