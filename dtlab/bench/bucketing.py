"""One big all-reduce or many small ones: the same bytes, cut into buckets.

Contract: :func:`bucketing` launches ``nprocs`` ranks and, for each bucket size ``b`` in
``buckets``, all-reduces one ``total``-byte float32 buffer as ``total / b`` back-to-back
``dist.all_reduce`` calls on consecutive views of it (``b == total``: one call). Timed like the
sweep (:func:`dtlab.bench.timing.time_case`'s method: warmup, barrier, aligned start, CUDA
events on GPUs / ``perf_counter`` on gloo, MAX over ranks), averaged over ``iters`` rounds.
Returns a DataFrame: ``bucket_bytes, n_buckets, time_us`` (one round: all buckets),
``per_call_us``, ``busbw`` (all_reduce busbw of the whole ``total`` in ``time_us``).

:func:`bucket_time_us` is the alpha-beta prediction of the same thing from a :func:`fit`:
``n * (alpha + b / beta)`` -- each call pays the fixed cost once, so ``n`` calls pay it ``n``
times. DDP groups gradients into 25 MiB buckets by default (``bucket_cap_mb=25``,
torch.nn.parallel.DistributedDataParallel) for that reason, and so that the first buckets can
be reduced while backward still computes the rest (overlap); a bucket well above the crossover
size (:attr:`dtlab.bench.fit.Fit.crossover_bytes`, ~5-7 MiB for all_reduce on 2x H200 NVLink)
already runs near full bandwidth.

>>> import dtlab.bench as bench
>>> bench.bucketing("16M", ["16M", "1M", "64K"], nprocs=2, backend="gloo")   # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..limits import MAX_ITERS, whole
from .engine import quiet_env
from .formulas import busbw, parse_size

if TYPE_CHECKING:
    import pandas

from .fit import Fit

DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default, 25 MiB


def bucket_time_us(f: Fit, total, bucket) -> float:
    """Predicted microseconds to all-reduce ``total`` bytes as ``total / bucket`` calls."""
    total, bucket = parse_size(total, "total"), parse_size(bucket, "bucket")
    if bucket <= 0 or total % bucket:
        raise ValueError(f"bucket={bucket} must divide total={total}.")
    return total // bucket * f.predict(bucket)


def bucketing(total="1G", buckets=("1G", "4M", "256K"), nprocs: int | None = 2,
              backend: str = "auto", iters: int = 5, warmup: int = 2,
              timeout: float = 300) -> "pandas.DataFrame":
    """Time ``total`` bytes all-reduced as one call and as buckets (module docstring)."""
    import pandas as pd

    from ..runtime import run

    tot = parse_size(total, "total")
    sizes = [parse_size(b, "buckets") for b in buckets]
    for b in sizes:
        if b < 4 or b % 4 or tot % b:
            raise ValueError(f"bucket {b} B must be a whole number of float32s dividing "
                             f"total={tot} B.")
    whole("iters", iters, 1, MAX_ITERS)
    whole("warmup", warmup, 0, MAX_ITERS)
    res = run(_rank_bucketing, tot, sizes, iters, warmup, nprocs=nprocs, backend=backend,
              env=quiet_env(), timeout=timeout)
    n = len(res.values)
    rows = [{"bucket_bytes": b, "n_buckets": tot // b, "time_us": sec * 1e6,
             "per_call_us": sec * 1e6 / (tot // b), "busbw": busbw("all_reduce", tot, sec, n)}
            for b, sec in zip(sizes, res.values[0])]
    df = pd.DataFrame(rows)
    df["nranks"] = n
    return df


def _rank_bucketing(total: int, sizes: list[int], iters: int, warmup: int) -> list[float]:
    import torch
    import torch.distributed as dist

    from .timing import _agree, _sync

    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    buf = torch.ones(total // 4, dtype=torch.float32, device=device)
    out = []
    for b in sizes:
        views = buf.split(b // 4)

        def one_round():
            for v in views:
                dist.all_reduce(v)

        for _ in range(warmup):
            one_round()
        _sync(device)
        dist.barrier()
        _sync(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.all_reduce(torch.zeros(1, device=device))  # aligned start (timing.py)
            start.record()
            for _ in range(iters):
                one_round()
            end.record()
            end.synchronize()
            sec = start.elapsed_time(end) / 1e3 / iters
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                one_round()
            sec = (time.perf_counter() - t0) / iters
        out.append(_agree(sec, dist.ReduceOp.MAX, device))
    del buf
    _sync(device)
    return out
