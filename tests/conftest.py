"""Shared fixtures: every test that starts ranks proves that none is left afterwards."""

import os
import time

import psutil
import pytest


def _descendants():
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def assert_no_descendants(timeout: float = 5.0, ignore=()):
    deadline = time.monotonic() + timeout
    left = []
    while time.monotonic() < deadline:
        left = [p for p in _descendants() if p.pid not in ignore]
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


def pytest_collection_modifyitems(config, items):
    if cuda_gpus() >= 1:
        return
    skip = pytest.mark.skip(reason="needs CUDA GPUs (run on a GPU machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
