"""The reaper: a small process that outlives the parent, so that nothing a launch started can.

A notebook kernel can die by SIGKILL or SIGTERM at any moment (the "restart kernel" button, the
OOM killer, ``kill``), with no chance to run its own cleanup. Each launch and each pool start
therefore starts one reaper, in a session of its own so that a signal to the parent's process
group does not reach it::

    parent ──stdin pipe──► reaper      "pid R" per rank, then "done" when the parent cleaned up
                             │ every 1 s: remember each rank's descendants (pid + start time)
                             ▼
    "done": end any remembered descendant that escaped its rank's tree (its rank was killed)
    EOF without "done" = the parent died: SIGKILL every rank's process group, every descendant
    seen, every descendant still attached; remove the run folder; exit.

The ranks make themselves child subreapers (:mod:`.rankside`), so a descendant that starts its own
session or loses its parent stays in its rank's tree and is found. Remembered processes are
matched by start time as well as pid, so a recycled pid is never killed. Run as
``python -m dtlab.runtime.reaper RUN_DIR``; it imports only psutil, never torch.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys

import psutil

POLL = 1.0  # seconds between looks at the ranks' trees (cheap enough on a 2-core box)


def start(run_dir: str) -> subprocess.Popen:
    """Start the reaper for ``run_dir``; the caller writes ``pid N`` lines, then ``done``."""
    return subprocess.Popen([sys.executable, "-m", "dtlab.runtime.reaper", run_dir],
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


def _key(p: psutil.Process):
    try:
        return p.pid, p.create_time()
    except psutil.Error:
        return None


def _remember(ranks: dict[int, float], seen: dict[int, float]) -> None:
    for pid in list(ranks):
        try:
            for child in psutil.Process(pid).children(recursive=True):
                k = _key(child)
                if k:
                    seen.setdefault(*k)
        except psutil.Error:
            pass


def _kill_all(ranks: dict[int, float], seen: dict[int, float]) -> None:
    _remember(ranks, seen)  # what is attached right now, too
    victims = []
    for pid, born in {**seen, **ranks}.items():
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - born) < 0.01:  # the same process, not a recycled pid
                victims.append(p)
        except psutil.Error:
            pass
    for pid in ranks:
        try:
            os.killpg(pid, signal.SIGKILL)  # each rank leads its own session and group
        except OSError:
            pass
    for p in victims:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=5)


def main(run_dir: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the parent's to handle
    ranks: dict[int, float] = {}
    seen: dict[int, float] = {}
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], POLL)
        if ready:
            data = os.read(fd, 4096)
            if not data:  # EOF: the parent is gone without saying "done"
                _kill_all(ranks, seen)
                shutil.rmtree(run_dir, ignore_errors=True)
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word, _, arg = line.decode().partition(" ")
                if word == "done":  # the parent stopped the ranks; end any escaped descendant
                    _kill_all({}, seen)
                    return
                if word == "pid":
                    k = _key(psutil.Process(int(arg))) if psutil.pid_exists(int(arg)) else None
                    if k:
                        ranks[k[0]] = k[1]
        _remember(ranks, seen)


if __name__ == "__main__":
    main(sys.argv[1])
