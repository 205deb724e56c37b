"""The reaper: a small process that outlives the parent, so that nothing a launch started can.

A notebook kernel can die by SIGKILL or SIGTERM at any moment (the "restart kernel" button, the
OOM killer, ``kill``), with no chance to run its own cleanup. Each launch and each pool start
therefore starts one reaper, in a session of its own so that a signal to the parent's process
group does not reach it::

    parent ──stdin pipe──► reaper      "pid R" per rank, "undo ARGV" per thing made outside the
                             │         run folder, then "done" when the parent cleaned up
                             │ every 1 s: remember each rank's descendants (pid + start time)
                             ▼
    "done": end any remembered descendant that escaped its rank's tree (its rank was killed)
    EOF without "done", or the parent's exit (a pidfd; a process it forked may hold the pipe
    open) = the parent died: SIGKILL every rank's process group, every descendant
    seen, every descendant still attached; run the "undo" commands, last first; remove the run
    folder; exit.

An "undo" line is a JSON list, a command that removes what the parent made outside its run folder
(``["ip", "netns", "delete", NAME]`` for a simulated node's namespace): the parent undoes it
itself when it can, the reaper only when the parent died first.

The ranks make themselves child subreapers (:mod:`.rankside`), so a descendant that starts its own
session or loses its parent stays in its rank's tree and is found. Remembered processes are
matched by start time as well as pid, so a recycled pid is never killed. It is a script of the
standard library alone (``python -S -E reaper.py RUN_DIR PARENT_PID``), reading the tree from
/proc; the ranks use the same functions to end their own descendants.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time

POLL = 1.0  # seconds between looks at the ranks' trees


def start(run_dir: str) -> subprocess.Popen:
    """Start the reaper for ``run_dir``; the caller writes ``pid N`` lines, then ``done``.
    It runs as a plain script of the standard library (``-S -E``: no site packages, no
    environment), so it costs a launch almost nothing."""
    bare = ["-S", "-E"] if os.path.isdir("/proc/self/task") else []  # psutil needs site
    return subprocess.Popen([sys.executable, *bare, os.path.abspath(__file__), run_dir,
                             str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def tell(proc: subprocess.Popen | None, line: str) -> None:
    if proc is None or proc.stdin is None:
        return
    try:
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


def release(proc: subprocess.Popen | None) -> None:
    """The parent has stopped everything itself: let the reaper go."""
    if proc is None:
        return
    tell(proc, "done")
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


# --- the process tree, read from /proc (Linux; psutil elsewhere) -----------------------------------

def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        if os.path.isdir("/proc/self/task"):
            return []  # Linux, and the process is gone
        import psutil  # no /proc: macOS and friends

        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    out = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def born(pid: int) -> float | None:
    """When ``pid`` started (an opaque number: equal for the same process, different for a
    recycled pid); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return float(f.read().rsplit(")", 1)[1].split()[19])  # starttime, in clock ticks
    except FileNotFoundError:
        return None
    except OSError:
        import psutil

        try:
            return psutil.Process(pid).create_time()
        except psutil.Error:
            return None


def end(pids: list[int], grace: float = 0.5) -> None:
    """SIGTERM ``pids``, then SIGKILL whatever is left after ``grace`` seconds."""
    sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while grace > 0 and time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.02)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def end_tree(root: int, grace: float = 0.5, limit: float = 5.0) -> list[int]:
    """End every process below ``root``, ``root`` itself spared, until none is left; returns the
    pids that were still there after ``limit`` seconds (none, unless something below forks faster
    than it can be stopped). SIGTERM first, SIGKILL after ``grace`` seconds (at once with 0).

    One look and one kill is not enough: a process that forks while it is being ended -- a
    re-forking chain, a supervisor that respawns its worker -- leaves a child that was not in the
    look. So each round stops (SIGSTOP: a stopped process forks no more) and kills what is below
    ``root`` now, and looks again. A child forked between a look and the stop is found in the
    next look: ``root`` is a subreaper, so the orphan comes to it, not to init."""
    kids = [p for p in descendants(root) if _alive(p)]
    if kids and grace > 0:
        end(kids, grace)
    deadline = time.monotonic() + limit
    while kids:
        kids = [p for p in descendants(root) if _alive(p)]
        if not kids or time.monotonic() > deadline:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in kids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        _reap_zombies(root)
        time.sleep(0.005)
    return kids


def _reap_zombies(root: int) -> None:
    """Reap this process's ended children (when ``root`` is this process: the guard, a rank)."""
    if root != os.getpid():
        return
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


# --- the reaper itself -----------------------------------------------------------------------------

def _remember(ranks: dict[int, float], seen: dict[int, float]) -> None:
    for pid in ranks:
        for d in descendants(pid):
            t = born(d)
            if t is not None:
                seen.setdefault(d, t)


def _kill_all(ranks: dict[int, float], seen: dict[int, float]) -> None:
    _remember(ranks, seen)  # what is attached right now, too
    for pid in ranks:
        # below each guard first, while it lives: it is a subreaper, so a re-forking chain's
        # newest child comes to it and is found in end_tree's next look; killing its group at
        # once killed the guard too, and that child went to init
        if born(pid) == ranks[pid]:
            end_tree(pid, grace=0, limit=2.0)
    for pid in ranks:
        try:
            os.killpg(pid, signal.SIGKILL)  # each rank leads its own session and group
        except OSError:
            pass
    # the same processes, not recycled pids
    end([p for p, t in {**seen, **ranks}.items() if born(p) == t], grace=0)


def _undo(commands: list[list[str]]) -> None:
    """Run the parent's "undo" commands, last first, each bounded; a failure stops none."""
    for argv in reversed(commands):
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
        except (OSError, subprocess.SubprocessError):
            pass


def _parent_exit_fd(parent: int) -> int | None:
    """A pidfd of ``parent`` (readable once it has exited), or None where there is none."""
    try:
        fd = os.pidfd_open(parent)
    except (AttributeError, OSError):  # Python < 3.9, Linux < 5.3, or it is gone already
        return None
    if os.getppid() != parent:  # gone before the pidfd was opened: the pid may be another's now
        os.close(fd)
        return None
    return fd


def _parent_died(ranks, seen, undo, run_dir: str) -> None:
    _kill_all(ranks, seen)
    _undo(undo)
    if not os.environ.get("DTLAB_KEEP_RUNS"):  # as Supervisor.close would
        shutil.rmtree(run_dir, ignore_errors=True)


def main(run_dir: str, parent: int | None = None) -> None:
    """Serve one parent: ``parent`` is its pid (the pipe alone cannot tell: a process the parent
    forked holds its end open after the parent died)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the parent's to handle
    ranks: dict[int, float] = {}
    seen: dict[int, float] = {}
    undo: list[list[str]] = []
    buf = b""
    fd = sys.stdin.fileno()
    exit_fd = _parent_exit_fd(parent) if parent else None
    while True:
        ready, _, _ = select.select([fd] + ([exit_fd] if exit_fd is not None else []), [], [],
                                    POLL)
        if fd in ready:
            data = os.read(fd, 4096)
            if not data:  # EOF: the parent is gone without saying "done"
                _parent_died(ranks, seen, undo, run_dir)
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word, _, arg = line.decode().partition(" ")
                if word == "done":  # the parent stopped the ranks; end any escaped descendant
                    _kill_all({}, seen)
                    return
                if word == "pid":
                    t = born(int(arg))
                    if t is not None:
                        ranks[int(arg)] = t
                if word == "undo":
                    import json  # only here: with re, ~80 ms of a bare start on a busy 2 cores

                    undo.append([str(a) for a in json.loads(arg)])
        # the parent exited (its pidfd), or we were re-parented (no pidfd here): it died
        if (exit_fd is not None and exit_fd in ready) or (parent and os.getppid() != parent):
            _parent_died(ranks, seen, undo, run_dir)
            return
        _remember(ranks, seen)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
