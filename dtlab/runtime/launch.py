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

from . import output, plan as _plan
from .errors import Failure, HangError, RankError, exit_summary
from .procs import RankProcs
from .results import RankResult, Results
from .stacks import capture

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
    first), :class:`dtlab.HangError` if ``timeout`` seconds pass (with every live rank's stack),
    :class:`dtlab.LaunchError` for bad input, before anything starts. Whatever happens, no rank
    process outlives the call.
    """
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
        envs = _plan.rank_envs(plan, store.port)
        procs = RankProcs(os.path.join(run_dir, "logs"), envs, ("oneshot", run_dir))
        return _supervise(procs, plan, run_dir, timeout)
    finally:
        if not os.environ.get("DTLAB_KEEP_RUNS"):
            shutil.rmtree(run_dir, ignore_errors=True)


def _supervise(procs: RankProcs, plan: _plan.Plan, run_dir: str, timeout: float | None) -> Results:
    n = plan.nprocs
    t0 = time.monotonic()
    deadline = None if timeout is None else t0 + timeout
    pump = None
    hang = None
    first_failure_at = None
    try:
        procs.start()
        pump = output.OutputPump(procs.files, output.choose_sink(), plan.labels())
        while True:
            pump.pump()
            codes = procs.poll()
            running = [r for r, c in codes.items() if c is None]
            if not running:
                break
            if first_failure_at is None and any(
                    c not in (None, 0) or (c == 0 and not _has_result(run_dir, r))
                    for r, c in codes.items()):
                first_failure_at = time.monotonic()
            if first_failure_at is not None and time.monotonic() - first_failure_at > FAILURE_GRACE:
                break
            if deadline is not None and time.monotonic() > deadline:
                method, stacks = capture({r: procs.pids[r] for r in running},
                                         {r: os.path.join(run_dir, f"stacks-{r}.txt") for r in running},
                                         prefer=os.environ.get("DTLAB_STACKS", "auto"))
                hang = (method, stacks, [r for r in range(n) if r not in running])
                break
            time.sleep(TICK)
    except KeyboardInterrupt:
        stopped = procs.stop(grace=1.0)
        if pump:
            pump.pump()
            pump.close()
        print(f"dtlab: interrupted; stopped rank(s) {', '.join(map(str, stopped)) or 'none'} "
              f"and their children.", file=sys.stderr)
        raise
    finally:
        stopped = procs.stop()  # idempotent: the normal path ends here too
    pump.pump()
    pump.close()
    results = _collect(procs, plan, run_dir, time.monotonic() - t0)
    if hang is not None:
        method, stacks, finished = hang
        raise HangError(timeout, stacks, results, method=method, finished=finished)
    failures = []
    for r in range(n):
        code = procs.exit_codes[r]
        if r in stopped:
            continue
        got = results[r].duration_s is not None
        if code != 0 or not got:
            failures.append(read_failure(r, code, procs.exit_times.get(r, time.time()),
                                         procs.error_files[r], results[r].stderr, got))
    if failures:
        raise RankError(failures, results, stopped=sorted(stopped))
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
