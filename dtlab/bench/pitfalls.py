"""Measurement done wrong, then right: five ways to time one collective, side by side.

Contract: :func:`timing_pitfalls` launches ``nprocs`` ranks (through :func:`dtlab.run`), times
``op`` at ``size`` bytes five ways in the same job and returns a DataFrame, one row per (method,
rank): ``method, rank, time_us, spread_us, note``. The methods:

* ``first call`` -- the very first call of the op on this process group, synchronized: NCCL
  builds its communicator and connections lazily, inside it (gloo connects at init, so on CPU
  the gap is small);
* ``host timer, no sync`` -- ``perf_counter`` around ``iters`` calls, no synchronize: on GPUs it
  measures how fast the host *enqueues* work (the GPU may not have started); gloo's calls block,
  so on CPU it happens to agree;
* ``too few iterations`` -- one call at a time, ``iters`` times, each synchronized: ``spread_us``
  is max - min over those single calls, the scatter a 1-iteration benchmark reports as a result;
* ``one rank's clock`` -- rank ``late_rank`` enters the loop ``late_ms`` later (a slow data
  loader, a GC pause); every rank times its own loop, synchronized. The early rank's time
  includes waiting for the late one, the late rank's does not: one rank's number is not the
  collective's time;
* ``dtlab`` -- :func:`dtlab.bench.timing.time_case`: warmup, barrier, aligned start, CUDA events
  on GPUs (``perf_counter`` on gloo), divided by ``iters``, MAX over ranks.

nccl-tests (src/common.cu, ``BenchTime``): a host ``steady_clock`` timer around ``iters``
launches followed by a stream synchronize, per rank, then *averaged* over ranks by default
(``-a 1``; ``-a 3`` takes the MAX as dtlab does); warmup runs first for every size and one
synchronized call plus a barrier precede each timed loop.

>>> import dtlab.bench as bench
>>> df = bench.timing_pitfalls("all_reduce", "1K", nprocs=2, backend="gloo")   # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..limits import MAX_ITERS, number, whole
from .engine import quiet_env
from .formulas import canonical_op, parse_size

if TYPE_CHECKING:
    import pandas

METHODS = ("first call", "host timer, no sync", "too few iterations", "one rank's clock", "dtlab")


def timing_pitfalls(op: str = "all_reduce", size="1K", nprocs: int | None = 2,
                    backend: str = "auto", iters: int = 20, late_ms: float = 5.0,
                    late_rank: int = 1, timeout: float = 120) -> "pandas.DataFrame":
    """Time ``op`` of ``size`` bytes five ways on the same ranks (see the module docstring).

    >>> timing_pitfalls("all_reduce", "64K", nprocs=2, backend="gloo")   # doctest: +SKIP
    """
    import pandas as pd

    from ..runtime import run
    from ..runtime.plan import resolve

    n = resolve(nprocs, backend).nprocs
    cfg = {"op": canonical_op(op), "size": parse_size(size, "size"),
           "iters": whole("iters", iters, 2, MAX_ITERS),
           "late_s": number("late_ms", late_ms, 0, 60_000, "one rank's lag, ms") / 1e3,
           "late_rank": whole("late_rank", late_rank, 0, n - 1, f"a rank of {n}")}
    if cfg["op"] not in ("all_reduce", "broadcast", "sendrecv"):
        raise ValueError(f"op={op!r}: timing_pitfalls times all_reduce, broadcast or sendrecv.")
    if cfg["size"] < 4:
        raise ValueError(f"size={size!r} must be >= 4 bytes (one float32).")
    res = run(_rank_pitfalls, cfg, nprocs=nprocs, backend=backend, env=quiet_env(),
              timeout=timeout)
    rows = res.values[0]
    df = pd.DataFrame(rows, columns=["method", "rank", "time_us", "spread_us", "note"])
    df["backend"], df["nranks"] = rows[0]["backend"], len(res.values)  # as the launch chose
    return df


def _rank_pitfalls(cfg: dict) -> list | None:
    import torch
    import torch.distributed as dist

    from .timing import Case, _sync, time_case

    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    case = Case(cfg["op"], cfg["size"] // 4, True, torch.float32, device)
    iters, mine = cfg["iters"], []

    def synced_call() -> float:
        _sync(device)
        t0 = time.perf_counter()
        case.run()
        _sync(device)
        return time.perf_counter() - t0

    mine.append(("first call", synced_call(), 0.0, "communicator / connection setup inside"))
    for _ in range(3):
        case.run()
    _sync(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        case.run()
    enqueued = (time.perf_counter() - t0) / iters
    _sync(device)
    mine.append(("host timer, no sync", enqueued, 0.0, "time to enqueue, not to complete"))
    dist.barrier()
    singles = [synced_call() for _ in range(iters)]
    mine.append(("too few iterations", sorted(singles)[len(singles) // 2],
                 max(singles) - min(singles), "median of 1-call timings; spread = max - min"))
    dist.barrier()
    _sync(device)
    if rank == cfg["late_rank"] % n:
        time.sleep(cfg["late_s"])
    t0 = time.perf_counter()
    for _ in range(iters):
        case.run()
    _sync(device)
    late = rank == cfg["late_rank"] % n
    mine.append(("one rank's clock", (time.perf_counter() - t0) / iters, 0.0,
                 "started late" if late else f"waited for rank {cfg['late_rank'] % n}"))
    best = time_case(case, iters, 5, device)
    mine.append(("dtlab", best, 0.0, "warmup, barrier, aligned start, events, MAX over ranks"))
    rows = [None] * n
    dist.all_gather_object(rows, mine)
    if rank != 0:
        return None
    return [{"method": m, "rank": r, "time_us": sec * 1e6, "spread_us": spread * 1e6,
             "note": note, "backend": dist.get_backend()}
            for m_i in range(len(METHODS)) for r in range(n)
            for m, sec, spread, note in [rows[r][m_i]]]
