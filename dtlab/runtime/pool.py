"""``dtlab.Pool``: ranks that stay up between cells, with their process group and their variables.

Launching costs seconds (import torch, join the group, create NCCL communicators); a cell of
work often costs microseconds. A pool pays the launch once::

    with dtlab.Pool(nprocs=2) as pool:
        pool.exec("x = torch.ones(2, device=device) * (rank + 1); dist.all_reduce(x)")
        pool.pull("x")                       # {0: tensor([3., 3.]), 1: tensor([3., 3.])}
        pool.run(lambda: dist.get_rank())    # Results, as dtlab.run returns

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

from . import evidence, output, plan as _plan
from .channel import ControlServer, write_key
from .errors import Failure, HangError, PoolBrokenError, RankError
from .launch import FAILURE_GRACE, host_store, make_run_dir, read_failure
from .payload import dumps, dumps_checked, pack_call, parent_context, source_lines_for
from .procs import RankProcs
from .results import RankResult, Results

TICK = 0.05  # longest sleep between looks at dead ranks and output; replies wake us at once
_POOLS: "weakref.WeakSet[Pool]" = weakref.WeakSet()


class Pool:
    """N persistent ranks with the default process group initialized (see module docstring)."""

    def __init__(self, nprocs: int | None = None, backend: str = "auto", env: dict | None = None,
                 start_timeout: float = 300.0):
        self.plan = _plan.resolve(nprocs, backend, env)
        self.start_timeout = _plan.check_timeout(start_timeout, "start_timeout")
        self.broken: str | None = None
        self.restarts = 0
        self._procs: RankProcs | None = None
        self._run_dir: str | None = None
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

    def _start(self) -> None:
        n = self.plan.nprocs
        self._run_dir = run_dir = make_run_dir("dtlab-pool-")
        server = ControlServer(run_dir, write_key(run_dir))
        with open(os.path.join(run_dir, "context.pkl"), "wb") as f:
            cloudpickle.dump(parent_context(), f)
        self._store = host_store()
        fr_dir = os.path.join(run_dir, "fr")
        os.makedirs(fr_dir)
        envs = _plan.rank_envs(self.plan, self._store.port,
                               evidence.fr_env(self.plan.backend, fr_dir, self.plan.env))
        self._procs = procs = RankProcs(os.path.join(run_dir, "logs"), envs,
                                        ("serve", run_dir, server.address))
        self._conns: dict[int, object] = {}
        self._offsets: dict[int, tuple[int, int]] = {}
        self._info: dict[int, dict] = {}
        pending = []
        try:
            procs.start()
            pump = output.OutputPump(procs.files, output.LinesSink(out=sys.stderr),
                                     self.plan.labels())
            deadline = time.monotonic() + self.start_timeout
            while len(self._conns) < n:
                while not server.accepted.empty():
                    pending.append(server.accepted.get())
                if not pending:
                    time.sleep(TICK / 5)
                for conn in wait_conns(pending, timeout=TICK) if pending else []:
                    msg = conn.recv()
                    pending.remove(conn)
                    if msg[0] == "failed":
                        raise RankError([Failure(msg[1], "exception", None, msg[2].strip().splitlines()[-1],
                                                 msg[2], time.time())], where="dtlab.Pool start")
                    _, rank, pid, device, offs = msg
                    self._conns[rank] = conn
                    self._offsets[rank] = offs
                    self._info[rank] = {"pid": pid, "device": device, "last_s": None, "cells": 0}
                pump.pump()
                dead = {r: c for r, c in procs.poll().items() if c is not None}
                if dead:
                    r, code = sorted(dead.items())[0]
                    stderr = output.read_range(procs.files[r][1])
                    raise RankError([read_failure(r, code, time.time(), procs.error_files[r],
                                                  stderr, got_result=False)],
                                    where="dtlab.Pool start")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"dtlab.Pool: {n - len(self._conns)} of {n} ranks did not "
                                       f"start within {self.start_timeout:g} s; see their output "
                                       f"above, or raise start_timeout=.")
            pump.pump()
            pump.close()
        except BaseException:
            self._teardown(graceful=False)
            raise
        finally:
            server.close()
        self.broken = None

    def _teardown(self, graceful: bool = True) -> None:
        procs, self._procs = self._procs, None
        if procs is not None:
            if graceful and not self.broken:
                for conn in self._conns.values():
                    try:
                        conn.send(("shutdown",))
                    except OSError:
                        pass
                end = time.monotonic() + 5.0
                while procs.alive() and time.monotonic() < end:
                    time.sleep(0.02)
            procs.stop(grace=1.0)
        for conn in getattr(self, "_conns", {}).values():
            try:
                conn.close()
            except OSError:
                pass
        self._conns = {}
        if self._run_dir and not os.environ.get("DTLAB_KEEP_RUNS"):
            shutil.rmtree(self._run_dir, ignore_errors=True)
        self._run_dir = None

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
        call = pack_call(fn, args, kwargs)
        lines = source_lines_for(fn, *args, *kwargs.values())
        return self._command(lambda r, cid: ("run", cid, call, lines), None, timeout, "pool.run")

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
        return self._command(lambda r, cid: ("exec", cid, code, fname), ranks, timeout,
                             "pool.exec", sink=sink)

    def push(self, **variables) -> None:
        """Set ``name = value`` in every rank's namespace."""
        for name, v in variables.items():
            dumps_checked(v, f"pool.push({name}=...) value ({type(v).__name__})")
        blob = dumps(variables)
        self._command(lambda r, cid: ("push", cid, blob), None, None, "pool.push", quiet=True)

    def pull(self, name: str, ranks: list[int] | None = None) -> dict:
        """``{rank: value of name}`` from the ranks' namespaces (tensors come back on the CPU)."""
        res = self._command(lambda r, cid: ("pull", cid, name), ranks, 60.0, "pool.pull", quiet=True)
        return {r.rank: r.value for r in res}

    def status(self) -> list[dict]:
        """Per rank: pid, device, alive, busy, cells run, last cell's duration."""
        codes = self._procs.poll() if self._procs else {}
        out = []
        for r in range(self.nprocs):
            info = self._info.get(r, {}) if self._procs else {}
            out.append({"rank": r, "pid": info.get("pid"), "device": info.get("device"),
                        "alive": codes.get(r, 1) is None, "busy": info.get("busy", False),
                        "cells": info.get("cells", 0), "last_s": info.get("last_s")})
        return out

    # -- the wait loop ------------------------------------------------------------------------------
    def _check_usable(self, ranks) -> list[int]:
        if self.broken:
            raise PoolBrokenError(f"dtlab.Pool is not usable ({self.broken}); call pool.restart() "
                                  f"(or %dtlab restart) for fresh ranks.")
        if ranks is None:
            return list(range(self.nprocs))
        bad = [r for r in ranks if not isinstance(r, int) or not 0 <= r < self.nprocs]
        if bad or not ranks:
            raise ValueError(f"ranks={ranks!r}: choose from 0..{self.nprocs - 1}")
        return sorted(set(ranks))

    def _command(self, make_msg, ranks, timeout, what, sink=None, quiet=False) -> Results:
        targets = self._check_usable(ranks)
        timeout = _plan.check_timeout(timeout)
        procs = self._procs
        starts = {r: self._offsets[r] for r in targets}
        sink = output.NullSink() if quiet else (sink or output.choose_sink())
        pump = output.OutputPump({r: procs.files[r] for r in targets}, sink,
                                 self.plan.labels(), starts=starts)
        cid = os.urandom(4).hex()
        replies: dict[int, tuple] = {}
        outcome = "done"
        for r in targets:
            try:
                self._conns[r].send(make_msg(r, cid))
            except OSError:  # the rank died since the last cell
                outcome = "died"
            self._info[r]["busy"] = True
        t0 = time.monotonic()
        deadline = None if timeout is None else t0 + timeout
        first_fail = None
        try:
            while outcome == "done" and len(replies) < len(targets):
                new = self._take_replies(targets, replies)
                if first_fail is None and any(not replies[r][2] for r in new):
                    first_fail = time.monotonic()
                pump.pump()
                if any(procs.poll()[r] is not None for r in range(self.nprocs)):
                    outcome = "died"
                    break
                now = time.monotonic()
                if first_fail is not None and now - first_fail > FAILURE_GRACE:
                    outcome = "stuck"
                    break
                if deadline is not None and now > deadline:
                    outcome = "hang"
                    break
        except KeyboardInterrupt:
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
            self._mark_idle(targets)
            raise
        self._mark_idle(targets)
        pump.pump(until={r: replies[r][5] for r in replies})
        pump.close()
        return self._conclude(outcome, what, targets, replies, starts, timeout, t0)

    def _mark_idle(self, targets):
        for r in targets:
            self._info[r]["busy"] = False

    def _interrupt(self, busy: list[int], replies: dict, wait: float = 3.0) -> None:
        """SIGINT the busy ranks; collect the replies of those that come back."""
        for r in busy:
            try:
                os.kill(self._info[r]["pid"], signal.SIGINT)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(r not in replies for r in busy):
            self._take_replies(busy, replies)

    def _take_replies(self, ranks: list[int], replies: dict) -> list[int]:
        """Wait up to one tick for answers from ``ranks`` still owing one; record each (and
        where its output ends). Returns the ranks that answered."""
        waiting = {self._conns[r]: r for r in ranks if r not in replies}
        got = []
        for conn in wait_conns(list(waiting), timeout=TICK):
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                continue  # the process is dying; poll() reports it
            r = waiting[conn]
            replies[r] = msg
            self._offsets[r] = msg[5]
            got.append(r)
        return got

    def _conclude(self, outcome, what, targets, replies, starts, timeout, t0) -> Results:
        procs = self._procs
        ranks = []
        failures = []
        for r in targets:
            out, err = procs.files[r]
            end = replies[r][5] if r in replies else (None, None)
            rr = RankResult(rank=r, pid=self._info[r]["pid"], device=self.plan.devices[r],
                            stdout=output.read_range(out, starts[r][0], end[0]),
                            stderr=output.read_range(err, starts[r][1], end[1]))
            if r in replies:
                _, _, ok, payload, dur, _ = replies[r]
                rr.exit_code = None  # the rank lives on
                if ok:
                    rr.value = cloudpickle.loads(payload) if payload is not None else None
                    rr.duration_s = dur
                    self._info[r].update(last_s=dur, cells=self._info[r]["cells"] + 1)
                else:
                    failures.append(Failure(r, "exception", None, payload.strip().splitlines()[-1],
                                            payload, t0 + dur))
            ranks.append(rr)
        results = Results(ranks=ranks, backend=self.backend, wall_s=time.monotonic() - t0)
        if outcome == "done":
            if failures:
                raise RankError(failures, results, where=what)
            return results
        codes = procs.poll()
        busy = [r for r in targets if r not in replies and codes[r] is None]
        if outcome == "died":
            for r, code in codes.items():
                if code is not None:
                    failures.append(read_failure(r, code, procs.exit_times.get(r, time.time()), "",
                                                 output.read_range(procs.files[r][1]), False))
            self._teardown(graceful=False)
            self.broken = f"rank(s) {', '.join(str(r) for r, c in codes.items() if c is not None)} died"
            err = RankError(failures, results, stopped=busy, where=what)
            err.args = (err.args[0] + f"\nThe pool is broken ({self.broken}): call pool.restart().",)
            raise err
        if outcome == "stuck":
            self._interrupt(busy, {}, wait=0.0)
            self.restart()
            err = RankError(failures, results, stopped=busy, where=what)
            err.args = (err.args[0] + f"\nRank(s) {', '.join(map(str, busy))} did not finish "
                        f"(waiting in a collective for the failed rank?): the pool was restarted, "
                        f"namespaces are reset.",)
            raise err
        # hang: the stacks (and NCCL's Flight Recorder) of the stuck ranks, then a diagnosis,
        # all before the restart wipes the ranks and their folder
        method, stacks = evidence.examine_stuck({r: self._info[r]["pid"] for r in busy},
                                                self._run_dir, self.backend)
        err = HangError(timeout, stacks, results, method=method, where=what,
                        finished=[r for r in targets if r in replies])
        out = evidence.write_evidence(os.path.join(self._run_dir, "evidence"), results, {
            "backend": self.backend, "nprocs": self.nprocs, "timeout_s": timeout,
            "outcome": "hang", "error": "HangError", "stopped_by_dtlab": busy,
            "stack_method": method}, {"timeout": stacks}, os.path.join(self._run_dir, "fr"))
        evidence.attach_diagnosis(err, out)
        self.restart()
        err.args = (err.args[0] + "\nThe pool restarted itself: fresh ranks, namespaces reset.",)
        raise err


def close_all() -> None:
    for p in list(_POOLS):
        try:
            p.close()
        except BaseException:
            pass
