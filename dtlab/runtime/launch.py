"""``dtlab.run``: run a function on N fresh ranks, once, and bring back what each rank did.

The life of one call (a client of :class:`.supervisor.Supervisor`, which owns the processes)::

    check input ─► Supervisor: run folder, loopback store, reaper, N ranks (procs.RankProcs)
        └─► Supervisor.wait: show new output ─ poll exits ─ first failure? ─ timeout?
              ├─ all returned ............................ Results
              ├─ a rank failed (+1.5 s for the others) ... stop the rest, RankError
              ├─ timeout ................................. stacks of live ranks, stop, HangError
              └─ Ctrl-C / kernel interrupt ............... stop all, KeyboardInterrupt
    ─► always: every rank and its children stopped, the run folder removed

The same call works from a terminal script, a notebook cell, and an autograded notebook.
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle

from . import output, plan as _plan
from .plan import START_TIMEOUT
from .errors import Failure, HangError, RankError
from .payload import pack_call, parent_context
from .rankside import entered_path
from .results import RankResult, Results
from .supervisor import FAILED, FAILURE_GRACE, OK, RUNNING, Supervisor, exit_failure


def run(fn, *args, nprocs: int | None = None, backend: str = "auto", timeout: float | None = 300,
        env: dict | None = None, start_timeout: float | None = START_TIMEOUT,
        native_stacks: bool = False, **kwargs) -> Results:
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

    ``timeout`` bounds ``fn`` itself: it counts from the moment every rank is inside ``fn``, so
    a slow ``import torch`` on a busy machine never eats into it. Start-up (the rank's process,
    imports, joining the process group) has its own bound, ``start_timeout``.

    Raises :class:`dtlab.RankError` if any rank fails (every failing rank's traceback, root cause
    first), :class:`dtlab.HangError` if either bound passes (with every live rank's stack, its
    ``phase`` -- "start" or "run" -- and, when it can name one, a ``.diagnosis``),
    :class:`dtlab.LaunchError` for bad input, before anything starts. Whatever happens, no rank
    process outlives the call.

    ``native_stacks=True``: at a hang, also look below Python before the ranks are stopped:
    ``HangError.native`` {rank: ``py-spy dump --native``}, ``HangError.threads`` {rank: every
    OS thread} (:mod:`dtlab.hang.native` reads them).
    """
    return launch(fn, args, kwargs, nprocs=nprocs, backend=backend, timeout=timeout, env=env,
                  start_timeout=start_timeout, native_stacks=native_stacks)


def launch(fn, args: tuple = (), kwargs: dict | None = None, *, nprocs: int | None = None,
           backend: str = "auto", timeout: float | None = 300, env: dict | None = None,
           snapshot_quiet: float | None = None, evidence_dir: str | None = None,
           meta: dict | None = None, failure_grace: float = FAILURE_GRACE,
           pg_timeout: float | None = None, start_timeout: float | None = START_TIMEOUT,
           native_stacks: bool = False) -> Results:
    """:func:`run` with the post-mortem knobs that tools such as :mod:`dtlab.hang` need.

    ``snapshot_quiet``: once every live rank has been silent that many seconds (a hang
    beginning), take every rank's stack and, on NCCL, a Flight Recorder dump -- while the ranks
    are still stuck, before any watchdog tears them down. ``evidence_dir``: write the evidence
    there (see :mod:`dtlab.runtime.evidence`); ``meta`` goes into its ``run.json``.
    ``failure_grace``: after the first rank fails, how long the others get to fail on their own
    (and dump their evidence) before they are stopped. ``pg_timeout``: the collective timeout
    every rank's ``init_process_group`` gets (torch's default when None). ``timeout``,
    ``start_timeout`` and ``native_stacks`` as in :func:`run`.
    """
    kwargs = kwargs or {}
    _plan.check_fn(fn)
    timeout = _plan.check_timeout(timeout)
    start_timeout = _plan.check_timeout(start_timeout, "start_timeout")
    plan = _plan.resolve(nprocs, backend, env, pg_timeout)
    call = pack_call(fn, args, kwargs)
    context = cloudpickle.dumps(parent_context(fn, *args, *kwargs.values()))
    if plan.note:
        print(plan.note, file=sys.stderr)
    sup = Supervisor(plan, "oneshot", store_timeout=max(timeout or 0, start_timeout or 0) or None)
    sup.native_stacks = bool(native_stacks)
    try:
        for name, blob in (("call.pkl", call), ("context.pkl", context)):
            with open(os.path.join(sup.run_dir, name), "wb") as f:
                f.write(blob)
        t0 = time.monotonic()
        outcome, stopped, pump = _watch(sup, timeout, start_timeout, snapshot_quiet, failure_grace)
        pump.pump()
        pump.close()
        results, bad = _collect(sup, time.monotonic() - t0)
        err = _conclude(sup, outcome, stopped, results, bad,
                        timeout if sup.phase == "run" else start_timeout)
        if err is not None or evidence_dir is not None:
            facts = {"timeout_s": timeout, "start_timeout_s": start_timeout, "phase": sup.phase,
                     "late_ranks": sup.late,
                     "stopped_by_dtlab": stopped, "wall_s": results.wall_s,
                     "outcome": outcome if err is not None else "ok",
                     "error": type(err).__name__ if err else None, **(meta or {})}
            out = sup.write_evidence(results, facts, evidence_dir, err)
            results.extra["evidence_dir"] = evidence_dir and out
            if err is not None:
                err.evidence_dir = evidence_dir
        if err is not None:
            raise err
        return results
    finally:
        sup.close()


def _watch(sup: Supervisor, timeout, start_timeout, snapshot_quiet, failure_grace):
    """Start the ranks and wait; returns (outcome, ranks dtlab stopped, the output pump)."""
    procs = sup.procs

    def progress(tick: float) -> dict[int, str]:
        time.sleep(tick)
        return {r: RUNNING if c is None else OK if c == 0 and _has_result(sup.run_dir, r)
                else FAILED for r, c in procs.poll().items()}

    pump = None
    try:
        sup.start()
        pump = output.OutputPump(sup.files, output.choose_sink(), sup.plan.labels())
        outcome = sup.wait(list(range(sup.plan.nprocs)), progress, pump, timeout,
                           failure_grace=failure_grace, snapshot_quiet=snapshot_quiet,
                           entered=lambda r: os.path.exists(entered_path(sup.run_dir, r)),
                           start_timeout=start_timeout)
    except KeyboardInterrupt:
        stopped = sup.stop(grace=1.0)
        if pump:
            pump.pump()
            pump.close()
        print(f"dtlab: interrupted; stopped rank(s) {', '.join(map(str, stopped)) or 'none'} "
              f"and their children.", file=sys.stderr)
        raise
    return outcome, sup.stop(), pump


def _has_result(run_dir: str, rank: int) -> bool:
    return os.path.exists(os.path.join(run_dir, f"result-{rank}.pkl"))


def _collect(sup: Supervisor, wall: float) -> tuple[Results, dict[int, dict]]:
    """Every rank's output, exit code and value; also what each rank's result file said (or
    why it could not be read: one rank's unreadable value costs no other rank its own)."""
    procs, ranks, got, pids = sup.procs, [], {}, sup.rank_pids()
    for r, (out, err) in procs.files.items():
        rr = RankResult(rank=r, stdout=output.read_range(out), stderr=output.read_range(err),
                        exit_code=procs.exit_codes[r], pid=pids.get(r),
                        device=sup.plan.devices[r])
        path = os.path.join(sup.run_dir, f"result-{r}.pkl")
        if os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    got[r] = cloudpickle.load(f)
                rr.value, rr.duration_s = got[r]["value"], got[r]["duration_s"]
            except Exception as e:  # e.g. a class the parent cannot import
                got[r] = {"error": f"{type(e).__name__}: {e}"}
        ranks.append(rr)
    return Results(ranks=ranks, backend=sup.plan.backend, wall_s=wall), got


def _conclude(sup: Supervisor, outcome: str, stopped: list[int], results: Results,
              got: dict[int, dict], timeout) -> Exception | None:
    procs, n = sup.procs, sup.plan.nprocs
    if outcome == "hang":
        live = sup.stacks["timeout"]
        return HangError(timeout, live, results, method=sup.stack_method, phase=sup.phase,
                         late=sup.late,
                         finished=[r for r in range(n) if r not in live],
                         snapshot=sup.stacks.get("snapshot"),
                         native=sup.native.get("timeout"), threads=sup.threads.get("timeout"))
    failures = []
    for r in range(n):
        code = procs.exit_codes[r]
        if r in stopped:
            continue
        if "error" in got.get(r, {}):
            failures.append(Failure(
                r, "bad_result", code, f"its return value could not be unpickled in the parent: "
                f"{got[r]['error']}", f"fn returned on rank {r}, but the parent could not "
                f"unpickle the value: {got[r]['error']}\nReturn plain data (numbers, lists, "
                f"dicts, tensors, arrays) or types the parent can import.", time.time()))
        elif code != 0 or r not in got:
            failures.append(exit_failure(r, code, procs.exit_times.get(r, time.time()),
                                         procs.error_files[r], results[r].stderr, r in got,
                                         results[r].pid))
    if failures and all(f.secondary for f in failures):
        failures += _left_early(got, failures, results)
    return RankError(failures, results, stopped=stopped) if failures else None


def _left_early(got: dict[int, dict], failures: list[Failure], results: Results) -> list[Failure]:
    """Ranks that returned while their peers still waited for them in a collective: when every
    failure only echoes a lost peer, the rank that left first is why (it raised nothing)."""
    first = min(f.time for f in failures)
    out = []
    for r, res in sorted(got.items()):
        end = res.get("end_ns")
        if end is None or end / 1e9 > first:
            continue
        k = res.get("collectives")
        after = f"after issuing {k} collective(s)" if k is not None else "early"
        summary = (f"fn returned {after} while rank(s) "
                   f"{', '.join(str(f.rank) for f in failures)} still waited for it in a "
                   f"collective; it raised nothing, but they failed because it left")
        out.append(Failure(r, "left", results[r].exit_code, summary,
                           f"{summary}.\nexit code {results[r].exit_code}", end / 1e9))
    return out
