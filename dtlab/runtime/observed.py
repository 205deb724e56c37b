"""Observed jobs: ranks that can reach each other only through the relay, which records it all.

A rank function runs on N fresh processes, as with :func:`dtlab.run`, but their process group
is the relay (:mod:`.relay`, :mod:`.relaypg`): every send, receive and collective goes through
this process, which serves it and writes it down. What comes back is plain data (JSON), never a
pickle, so the ranks may run code this process does not trust::

    out = observed.run(fn, [(a0,), (a1,)], offer={"send", "recv"})
    out.values          # {rank: answer}
    out.traffic         # every message, in the order the relay saw them (relay.Message)
    out.errors          # {rank: traceback or reason}
    out.stopped         # "" or why the job was stopped: CPU, a deadlock, silence, wall time

Bounds that a busy machine does not move: ``cpu_s`` (the ranks' CPU time together), a
**deadlock** (every live rank waiting on the relay, and no CPU used for ``DEADLOCK_S``: the relay
names what each waits for), and **silence** (no CPU used and no message for ``idle_s``). A wall
clock bound (``wall_s``) is a backstop only.

How a rank process is started is the caller's (``spawn``): a plain child by default, forked
from a zygote that has already imported torch (:func:`warm_spawn`, :mod:`.zygote`), or moved
into a sandbox of its own (:mod:`.sandbox`) when graded. Each rank runs
``observed_rank.main(SOCKET)`` (cold: ``python -I observed_rank.py SOCKET``); the call
(``fn`` and each rank's arguments) is pickled here and unpickled there -- by the ranks, from
this process: the safe direction.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .relay import Message, Relay, pack
from .sandbox import kill_tree, tree_cpu_seconds

RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observed_rank.py")
DEADLOCK_S = 5.0
OUTPUT_LINES = 1000  # per rank


@dataclass
class Outcome:
    values: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    traffic: list[Message] = field(default_factory=list)
    outputs: dict[int, str] = field(default_factory=dict)
    stopped: str = ""
    cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and not self.stopped


def plain_spawn(rank: int, argv: list[str], socket_path: str) -> subprocess.Popen:
    """A rank as a plain child process in a session of its own (it dies with its parent)."""
    return subprocess.Popen([*argv, socket_path], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)


# what a rank imports before it reads its job: a zygote (:mod:`.zygote`) imports it once
RANK_MAIN = "dtlab.runtime.observed_rank:main"
# torch._dynamo: what DDP's constructor imports (procs.WARM_PRELOAD says why)
RANK_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "cloudpickle"]
# one thread per rank process: the ranks of a job share the machine (and, graded, a cgroup)
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def warm_spawn(zygote, path: list[str]) -> Callable[[int, list[str], str], Any]:
    """A ``spawn`` for :func:`run`: each rank forked from ``zygote`` (a
    :class:`~dtlab.runtime.zygote.Zygote` with :data:`RANK_PRELOAD`) as a plain child with this
    process's environment and ``path`` first on its ``sys.path``: no sandbox, only no
    ``import torch`` per rank."""
    def spawn(rank: int, argv: list[str], socket_path: str):
        return zygote.spawn(RANK_MAIN, [socket_path], env={**os.environ, **RANK_ENV},
                            cwd=os.getcwd(), path=path)

    return spawn


def run(fn: Callable, per_rank: list[tuple], *, offer: set[str] | None = None,
        max_numel: dict[str, int] | None = None, kwargs: dict | None = None,
        path: list[str] | None = None,
        deliver: Callable | None = None, serve: Callable | None = None,
        spawn: Callable[[int, list[str], str], subprocess.Popen] = plain_spawn,
        cpu_s: float = 120.0, idle_s: float = 60.0, wall_s: float = 1800.0) -> Outcome:
    """``fn(*per_rank[r], **kwargs)`` on rank r of ``len(per_rank)`` observed ranks. ``path``:
    the ranks' ``sys.path`` comes first (default: this process's, so that functions of
    importable modules, which travel by reference, resolve there too)."""
    import cloudpickle

    n = len(per_rank)
    folder = tempfile.mkdtemp(prefix="dtlab-observed-")
    os.chmod(folder, 0o700)
    relay = Relay(n, folder, offer=offer, max_numel=max_numel, deliver=deliver, serve=serve)
    procs: dict[int, subprocess.Popen] = {}
    outputs: dict[int, list[str]] = {r: [] for r in range(n)}
    out = Outcome()
    try:
        for r in range(n):
            call = cloudpickle.dumps((fn, tuple(per_rank[r]), kwargs or {}))
            relay.jobs[r] = ({"t": "job", "rank": r, "world": n,
                              "path": list(sys.path) if path is None else path}, call)
        argv = [sys.executable, "-I", RANK_SCRIPT]
        for r in range(n):
            procs[r] = spawn(r, argv, relay.paths[r])
            threading.Thread(target=_collect, args=(procs[r].stdout, outputs[r]),
                             daemon=True).start()
        out.stopped, out.cpu_s = _serve(relay, procs, cpu_s, idle_s, wall_s)
    finally:
        for p in procs.values():
            try:
                p.wait(timeout=2 if not out.stopped else 0.01)
            except subprocess.TimeoutExpired:
                pass
            kill_tree(p.pid)
            p.wait()
        relay.close()
        shutil.rmtree(folder, ignore_errors=True)
    for r, p in procs.items():
        if r not in relay.results and r not in relay.errors:
            relay.errors[r] = f"rank {r} exited ({p.returncode}) before it reached the relay"
    out.values, out.errors, out.traffic = dict(relay.results), dict(relay.errors), relay.traffic
    time.sleep(0.05)  # the output threads' last lines
    out.outputs = {r: "".join(lines) for r, lines in outputs.items()}
    return out


def _serve(relay: Relay, procs: dict, cpu_s: float, idle_s: float,
           wall_s: float) -> tuple[str, float]:
    """Serve until every rank answered; ("", CPU used) or (why it was stopped, CPU used)."""
    start = last_cpu_move = time.monotonic()
    cpu0 = last_cpu = _cpu_of(procs)
    next_look = start
    while not relay.done():
        relay.step(0.05)
        now = time.monotonic()
        if now < next_look:
            continue
        next_look = now + 0.25
        for r, p in procs.items():
            if p.poll() is not None and r not in relay.results and r not in relay.errors \
                    and r not in relay.conns:
                relay.errors[r] = f"rank {r} exited ({p.returncode}) before it reached the relay"
        cpu = max(_cpu_of(procs), last_cpu)  # a rank that exited takes its count with it
        if cpu - cpu0 > cpu_s:
            return f"the ranks used more than {cpu_s:g} s of CPU time together", cpu - cpu0
        if cpu > last_cpu + 0.05:
            last_cpu, last_cpu_move = cpu, now
        quiet = now - max(last_cpu_move, relay.last_message)
        live = [r for r in procs if r not in relay.results and r not in relay.errors]
        waiting = relay.waiting()
        if live and all(r in waiting for r in live) and quiet > DEADLOCK_S:
            said = "; ".join(f"rank {r} waits in {', '.join(waiting[r])}" for r in live)
            return f"deadlock: every rank still running waits for another ({said})", cpu - cpu0
        if quiet > idle_s:
            return f"the ranks used no CPU and sent nothing for {idle_s:g} s", cpu - cpu0
        if now - start > wall_s:
            return f"the job ran for more than {wall_s:g} s", cpu - cpu0
    return relay.stopped, max(_cpu_of(procs), last_cpu) - cpu0


def _cpu_of(procs: dict) -> float:
    return sum(tree_cpu_seconds(p.pid) for p in procs.values())


def _collect(stream, lines: list[str]) -> None:
    for line in iter(lambda: stream.readline(4096), b""):
        if len(lines) < OUTPUT_LINES:
            lines.append(line.decode(errors="replace"))
        elif len(lines) == OUTPUT_LINES:
            lines.append(f"[more than {OUTPUT_LINES} lines; the rest is not shown]\n")
    try:
        stream.close()
    except OSError:
        pass


def mark(info: dict) -> None:
    """Rank side: a note in the relay's record (where a harness's case begins, ...)."""
    _conn().tell({"t": "mark", "info": info})


def fetch(info: dict) -> tuple[dict, bytes]:
    """Rank side: ask the launcher's ``serve`` hook for something (a dataset's sample)."""
    fut = _conn().ask({"t": "fetch", "info": info}, b"", lambda h, p: (h, p))
    return fut.wait()


def _conn():
    import torch.distributed as dist

    group = dist.group.WORLD
    conn = getattr(group, "conn", None)
    if conn is None:
        raise RuntimeError("not inside an observed job (the relay's process group)")
    return conn


__all__ = ["run", "Outcome", "Message", "plain_spawn", "mark", "fetch", "pack"]
