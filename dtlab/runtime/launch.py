"""``dtlab.run``: run a function on N fresh ranks, once, and bring back what each rank did.

The life of one call::

    check input ─► parent hosts the rendezvous store ─► start N ranks (procs.RankProcs)
        └─► wait loop, every 20 ms: show new output ─ poll exits ─ first failure? ─ timeout?
              ├─ all returned ............................ Results
              ├─ a rank failed (+1.5 s for the others) ... stop the rest, RankError
              ├─ timeout ................................. stacks of live ranks, stop, HangError
              └─ Ctrl-C / kernel interrupt ............... stop all, KeyboardInterrupt
    ─► always: every rank and its children stopped, temporary files removed

The same call works from a terminal script, a notebook cell, and an autograded notebook.
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
import time

import cloudpickle

from . import evidence, output, plan as _plan
from .errors import Failure, HangError, RankError, exit_summary
from .procs import RankProcs
from .results import RankResult, Results

TICK = 0.02  # seconds between looks at the ranks
FAILURE_GRACE = 1.5  # after a first failure, how long the others get to report theirs


def host_store(timeout_s: float = 300.0):
    """The rendezvous TCPStore, served by the parent on a free loopback port (like torchrun's
    agent): no port is guessed, so two launches can never collide."""
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                    timeout=datetime.timedelta(seconds=timeout_s))


def make_run_dir(prefix: str) -> str:
    base = os.environ.get("DTLAB_RUN_ROOT") or None
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def read_failure(rank: int, code: int | None, when: float, error_file: str, stderr: str,
                 got_result: bool) -> Failure:
    """Turn one rank's exit into a :class:`Failure`, from its error file if it wrote one."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    if code not in (None, 0) and os.path.isfile(error_file):
        pf = ProcessFailure(local_rank=rank, pid=0, exitcode=code, error_file=error_file)
        msg = pf.error_file_data.get("message", {})
        extra = msg.get("extraInfo", {}) if isinstance(msg, dict) else {}
        t = int(extra.get("timestamp_ns", 0)) / 1e9 or float(pf.timestamp)
        summary = msg.get("message", str(pf.message)) if isinstance(msg, dict) else str(msg)
        return Failure(rank, "exception", code, summary, extra.get("py_callstack", summary), t)
    tail = "\n".join(stderr.rstrip().splitlines()[-25:])
    if code == 0 and not got_result:
        summary = "exited with code 0 before fn returned (os._exit(0) or sys.exit(0) inside fn?)"
        kind = "no_result"
    elif code is not None and code < 0:
        summary = f"{exit_summary(code)} (the process died without a Python exception)"
        kind = "signal"
    else:
        summary = f"exited with code {code} without a Python exception (os._exit? a C abort?)"
        kind = "exit"
    detail = summary + ("\nlast lines of its stderr:\n" + tail if tail else "")
    return Failure(rank, kind, code, summary, detail, when)


def run(fn, *args, nprocs: int | None = None, backend: str = "auto", timeout: float | None = 300,
        env: dict | None = None, **kwargs) -> Results:
    """Run ``fn(*args, **kwargs)`` on ``nprocs`` fresh ranks with the process group initialized.

    Each rank is a new Python process (never a fork of the caller) with RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT set and ``torch.distributed`` initialized: NCCL with
    ``cuda:LOCAL_RANK`` when there are enough GPUs, else gloo. Functions, lambdas and closures
    from notebook cells travel by value. Output streams live, labelled by rank.

    >>> import dtlab, torch, torch.distributed as dist
    >>> def total(x):
    ...     t = torch.tensor([x + dist.get_rank()])
    ...     dist.all_reduce(t)
    ...     return t.item()
    >>> dtlab.run(total, 10, nprocs=2, backend="gloo").values   # doctest: +SKIP
    [21, 21]

    Raises :class:`dtlab.RankError` if any rank fails (every failing rank's traceback, root cause
    first), :class:`dtlab.HangError` if ``timeout`` seconds pass (with every live rank's stack
    and, when it can name one, a ``.diagnosis``), :class:`dtlab.LaunchError` for bad input,
    before anything starts. Whatever happens, no rank process outlives the call.
    """
    return launch(fn, args, kwargs, nprocs=nprocs, backend=backend, timeout=timeout, env=env)


def launch(fn, args: tuple = (), kwargs: dict | None = None, *, nprocs: int | None = None,
           backend: str = "auto", timeout: float | None = 300, env: dict | None = None,
           snapshot_quiet: float | None = None, evidence_dir: str | None = None,
           meta: dict | None = None, failure_grace: float = FAILURE_GRACE) -> Results:
    """:func:`run` with the post-mortem knobs that tools such as :mod:`dtlab.hang` need.

    ``snapshot_quiet``: once every live rank has been silent that many seconds (a hang
    beginning), take every rank's stack and, on NCCL, a Flight Recorder dump -- while the ranks
    are still stuck, before any watchdog tears them down. ``evidence_dir``: write the evidence
    there (see :mod:`dtlab.runtime.evidence`); ``meta`` goes into its ``run.json``.
    ``failure_grace``: after the first rank fails, how long the others get to fail on their own
    (and dump their evidence) before they are stopped.
    """
    kwargs = kwargs or {}
    plan = _plan.resolve(nprocs, backend, env)
    timeout = _plan.check_timeout(timeout)
    from .payload import pack_call, parent_context

    call = pack_call(fn, args, kwargs)
    if plan.note:
        print(plan.note, file=sys.stderr)

    run_dir = make_run_dir("dtlab-run-")
    try:
        with open(os.path.join(run_dir, "call.pkl"), "wb") as f:
            f.write(call)
        with open(os.path.join(run_dir, "context.pkl"), "wb") as f:
            cloudpickle.dump(parent_context(fn, *args, *kwargs.values()), f)
        store = host_store(timeout or 300.0)
        fr_dir = os.path.join(run_dir, "fr")
        os.makedirs(fr_dir)
        envs = _plan.rank_envs(plan, store.port, evidence.fr_env(plan.backend, fr_dir, plan.env))
        procs = RankProcs(os.path.join(run_dir, "logs"), envs, ("oneshot", run_dir))
        sup = _Supervisor(procs, plan, run_dir, timeout, snapshot_quiet, failure_grace)
        return sup.conclude(sup.watch(), evidence_dir, meta or {})
    finally:
        if not os.environ.get("DTLAB_KEEP_RUNS"):
            shutil.rmtree(run_dir, ignore_errors=True)


class _Supervisor:
    """The wait loop of one launch, and what it concludes."""

    def __init__(self, procs: RankProcs, plan: _plan.Plan, run_dir: str, timeout: float | None,
                 snapshot_quiet: float | None, failure_grace: float):
        self.procs, self.plan, self.run_dir, self.timeout = procs, plan, run_dir, timeout
        self.snapshot_quiet, self.failure_grace = snapshot_quiet, failure_grace
        self.stacks: dict[str, dict[int, str]] = {}
        self.stack_method = ""
        self.t0 = time.monotonic()

    def _stacks(self, ranks: list[int], when: str) -> None:
        pids = self.procs.pids
        self.stack_method, self.stacks[when] = evidence.examine_stuck(
            {r: pids[r] for r in ranks}, self.run_dir, self.plan.backend)

    def watch(self) -> str:
        """Run until every rank is done, a failure settles, or the timeout: returns which."""
        procs = self.procs
        deadline = None if self.timeout is None else self.t0 + self.timeout
        first_failure_at = None
        last_output = time.monotonic()
        seen_output = False

        def saw(r, stream, text):
            nonlocal last_output, seen_output
            last_output, seen_output = time.monotonic(), True

        self.pump = None
        try:
            procs.start()
            self.pump = output.OutputPump(procs.files, output.choose_sink(), self.plan.labels())
            while True:
                self.pump.pump(on_text=saw)
                codes = procs.poll()
                running = [r for r, c in codes.items() if c is None]
                now = time.monotonic()
                if not running:
                    return "done"
                if first_failure_at is None and any(
                        c not in (None, 0) or (c == 0 and not _has_result(self.run_dir, r))
                        for r, c in codes.items()):
                    first_failure_at = now
                if first_failure_at is not None and now - first_failure_at > self.failure_grace:
                    return "failed"
                if (self.snapshot_quiet is not None and "snapshot" not in self.stacks
                        and seen_output and now - last_output > self.snapshot_quiet):
                    self._stacks(running, "snapshot")
                if deadline is not None and now > deadline:
                    self._stacks(running, "timeout")
                    return "hang"
                time.sleep(TICK)
        except KeyboardInterrupt:
            stopped = procs.stop(grace=1.0)
            if self.pump:
                self.pump.pump()
                self.pump.close()
            print(f"dtlab: interrupted; stopped rank(s) {', '.join(map(str, stopped)) or 'none'} "
                  f"and their children.", file=sys.stderr)
            raise
        finally:
            self.stopped = procs.stop()  # idempotent: the normal path ends here too

    def conclude(self, outcome: str, evidence_dir: str | None, meta: dict) -> Results:
        procs, n = self.procs, self.plan.nprocs
        self.pump.pump()
        self.pump.close()
        results = _collect(procs, self.plan, self.run_dir, time.monotonic() - self.t0)
        failures = []
        for r in range(n):
            code = procs.exit_codes[r]
            if r in self.stopped:
                continue
            got = results[r].duration_s is not None
            if code != 0 or not got:
                failures.append(read_failure(r, code, procs.exit_times.get(r, time.time()),
                                             procs.error_files[r], results[r].stderr, got))
        err: Exception | None = None
        if outcome == "hang":
            live = self.stacks["timeout"]
            err = HangError(self.timeout, live, results, method=self.stack_method,
                            finished=[r for r in range(n) if r not in live])
            err.snapshot = self.stacks.get("snapshot", {})
        elif failures:
            err = RankError(failures, results, stopped=sorted(self.stopped))
        if err is not None or evidence_dir is not None:
            out = evidence_dir or os.path.join(self.run_dir, "evidence")
            facts = {"backend": self.plan.backend, "nprocs": n, "timeout_s": self.timeout,
                     "stopped_by_dtlab": sorted(self.stopped),
                     "outcome": "hang" if outcome == "hang" else "failed" if err else "ok",
                     "error": type(err).__name__ if err else None,
                     "stack_method": self.stack_method, "wall_s": results.wall_s, **meta}
            evidence.write_evidence(out, results, facts, self.stacks,
                                    os.path.join(self.run_dir, "fr"))
            results.extra["evidence_dir"] = out if evidence_dir else None
            if err is not None:
                evidence.attach_diagnosis(err, out)
                err.evidence_dir = evidence_dir
        if err is not None:
            raise err
        return results


def _has_result(run_dir: str, rank: int) -> bool:
    return os.path.exists(os.path.join(run_dir, f"result-{rank}.pkl"))


def _collect(procs: RankProcs, plan: _plan.Plan, run_dir: str, wall: float) -> Results:
    ranks = []
    for r, (out, err) in procs.files.items():
        rr = RankResult(rank=r, stdout=output.read_range(out), stderr=output.read_range(err),
                        exit_code=procs.exit_codes[r], pid=procs.pids.get(r),
                        device=plan.devices[r])
        path = os.path.join(run_dir, f"result-{r}.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                got = cloudpickle.load(f)
            rr.value, rr.duration_s = got["value"], got["duration_s"]
        ranks.append(rr)
    return Results(ranks=ranks, backend=plan.backend, wall_s=wall)
