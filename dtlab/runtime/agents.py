"""External launcher processes (torchrun agents), started and stopped with the runtime's
no-orphan guarantee.

Contract: :class:`Agents` starts one command per name (each a full argv, with its own
environment), each in a session of its own with stdout and stderr merged into
``LOG_DIR/<name>.log``; a :mod:`.reaper` watches every agent's tree from the start, so if the
caller dies (SIGKILL included) the agents and everything they started die too; :meth:`stop`
(also run at interpreter exit) escalates SIGTERM -> SIGKILL over each agent's process group and
every descendant seen while it ran -- a torchrun agent starts its workers in sessions of their
own, so signalling the group alone would leave them; what the caller made outside the run folder
and names with :meth:`undo_if_killed` the reaper removes too. Used by :mod:`dtlab.multinode`::

    with Agents(run_dir) as ag:
        ag.start("node0", ["python", "-m", "torch.distributed.run", ...], env)
        codes = ag.wait(timeout=60)        # {name: exit code, None if still running}
    # leaving the block stops whatever still runs; nothing survives

The commands are the caller's (``ip netns exec NS python -m torch.distributed.run ...``); this
module only owns their lifetime, as :mod:`.procs` owns the ranks'.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import weakref

import psutil

from . import procs, reaper

_LIVE: "weakref.WeakSet[Agents]" = weakref.WeakSet()


@contextlib.contextmanager
def temporary(prefix: str):
    """:class:`Agents` under a private run folder of their own, made here and removed once they
    are stopped (``DTLAB_KEEP_RUNS=1`` keeps it): ``with agents.temporary("dtlab-x-") as ag``."""
    from .supervisor import make_run_dir

    run_dir = make_run_dir(prefix)
    try:
        with Agents(run_dir) as ag:
            yield ag
    finally:
        if not os.environ.get("DTLAB_KEEP_RUNS"):
            shutil.rmtree(run_dir, ignore_errors=True)


class Agents:
    """Named external commands under one run folder, one reaper, one stop."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.log_dir = os.path.join(run_dir, "agents")
        os.makedirs(self.log_dir, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, str] = {}
        self.exit_codes: dict[str, int | None] = {}
        self._seen: dict[int, float] = {}  # descendants: pid -> start time (never a recycled pid)
        self._reaper = reaper.start(run_dir)
        _LIVE.add(self)

    def __enter__(self) -> "Agents":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        """Start ``argv`` as agent ``name``; returns its pid."""
        log = os.path.join(self.log_dir, f"{name}.log")
        with open(log, "wb") as f:
            p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                 stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self.procs[name], self.logs[name], self.exit_codes[name] = p, log, None
        reaper.tell(self._reaper, f"pid {p.pid}")
        return p.pid

    def undo_if_killed(self, argv: list[str]) -> None:
        """Should the caller die before :meth:`stop` (SIGKILL included), the reaper runs ``argv``
        once the agents are ended: for what the caller made outside the run folder, e.g.
        ``["ip", "netns", "delete", NAME]``. The caller still undoes it itself on a normal exit."""
        reaper.tell(self._reaper, "undo " + json.dumps(argv))

    def poll(self) -> dict[str, int | None]:
        self._remember()
        for name, p in self.procs.items():
            if self.exit_codes[name] is None:
                self.exit_codes[name] = p.poll()
        return dict(self.exit_codes)

    def wait(self, timeout: float, names: list[str] | None = None, tick: float = 0.1
             ) -> dict[str, int | None]:
        """Until every agent in ``names`` (default all) exited, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        names = list(self.procs) if names is None else names
        while True:
            codes = self.poll()
            if all(codes[n] is not None for n in names) or time.monotonic() >= deadline:
                return codes
            time.sleep(tick)

    def output(self, name: str) -> str:
        try:
            with open(self.logs[name], errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _remember(self) -> None:
        for p in self.procs.values():
            try:
                for d in psutil.Process(p.pid).children(recursive=True):
                    self._seen.setdefault(d.pid, d.create_time())
            except psutil.Error:
                pass

    def stop(self, grace: float = 3.0) -> list[str]:
        """SIGTERM each agent's group (torchrun forwards it to its workers), SIGKILL what is left
        after ``grace`` seconds, agents and every descendant seen. Returns the agents that were
        still running. Idempotent."""
        if self._reaper is None:
            return []
        running = [n for n, c in self.poll().items() if c is None]
        try:
            self._signal(signal.SIGTERM)
            self._wait(grace)
        finally:
            self._signal(signal.SIGKILL)
            self._wait(10.0)
            self.poll()
            reaper.release(self._reaper)
            self._reaper = None
            _LIVE.discard(self)
        return running

    def _alive_seen(self) -> list[psutil.Process]:
        out = []
        for pid, t in self._seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == t and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def _signal(self, sig: int) -> None:
        self._remember()
        procs.signal_all(self.procs, self._alive_seen(), sig)

    def _wait(self, timeout: float) -> None:
        procs.wait_all(self.procs, self._alive_seen(), timeout)


@atexit.register
def _stop_all_at_exit() -> None:
    for ag in list(_LIVE):
        try:
            ag.stop(grace=1.0)
        except BaseException:
            pass
