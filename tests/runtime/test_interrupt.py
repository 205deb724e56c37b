"""Ctrl-C, a kernel interrupt, or the death of the parent: no rank survives any of them."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dtlab
from conftest import pid_gone
from rank_fns import report_then_block

pytestmark = pytest.mark.usefixtures("no_orphans")
HERE = os.path.dirname(__file__)


def wait_for_ranks(marker_dir, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [f for f in os.listdir(marker_dir) if f.startswith("rank-") and not f.endswith(".tmp")]
        if len(files) == n:
            return [int(open(os.path.join(marker_dir, f)).read()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"ranks did not start: {os.listdir(marker_dir)}")


def test_keyboard_interrupt_in_the_parent_stops_every_rank(tmp_path, sigint_raises):
    pids = []

    def interrupt_when_ready():
        pids.extend(wait_for_ranks(tmp_path, 2))
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_ready, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        dtlab.run(report_then_block, str(tmp_path), nprocs=2, timeout=120)
    assert time.monotonic() - t0 < 60
    assert len(pids) == 2 and all(pid_gone(p, 1.0) for p in pids)


SCRIPT = textwrap.dedent("""
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if our parent ignores SIGINT
    sys.path.insert(0, {here!r})
    import dtlab
    from rank_fns import report_then_block
    try:
        dtlab.run(report_then_block, {marker!r}, nprocs=2, timeout=120)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
""")


def start_script(tmp_path):
    env = dict(os.environ, DTLAB_OUTPUT="lines")
    return subprocess.Popen([sys.executable, "-c", SCRIPT.format(here=HERE, marker=str(tmp_path))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.slow
def test_sigint_to_a_script_like_a_kernel_interrupt(tmp_path):
    proc = start_script(tmp_path)
    try:
        pids = wait_for_ranks(tmp_path, 2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "INTERRUPTED" in out and "stopped rank(s) 0, 1" in out
    assert all(pid_gone(p, 1.0) for p in pids)


@pytest.mark.slow
def test_ranks_die_with_their_parent(tmp_path):
    proc = start_script(tmp_path)
    try:
        pids = wait_for_ranks(tmp_path, 2)
        proc.kill()  # SIGKILL: the parent gets no chance to clean up
        proc.wait(10)
    finally:
        proc.kill()
    assert all(pid_gone(p, 10.0) for p in pids), "ranks outlived their parent"


@pytest.mark.parametrize("start", ["warm", "cold"])
@pytest.mark.parametrize("entry", ["Pool", "run"])
def test_ctrl_c_while_ranks_start_raises_keyboard_interrupt_and_leaves_nothing(
        entry, start, tmp_path, monkeypatch, sigint_raises):
    """Ctrl-C after the first rank started and before the next: torchrun's own handler used to
    take it (SignalException, not KeyboardInterrupt) and drop the first rank's handle; a warm
    start must not lose a forked rank either."""
    started = []
    if start == "cold":
        handler = pytest.importorskip(
            "torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler")
        popen = handler.SubprocessHandler._popen

        def tracked_popen(self, args, env):
            if started:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
            proc = popen(self, args, env)
            started.append(proc.pid)
            return proc

        monkeypatch.setenv("DTLAB_RANK_ZYGOTE", "0")
        monkeypatch.setattr(handler.SubprocessHandler, "_popen", tracked_popen)
    else:
        from dtlab.runtime.zygote import Zygote

        spawn = Zygote.spawn

        def tracked_spawn(self, *args, **kwargs):
            if started:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
            proc = spawn(self, *args, **kwargs)
            started.append(proc.pid)
            return proc

        monkeypatch.setattr(Zygote, "spawn", tracked_spawn)
    monkeypatch.setenv("DTLAB_RUN_ROOT", str(tmp_path))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(KeyboardInterrupt):
        if entry == "Pool":
            dtlab.Pool(nprocs=2, backend="gloo")
        else:
            dtlab.run(print, 1, nprocs=2, backend="gloo")
    assert len(started) == 2 and all(pid_gone(p, 5.0) for p in started)
    assert os.listdir(tmp_path) == [], "the run folder outlived the interrupt"
    assert before == {s: signal.getsignal(s) for s in before}, "the caller's handlers changed"
