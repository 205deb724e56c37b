"""``dtlab.Pool``: ranks that stay up between cells, with their process group and their variables.

Launching costs seconds (import torch, join the group, create NCCL communicators); a cell of
work often costs microseconds. A pool pays the launch once::

    with dtlab.Pool(nprocs=2) as pool:
        pool.exec("x = torch.ones(2, device=device) * (rank + 1); dist.all_reduce(x)")
        pool.pull("x")                       # {0: tensor([3., 3.]), 1: tensor([3., 3.])}
        pool.run(lambda: dist.get_rank())    # Results, as dtlab.run returns

A pool is the second client of :class:`.supervisor.Supervisor` (the one-shot ``dtlab.run`` is
the first): the supervisor owns the processes, the run folder and the wait loop; the pool adds
the command channel (:mod:`.channel`, messages in :mod:`.messages`) and per-rank namespaces.

The failure contract is dtlab.run's, applied to a long-lived thing:

* a cell raises on some ranks -> RankError; if the others finish, the pool is untouched; if
  they are stuck waiting for the failed rank inside a collective, the pool restarts itself
  (fresh namespaces) and the error says so;
* a rank process dies -> RankError naming it; the pool is *broken* until ``restart()``;
* the timeout passes -> every busy rank's stack, then the pool restarts itself -> HangError;
* Ctrl-C / the notebook's interrupt button -> the ranks' current cell is interrupted
  (KeyboardInterrupt inside the ranks); ranks that cannot be interrupted (blocked in C++) are
  restarted. The caller never blocks past the timeout.
"""

from __future__ import annotations

import linecache
import os
import shutil
import signal
import sys
import time
import weakref
from multiprocessing.connection import wait as wait_conns

import cloudpickle

from . import output, plan as _plan
from .channel import ControlServer, write_key
from .errors import Failure, HangError, LaunchError, PoolBrokenError, RankError
from .messages import Done, Exec, Pull, Push, Ready, Run, Shutdown, StartFailed
from .payload import dumps, dumps_checked, pack_call, parent_context, source_lines_for
from .results import RankResult, Results
from .supervisor import (DEAD, FAILED, OK, RUNNING, Supervisor, exit_failure, make_run_dir)

TICK = 0.05  # longest wait for replies in one look; replies wake the loop at once
_POOLS: "weakref.WeakSet[Pool]" = weakref.WeakSet()


class Pool:
    """N persistent ranks with the default process group initialized (see module docstring)."""

    def __init__(self, nprocs: int | None = None, backend: str = "auto", env: dict | None = None,
                 start_timeout: float = 300.0, pg_timeout: float | None = None):
        self.start_timeout = _plan.check_timeout(start_timeout, "start_timeout")
        self.plan = _plan.resolve(nprocs, backend, env, pg_timeout)
        self.broken: str | None = None
        self.restarts = 0
        self._sup: Supervisor | None = None
        self._cells = 0
        if self.plan.note:
            print(self.plan.note, file=sys.stderr)
        self._start()
        _POOLS.add(self)

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def nprocs(self) -> int:
        return self.plan.nprocs

    @property
    def backend(self) -> str:
        return self.plan.backend

    @property
    def _run_dir(self) -> str | None:
        return self._sup.run_dir if self._sup else None

    def _start(self) -> None:
        self._conns: dict[int, object] = {}
        self._offsets: dict[int, tuple[int, int]] = {}
        self._info: dict[int, dict] = {}
        run_dir, server = make_run_dir("dtlab-pool-"), None
        try:
            server = ControlServer(run_dir, write_key(run_dir))
            with open(os.path.join(run_dir, "context.pkl"), "wb") as f:
                cloudpickle.dump(parent_context(), f)
            self._sup = sup = Supervisor(self.plan, "serve", (server.address,), run_dir=run_dir)
        except BaseException:  # before any rank (Ctrl-C too): close the socket, remove the folder
            if server is not None:
                server.close()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        failed: dict[int, str] = {}
        pending: list = []

        def progress(tick: float) -> dict[int, str]:
            while not server.accepted.empty():
                pending.append(server.accepted.get())
            for conn in wait_conns(pending, timeout=tick) if pending else []:
                pending.remove(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    continue
                if isinstance(msg, StartFailed):
                    failed[msg.rank] = msg.traceback
                elif isinstance(msg, Ready):
                    self._conns[msg.rank], self._offsets[msg.rank] = conn, msg.offsets
                    self._info[msg.rank] = {"pid": msg.pid, "device": msg.device,
                                            "last_s": None, "cells": 0}
            if not pending:
                time.sleep(tick / 5)
            codes = sup.procs.poll()
            return {r: FAILED if r in failed else OK if r in self._conns
                    else RUNNING if codes[r] is None else DEAD for r in codes}

        try:
            sup.start()
            pump = output.OutputPump(sup.files, output.LinesSink(out=sys.stderr), self.plan.labels())
            outcome = sup.wait(list(range(self.nprocs)), progress, pump, self.start_timeout)
            pump.pump()
            pump.close()
            if failed:
                raise RankError([Failure(r, "exception", None, tb.strip().splitlines()[-1], tb,
                                         time.time()) for r, tb in failed.items()],
                                where="dtlab.Pool start")
            if outcome == "died":
                codes = sup.procs.poll()
                raise RankError([exit_failure(r, c, time.time(), sup.procs.error_files[r],
                                              output.read_range(sup.files[r][1]), False)
                                 for r, c in codes.items() if c is not None],
                                where="dtlab.Pool start")
            if outcome == "hang":
                n = self.nprocs
                raise TimeoutError(f"dtlab.Pool: {n - len(self._conns)} of {n} ranks did not "
                                   f"start within {self.start_timeout:g} s; see their output "
                                   f"above, or raise start_timeout=.")
        except BaseException:
            self._teardown(graceful=False)
            raise
        finally:
            server.close()
        self.broken = None

    def _teardown(self, graceful: bool = True) -> None:
        sup, self._sup = self._sup, None
        if sup is None:
            return
        if graceful and not self.broken:
            for conn in self._conns.values():
                try:
                    conn.send(Shutdown())
                except OSError:
                    pass
            end = time.monotonic() + 5.0
            while sup.procs.alive() and time.monotonic() < end:
                time.sleep(0.02)
        sup.close(grace=1.0)
        for conn in self._conns.values():
            try:
                conn.close()
            except OSError:
                pass
        self._conns = {}

    def close(self) -> None:
        """Leave the process group cleanly and end every rank (SIGKILL after 5 s)."""
        self._teardown(graceful=True)
        self.broken = "closed"
        _POOLS.discard(self)

    def restart(self) -> None:
        """Fresh ranks and a fresh process group (namespaces are lost)."""
        self._teardown(graceful=not self.broken)
        self._start()
        self.restarts += 1

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"broken: {self.broken}" if self.broken else "ready"
        return f"<dtlab.Pool {self.nprocs} ranks, {self.backend}, {state}, restarts={self.restarts}>"

    # -- commands ---------------------------------------------------------------------------------
    def run(self, fn, *args, timeout: float | None = None, **kwargs) -> Results:
        """``fn(*args, **kwargs)`` on every rank -> Results (like :func:`dtlab.run`)."""
        _plan.check_fn(fn)
        call = pack_call(fn, args, kwargs)
        lines = source_lines_for(fn, *args, *kwargs.values())
        return self._command(lambda cid: Run(cid, call, lines), None, timeout, "pool.run")

    def exec(self, code: str, ranks: list[int] | None = None, timeout: float | None = None,
             sink=None) -> Results:
        """Run source ``code`` in each rank's persistent namespace, where ``rank``,
        ``world_size``, ``device``, ``torch`` and ``dist`` are defined. The value of a final
        expression is each rank's result value."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a string of Python source, not {type(code).__name__}")
        self._cells += 1
        fname = f"<dtlab cell {self._cells}>"
        # the parent keeps the source too, so stacks and tracebacks it prints show the code
        linecache.cache[fname] = (len(code), None, code.splitlines(keepends=True), fname)
        return self._command(lambda cid: Exec(cid, code, fname), ranks, timeout, "pool.exec",
                             sink=sink)

    def push(self, **variables) -> None:
        """Set ``name = value`` in every rank's namespace."""
        for name, v in variables.items():
            if not name.isidentifier():  # pool.push(**{"a b": 1}): no cell could name it
                raise LaunchError(f"pool.push: {name!r} is not a variable name: give names a "
                                  f"cell can use, e.g. pool.push(lr=0.1).")
            dumps_checked(v, f"pool.push({name}=...) value ({type(v).__name__})")
        blob = dumps(variables)
        self._command(lambda cid: Push(cid, blob), None, None, "pool.push", quiet=True)

    def pull(self, name: str, ranks: list[int] | None = None) -> dict:
        """``{rank: value of name}`` from the ranks' namespaces (tensors come back on the CPU)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise LaunchError(f"name={name!r}: give the name of a variable, e.g. pool.pull('x').")
        res = self._command(lambda cid: Pull(cid, name), ranks, 60.0, "pool.pull", quiet=True)
        return {r.rank: r.value for r in res}

    def status(self) -> list[dict]:
        """Per rank: pid, device, alive, busy, cells run, last cell's duration."""
        codes = self._sup.procs.poll() if self._sup else {}
        out = []
        for r in range(self.nprocs):
            info = self._info.get(r, {}) if self._sup else {}
            out.append({"rank": r, "pid": info.get("pid"), "device": info.get("device"),
                        "alive": codes.get(r, 1) is None, "busy": info.get("busy", False),
                        "cells": info.get("cells", 0), "last_s": info.get("last_s")})
        return out

    # -- one command ----------------------------------------------------------------------------------
    def _check_usable(self, ranks) -> list[int]:
        if self.broken:
            raise PoolBrokenError(f"dtlab.Pool is not usable ({self.broken}); call pool.restart() "
                                  f"(or %dtlab restart) for fresh ranks.")
        if ranks is None:
            return list(range(self.nprocs))
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise LaunchError(f"ranks={ranks!r}: give a list of rank numbers, e.g. ranks=[0, 1].")
        ranks = list(ranks)
        bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int)
               or not 0 <= r < self.nprocs]
        if bad or not ranks:
            raise LaunchError(f"ranks={ranks!r}: choose from 0..{self.nprocs - 1}")
        return sorted(set(ranks))

    def _command(self, make_msg, ranks, timeout, what, sink=None, quiet=False) -> Results:
        timeout = _plan.check_timeout(timeout)
        targets = self._check_usable(ranks)
        sup = self._sup
        sup.stacks.clear()
        starts = {r: self._offsets[r] for r in targets}
        sink = output.NullSink() if quiet else (sink or output.choose_sink())
        pump = output.OutputPump({r: sup.files[r] for r in targets}, sink,
                                 self.plan.labels(), starts=starts)
        msg = make_msg(os.urandom(4).hex())
        replies: dict[int, Done] = {}
        died = False
        for r in targets:
            try:
                self._conns[r].send(msg)
            except OSError:  # the rank died since the last cell
                died = True
            self._info[r]["busy"] = True

        def progress(tick: float) -> dict[int, str]:
            self._take_replies(targets, replies, tick)
            codes = sup.procs.poll()
            return {r: DEAD if codes[r] is not None else OK if r not in targets
                    or (r in replies and replies[r].ok) else FAILED if r in replies
                    else RUNNING for r in codes}

        t0 = time.monotonic()
        try:
            outcome = "died" if died else sup.wait(list(range(self.nprocs)), progress, pump,
                                                   timeout)
        except KeyboardInterrupt:
            self._on_interrupt(targets, replies, pump)
            raise
        finally:
            for r in targets:
                self._info[r]["busy"] = False
        pump.pump(until={r: d.offsets for r, d in replies.items()})
        pump.close()
        return self._conclude(outcome, what, targets, replies, starts, timeout, t0)

    def _on_interrupt(self, targets, replies, pump) -> None:
        busy = [r for r in targets if r not in replies]
        self._interrupt(busy, replies)
        pump.pump()
        pump.close()
        left = [r for r in busy if r not in replies]
        if left:
            self.restart()
            print(f"dtlab: interrupted; rank(s) {', '.join(map(str, left))} could not be "
                  f"interrupted (blocked in a collective?): the pool was restarted "
                  f"(namespaces reset).", file=sys.stderr)
        else:
            print("dtlab: interrupted the ranks' current cell; the pool is ready.",
                  file=sys.stderr)

    def _interrupt(self, busy: list[int], replies: dict, wait: float = 3.0) -> None:
        """SIGINT the busy ranks; collect the replies of those that come back."""
        for r in busy:
            try:
                os.kill(self._info[r]["pid"], signal.SIGINT)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(r not in replies for r in busy):
            self._take_replies(busy, replies, TICK)

    def _take_replies(self, ranks: list[int], replies: dict, tick: float) -> None:
        """Wait up to ``tick`` for answers from ``ranks`` still owing one; record each (and
        where its output ends)."""
        waiting = {self._conns[r]: r for r in ranks if r not in replies}
        for conn in wait_conns(list(waiting), timeout=min(tick, TICK)) if waiting else []:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                continue  # the process is dying; poll() reports it
            r = waiting[conn]
            replies[r] = msg
            self._offsets[r] = msg.offsets
        if not waiting:
            time.sleep(tick)

    def _conclude(self, outcome, what, targets, replies, starts, timeout, t0) -> Results:
        sup = self._sup
        ranks, failures = [], []
        for r in targets:
            out, err = sup.files[r]
            end = replies[r].offsets if r in replies else (None, None)
            rr = RankResult(rank=r, pid=self._info[r]["pid"], device=self.plan.devices[r],
                            stdout=output.read_range(out, starts[r][0], end[0]),
                            stderr=output.read_range(err, starts[r][1], end[1]))
            d = replies.get(r)
            if d is not None and d.ok:
                try:
                    rr.value = cloudpickle.loads(d.payload) if d.payload is not None else None
                    rr.duration_s = d.seconds
                    self._info[r].update(last_s=d.seconds, cells=self._info[r]["cells"] + 1)
                except Exception as e:  # a class the parent cannot import, say
                    failures.append(Failure(r, "bad_result", None, "its value could not be "
                                            f"unpickled in the parent: {type(e).__name__}: {e}",
                                            f"{type(e).__name__}: {e}", t0 + d.seconds))
            elif d is not None:
                failures.append(Failure(r, "exception", None, d.payload.strip().splitlines()[-1],
                                        d.payload, t0 + d.seconds))
            ranks.append(rr)
        results = Results(ranks=ranks, backend=self.backend, wall_s=time.monotonic() - t0)
        codes = sup.procs.poll()
        busy = [r for r in targets if r not in replies and codes[r] is None]
        if outcome == "done":
            if failures:
                raise RankError(failures, results, where=what)
            return results
        if outcome == "died":
            dead = [r for r, c in codes.items() if c is not None]
            for r in dead:  # its last words: what it wrote during this command only
                since = starts.get(r, self._offsets.get(r, (0, 0)))[1]
                failures.append(exit_failure(r, codes[r], sup.procs.exit_times.get(r, time.time()),
                                             "", output.read_range(sup.files[r][1], since), False))
            self._teardown(graceful=False)
            self.broken = f"rank(s) {', '.join(map(str, dead))} died"
            err = RankError(failures, results, stopped=busy, where=what)
            err.notes.append(f"The pool is broken ({self.broken}): call pool.restart().")
            raise err
        if outcome == "failed":
            self._interrupt(busy, {}, wait=0.0)
            self.restart()
            err = RankError(failures, results, stopped=busy, where=what)
            err.notes.append(f"Rank(s) {', '.join(map(str, busy))} did not finish (waiting in a "
                             f"collective for the failed rank?): the pool was restarted, "
                             f"namespaces are reset.")
            raise err
        # hang: the supervisor took the stuck ranks' stacks (and NCCL's Flight Recorder) at the
        # deadline; the evidence and its diagnosis are made before the restart wipes the folder
        stacks = sup.stacks["timeout"]
        err = HangError(timeout, stacks, results, method=sup.stack_method, where=what,
                        finished=[r for r in targets if r in replies])
        sup.write_evidence(results, {"timeout_s": timeout, "outcome": "hang", "error": "HangError",
                                     "stopped_by_dtlab": busy}, err=err)
        self.restart()
        err.notes.append("The pool restarted itself: fresh ranks, namespaces reset.")
        raise err


def close_all() -> None:
    for p in list(_POOLS):
        try:
            p.close()
        except BaseException:
            pass
