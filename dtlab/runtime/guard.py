"""The guard: a small parent for each rank, so that nothing a rank started outlives it.

A rank makes itself a child subreaper (:mod:`.rankside`): while it lives, every process it
started stays in its tree, one in a session of its own included, and a rank that exits ends
them. A rank that dies at once -- SIGKILL, ``os._exit(3)``, a segfault -- ends nothing, and its
orphans went to init, out of every tree dtlab looks at (a child in a session of its own
survived 1-2 of 2 such runs: only what the reaper had seen in its last look was killed). So the
process that :mod:`.procs` starts for the rank (a fresh interpreter, or the rank zygote's fork)
forks first, before it runs anything of the rank's; the child is the rank and the parent stays
behind as its guard, a subreaper too, to which those orphans come::

    launcher ──Popen or zygote fork──► guard   session and group leader, the launcher's handle
                                         └─fork─► rank   RANK's work; its pid in RUN_DIR/pid-<RANK>
                                                   └─► whatever it starts (orphans: the guard's)

When the rank exits, however it exits, the guard ends every process left below it (SIGTERM,
SIGKILL after 0.5 s) and exits with the rank's status -- dying of the same signal when the rank
did -- so the launcher sees the rank's exit as before. If its parent dies (the launcher, or the
zygote it forked from), the guard ends everything at once (the reaper does too). Linux only
(subreapers are); elsewhere the process started is the rank.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

from . import reaper

WATCH = 0.5  # seconds between looks at the launcher while the rank runs


def become_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER: orphans below this process come to it, not to init."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 -- no libc prctl: no subreaper, no guard
        return False


def pid_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"pid-{rank}")


def rank_pid(run_dir: str, rank: int, default: int) -> int:
    """The rank's own process: the guard's child (``default``, the guard, until it forked)."""
    try:
        with open(pid_path(run_dir, rank)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return default


def start(run_dir: str) -> int:
    """Fork; returns, in the rank, the pid of the rank's parent (the guard). In the guard it
    never returns. Without a subreaper it does not fork, and returns the launcher's pid."""
    launcher = int(os.environ.get("DTLAB_PARENT_PID") or 0)
    if not become_subreaper():
        return launcher
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # for sigtimedwait, from now on
    guard = os.getpid()
    rank = os.fork()
    if rank == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        return guard
    try:
        path = pid_path(run_dir, int(os.environ["RANK"]))
        with open(path + ".tmp", "w") as f:
            f.write(str(rank))
        os.replace(path + ".tmp", path)
    except (OSError, KeyError, ValueError):
        pass  # the launcher then examines the guard: no stack, nothing worse
    _serve(rank, launcher)


def _serve(rank: int, launcher: int) -> None:
    # dtlab signals the whole group (guard and rank) and sends interrupts and stack requests to
    # the rank itself: the guard lets each one pass and waits for the rank to act on it
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    status = None
    while status is None:
        signal.sigtimedwait({signal.SIGCHLD}, WATCH)
        status = _reap(rank)
        if status is None and launcher and os.getppid() != launcher:
            # the launcher died: end everything now, as the reaper would
            reaper.end_tree(os.getpid(), grace=0)
            _reap_all(2.0)
            os._exit(137)
    if reaper.descendants(os.getpid()):
        reaper.end_tree(os.getpid(), grace=0.5)
        _reap_all(2.0)
    _exit_like(status)


def _reap(rank: int) -> int | None:
    """Reap every child that ended (the rank, or an orphan that came here); the rank's wait
    status if it was among them."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == rank:
            status = st


def _reap_all(timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return


def _exit_like(status: int) -> None:
    """Exit as the rank did: with its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        # the rank dumped its own core if there was to be one
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to end the process
    os._exit(os.waitstatus_to_exitcode(status))
