"""Warm starts (ranks forked from a zygote, dtlab.runtime.procs) against cold ones (fresh
interpreters through torch elastic): a rank must not be able to tell them apart."""

import os
import signal
import sys
import threading

import pytest

import dtlab
from dtlab.runtime import procs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="warm starts: Linux")

RUN_SPECIFIC = ("DTLAB_PARENT_PID", "TORCHELASTIC_ERROR_FILE", "DTLAB_FR_DIR", "MASTER_PORT",
                "DTLAB_RANK_ZYGOTE")


def rank_view():
    import signal as sg

    import torch
    import torch.distributed as dist

    return {"path": list(sys.path), "cwd": os.getcwd(), "flags": list(sys.flags),
            "env": {k: v for k, v in os.environ.items() if k not in RUN_SPECIFIC},
            "threads": torch.get_num_threads(), "debug": str(dist.get_debug_level()),
            "write_through": sys.stdout.write_through, "argv0": os.path.basename(sys.argv[0]),
            "main": sys.modules["__main__"].__name__, "cuda": torch.cuda.is_initialized(),
            "signals": [str(sg.getsignal(s)) for s in (sg.SIGINT, sg.SIGTERM, sg.SIGHUP,
                                                        sg.SIGPIPE, sg.SIGCHLD)],
            "session_leader": os.getsid(0) == os.getpgid(0)}


@pytest.mark.slow
def test_a_warm_rank_sees_what_a_cold_one_does(monkeypatch, no_orphans):
    """Path, working folder, interpreter flags, environment, thread count, the
    TORCH_DISTRIBUTED_DEBUG level torch reads at import, stdio buffering, signal handlers."""
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    seen = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("DTLAB_RANK_ZYGOTE", mode)
        seen[mode] = dtlab.run(rank_view, nprocs=2, backend="gloo").values
    assert seen["1"] == seen["0"]
    assert seen["1"][0]["debug"].endswith("DETAIL") and seen["1"][0]["threads"] == int(
        seen["1"][0]["env"]["OMP_NUM_THREADS"])


def test_a_start_up_variable_gets_a_zygote_of_its_own(no_orphans):
    """PYTHON* variables are read as an interpreter starts: a fork of a zygote started without
    them would not have them take effect."""
    flag = dtlab.run(lambda: sys.flags.dont_write_bytecode, nprocs=1, backend="gloo",
                     env={"PYTHONDONTWRITEBYTECODE": "1"}).values
    plain = dtlab.run(lambda: sys.flags.dont_write_bytecode, nprocs=1, backend="gloo").values
    assert flag == [1] and plain == [int(sys.flags.dont_write_bytecode)]


def stuck():
    import time

    time.sleep(120)


@pytest.mark.slow
def test_a_dead_zygote_ends_its_ranks_not_the_launch(no_orphans):
    """The zygote killed under running ranks: each guard sees its parent go and ends its rank;
    the launch reports the failure (no hang), and the next launch starts a new zygote."""
    import threading

    def kill_zygote():
        import time

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            busy = [z for z in procs._ZYGOTES.values() if z.busy()]
            if busy:
                time.sleep(1.0)
                os.kill(busy[0].pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    threading.Thread(target=kill_zygote, daemon=True).start()
    with pytest.raises(dtlab.RankError):
        dtlab.run(stuck, nprocs=2, backend="gloo", timeout=60)
    assert dtlab.run(lambda: 7, nprocs=2, backend="gloo").values == [7, 7]


@pytest.mark.slow
def test_a_start_up_variable_of_the_launcher_itself_counts_too(monkeypatch, no_orphans):
    """Set in this process's environment between two launches (a notebook's os.environ), not
    through env=: the second launch must not fork from the first one's zygote."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    first = dtlab.run(lambda: sys.flags.dont_write_bytecode, nprocs=1, backend="gloo").values
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    second = dtlab.run(lambda: sys.flags.dont_write_bytecode, nprocs=1, backend="gloo").values
    assert (first, second) == ([0], [1])


def test_left_behind_names_the_zygote_as_a_helper_and_an_open_pool_as_left():
    dtlab.run(lambda: 1, nprocs=2, backend="gloo")
    lb = dtlab.left_behind()
    assert not lb and lb.helpers and "nothing left behind" in str(lb)
    pool = dtlab.Pool(nprocs=2, backend="gloo")
    try:
        assert dtlab.left_behind(), "an open pool's ranks are alive: they must be listed"
    finally:
        pool.close()
    assert not dtlab.left_behind()


def _umask_and_nofile():
    import resource

    m = os.umask(0)
    os.umask(m)
    return m, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_a_forked_rank_has_the_launchers_umask_and_limits_of_now():
    """A fresh interpreter inherits the launcher's umask and rlimits as they are at the launch;
    a fork of the zygote had the zygote's, from when it started (a probe's finding)."""
    import resource

    dtlab.run(lambda: 1, nprocs=1, backend="gloo")  # the zygote exists, with today's settings
    old_mask, old_nofile = os.umask(0o077), resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, old_nofile[1]))
        assert dtlab.run(_umask_and_nofile, nprocs=1, backend="gloo").values == [(0o077, 512)]
    finally:
        os.umask(old_mask)
        resource.setrlimit(resource.RLIMIT_NOFILE, old_nofile)


@pytest.mark.slow
def test_an_environment_too_large_for_the_zygote_starts_fresh_interpreters():
    big = {f"BIG_TEST_VALUE_{i}": "x" * 100_000 for i in range(3)}  # one message: too long
    assert dtlab.run(lambda: 1, nprocs=2, backend="gloo", env=big).values == [1, 1]


def test_a_fork_of_the_launcher_does_not_inherit_a_held_zygote_lock():
    held, go = threading.Event(), threading.Event()

    def hold():
        with procs._ZYGOTES_LOCK:
            held.set()
            go.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the thread that held it is not in this process
        os._exit(0 if procs._ZYGOTES_LOCK.acquire(timeout=5) else 1)
    go.set()
    t.join()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
