"""Scaling efficiency of DDP: throughput vs ranks, compute / communication overlap, buckets.

Contract (launches only through :func:`dtlab.run`; bad input: one ``ValueError``, nothing
started)::

    throughput([1, 2], backend="gloo")  DataFrame per world size: step_ms, samples_per_s, efficiency
    profile_split(2, backend="gloo")    dict per step, rank 0: compute_ms, comm_ms, overlap_ms
    buckets([0.05, 0.5, 25])            DataFrame: bucket_cap_mb, allreduce_calls, step_ms
    plot(thr, bkt, prof); report([1, 2])  a Figure; all of them (and unused.cost) as JSON + provenance

    python -c "from dtlab.parity.scaling import throughput; print(throughput([1, 2]))"
    dtlab parity --scaling --nprocs 2 --backend gloo --json

Weak scaling: each rank keeps ``per_rank_batch`` samples; ``samples_per_s = n * per_rank_batch
/ step`` (``step``: the slowest rank's median step after ``warmup``) and ``efficiency =
samples_per_s(n) / (n * samples_per_s(1))``; world size 1 is always measured; one launch per
world size; the model is an MLP of equal Linear layers (:data:`MODELS`). On CPU/gloo each rank
computes on one thread (``torch.set_num_threads(1)``) plus gloo's worker threads, so on a
2-core box 2 ranks already share the cores with gloo (and whatever else runs) and 3 ranks
*must* time-share them (efficiency <= 2/3 before any communication): poor CPU efficiency is a
true, explainable measurement. On GPUs each rank owns a device and NCCL runs on its own
stream, so ~1 is reachable when backward hides the comm.

What the profiler can show (:func:`split`). On CPU it records aten ops on the thread that runs
them, each all-reduce as ``gloo:all_reduce`` on a gloo worker thread (including the wait for the
slowest peer: on a shared box ``comm_ms`` is communication *plus* rank skew) and
``c10d::allreduce_`` (the enqueue) on the caller's thread. So overlap is measurable only as
concurrency between threads: ``|comm intervals ∩ compute intervals on other threads|``. It
cannot show whether both really held a core at once (2 ranks on 2 cores: the OS interleaves),
nor how long the main thread blocks on the last bucket (no event spans that wait). With CUDA
the same arithmetic runs over kernels per stream (NCCL vs compute kernels): there overlap
means the GPU ran both. ``compute_ms`` sums per thread (stream) the union of its op intervals
(nested ops once); ``comm_ms`` is the union of all-reduce intervals (wall time with one in
flight); ``overlap_ms <= comm_ms``. On shared cores the split moves with load.

bucket_cap_mb: DDP all-reduces a bucket of at most ``bucket_cap_mb`` MiB when its last gradient
is ready; left at its default (None = 25) the first bucket is capped at 1 MiB
(``dist._DEFAULT_FIRST_BUCKET_BYTES``), an explicit 25 lifts that ("mlp", 1.6 MB of gradients:
2 all-reduces/step by default, 1 with 25; caps 0.05 / 0.5 / 25 MiB: 6 / 3 / 1). Small buckets
pay the fixed latency more often but start earlier in backward (overlap). Counted with
:mod:`dtlab.parity.ddp`'s comm hook; raw all-reduce bucketing is :func:`dtlab.bench.bucketing`.

Measured (throughput and the split on a shared 2-core box): BENCHMARKS.md, section "Parity
checks", "Weak scaling and the compute / communication split".
"""

from __future__ import annotations

import statistics
import time

from ..reporting import Data
from .mlp import CLASSES, MODELS, _check, build, quiet_profiler  # noqa: F401  (scaling.MODELS, ...)
from .overlap import is_comm, split  # noqa: F401  (re-exported: scaling.split)


# ---------------------------------------------------------------- rank side

def _setup(model: str, per_rank_batch: int, bucket_cap_mb, threads: int):
    """A seeded MLP under DDP with the counting hook, its optimizer and this rank's batch."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..runtime.context import device
    from .ddp import _counting_hook

    dev = device()
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    width = MODELS[model][0]
    net = build(model).to(dev)
    kw = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    ddp = DDP(net, **kw)
    counter = {"calls": 0}
    ddp.register_comm_hook(counter, _counting_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    x = torch.randn(per_rank_batch, width, generator=g).to(dev)
    y = torch.randint(0, CLASSES, (per_rank_batch,), generator=g).to(dev)

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    return step, counter


def _timed(model, steps, warmup, per_rank_batch, bucket_cap_mb, threads) -> dict:
    """Rank side: ``warmup`` steps, then ``steps`` timed ones; all-reduces per timed step."""
    import torch.distributed as dist

    step, counter = _setup(model, per_rank_batch, bucket_cap_mb, threads)
    for _ in range(warmup):
        step()
    dist.barrier()
    counter["calls"] = 0
    times = [step() for _ in range(steps)]
    return {"step_s": statistics.median(times), "calls": counter["calls"] / steps,
            "backend": dist.get_backend()}


def _rank_buckets(model, steps, warmup, per_rank_batch, caps, threads) -> list[dict]:
    """Rank side of :func:`buckets`: a fresh DDP per bucket size, same model and data."""
    return [_timed(model, steps, warmup, per_rank_batch, c, threads) for c in caps]


def _rank_profile(model, steps, warmup, per_rank_batch, bucket_cap_mb, threads):
    """Rank side of :func:`profile_split`: profile ``steps`` steps; rank 0 returns intervals."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    step, _ = _setup(model, per_rank_batch, bucket_cap_mb, threads)
    for _ in range(warmup):
        step()
    dist.barrier()
    cuda = torch.cuda.is_available() and dist.get_backend() == "nccl"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    quiet_profiler(cuda)
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
    wall = time.perf_counter() - t0
    if dist.get_rank() != 0:
        return None
    kernels = [(e.name, e.device_resource_id, e.time_range.start, e.time_range.end)  # streams
               for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU]
    out = kernels or [(e.name, e.thread, e.time_range.start, e.time_range.end)
                      for e in prof.events()]
    return {"events": out, "wall_s": wall, "device": "cuda" if kernels else "cpu"}


# ---------------------------------------------------------------- parent side

def throughput(nranks_list=(1, 2), model: str = "mlp", steps: int = 10,
               per_rank_batch: int = 64, backend: str = "auto", bucket_cap_mb=None,
               warmup: int = 3, threads: int = 1, timeout: float = 300):
    """Weak-scaling throughput and efficiency per world size (module docstring) -> DataFrame:
    ``nranks, backend, global_batch, step_ms, samples_per_s, allreduce_calls, efficiency,
    threads_per_rank``."""
    import pandas as pd

    from ..runtime.launch import run

    _check(nranks_list, model, steps, per_rank_batch, backend, [bucket_cap_mb], warmup)
    sizes = sorted(set(nranks_list) | {1})
    rows = []
    for n in sizes:
        res = run(_timed, model, steps, warmup, per_rank_batch, bucket_cap_mb, threads,
                  nprocs=n, backend=backend, timeout=timeout)
        step = max(v["step_s"] for v in res.values)
        rows.append({"nranks": n, "backend": res.values[0]["backend"],
                     "global_batch": n * per_rank_batch, "step_ms": 1e3 * step,
                     "samples_per_s": n * per_rank_batch / step,
                     "allreduce_calls": res.values[0]["calls"]})
    df = pd.DataFrame(rows)
    df["efficiency"] = df.samples_per_s / (df.nranks * df.samples_per_s.iloc[0])
    df["threads_per_rank"] = threads
    return df


def profile_split(nprocs: int = 2, model: str = "mlp", steps: int = 3, per_rank_batch: int = 64,
                  backend: str = "auto", bucket_cap_mb=None, warmup: int = 3, threads: int = 1,
                  timeout: float = 300) -> dict:
    """Profile ``steps`` DDP steps on rank 0 -> :func:`split` per step, plus ``step_ms``."""
    from ..runtime.launch import run

    _check([nprocs], model, steps, per_rank_batch, backend, [bucket_cap_mb], warmup)
    res = run(_rank_profile, model, steps, warmup, per_rank_batch, bucket_cap_mb, threads,
              nprocs=nprocs, backend=backend, timeout=timeout)
    r0 = res.values[0]
    out = split(r0["events"], steps, r0["device"])
    out.update(nranks=nprocs, step_ms=1e3 * r0["wall_s"] / steps, device=r0["device"],
               exposed_comm_ms=out["comm_ms"] - out["overlap_ms"],
               overlap_fraction=out["overlap_ms"] / out["comm_ms"] if out["comm_ms"] else None)
    return out


def buckets(caps=(0.05, 0.5, 25), nprocs: int = 2, model: str = "mlp", steps: int = 6,
            per_rank_batch: int = 64, backend: str = "auto", warmup: int = 3, threads: int = 1,
            timeout: float = 300):
    """Gradient all-reduces per step and step time for each ``bucket_cap_mb`` in ``caps``, one
    launch -> DataFrame ``bucket_cap_mb, allreduce_calls, step_ms, nranks, backend``."""
    import pandas as pd

    from ..runtime.launch import run

    caps = list(caps)
    if not caps:
        raise ValueError("caps is empty: give bucket sizes in MiB, e.g. [0.05, 0.5, 25].")
    _check([nprocs], model, steps, per_rank_batch, backend, caps, warmup)
    res = run(_rank_buckets, model, steps, warmup, per_rank_batch, caps, threads,
              nprocs=nprocs, backend=backend, timeout=timeout)
    return pd.DataFrame([{"bucket_cap_mb": c, "allreduce_calls": res.values[0][i]["calls"],
                          "step_ms": 1e3 * max(v[i]["step_s"] for v in res.values),
                          "nranks": nprocs, "backend": res.values[0][i]["backend"]}
                         for i, c in enumerate(caps)])


def plot(thr=None, bkt=None, prof=None):
    """Efficiency vs ranks (ideal = 1), bucket_cap_mb vs all-reduces and step time, and/or a
    :func:`profile_split` as bars (compute; all-reduce overlapped by compute, and exposed)."""
    import matplotlib.pyplot as plt

    panels = [p for p in (thr, bkt, prof) if p is not None]
    if not panels:
        raise ValueError("plot needs a throughput() or buckets() frame, or a profile_split().")
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
    axes = list(axes[0])
    if thr is not None:
        ax = axes.pop(0)
        ax.plot(thr.nranks, thr.efficiency, "o-", label="measured")
        ax.axhline(1.0, ls="--", c="gray", label="ideal")
        ax.set(xlabel="ranks", ylabel="scaling efficiency", ylim=(0, 1.1),
               xticks=list(thr.nranks), title=f"weak scaling ({thr.backend.iloc[-1]})")
        ax.legend()
    if bkt is not None:
        ax = axes.pop(0)
        ax.plot(bkt.bucket_cap_mb, bkt.allreduce_calls, "o-", c="C0")
        ax.set(xscale="log", xlabel="bucket_cap_mb (MiB)", ylabel="all-reduces per step",
               title="DDP buckets")
        ax2 = ax.twinx()
        ax2.plot(bkt.bucket_cap_mb, bkt.step_ms, "s--", c="C1")
        ax2.set_ylabel("step time (ms)", color="C1")
    if prof is not None:
        ax = axes.pop(0)
        bars = {"compute": prof["compute_ms"], "all-reduce, overlapped": prof["overlap_ms"],
                "all-reduce, exposed": prof["comm_ms"] - prof["overlap_ms"]}
        ax.barh(list(bars), list(bars.values()), color=["C2", "C0", "C3"])
        ax.invert_yaxis()
        ax.set(xlabel="ms per step (rank 0)",
               title=f"profiler split, {prof.get('nranks', '?')} ranks ({prof.get('device', '?')})")
    fig.tight_layout()
    return fig


def model_size(model: str = "mlp") -> dict:
    """Parameters and float32 gradient MiB of :data:`MODELS`' ``model`` (what buckets split).

    >>> model_size("mlp")
    {'model': 'mlp', 'width': 256, 'depth': 6, 'params': 397322, 'grad_mib': 1.5157}
    """
    if model not in MODELS:
        raise ValueError(f"model={model!r} is not one of {', '.join(MODELS)}.")
    width, depth = MODELS[model]
    params = depth * (width * width + width) + width * CLASSES + CLASSES
    return {"model": model, "width": width, "depth": depth, "params": params,
            "grad_mib": round(4 * params / 2**20, 4)}


def report(nranks_list=(1, 2), backend: str = "auto", model: str = "mlp", steps: int = 10,
           caps=(0.05, 0.5, 25), per_rank_batch: int = 64, command: str = "",
           keep_going: bool = False) -> dict:
    """Every measurement as JSON-able data, with provenance (host, date, versions):
    ``model`` (:func:`model_size`), ``throughput`` (rows of :func:`throughput`, ``efficiency``
    among them), ``profile`` (:func:`profile_split`, ``overlap_fraction`` among them) on the
    largest world size (at least 2), ``buckets`` (rows of :func:`buckets`), ``find_unused``
    (:func:`dtlab.parity.unused.cost`: ``find_unused_parameters`` on vs off), ``provenance``.
    ``keep_going=True`` (a one-shot recording on a GPU machine): a part that raises becomes
    ``{"error": "<its last line>"}`` and the other parts are still measured."""
    import datetime
    import os
    import platform

    import torch

    from .unused import cost

    _check(nranks_list, model, steps, per_rank_batch, backend, list(caps))
    top = max(max(nranks_list), 2)
    kw = {"model": model, "backend": backend, "per_rank_batch": per_rank_batch}
    cuda = torch.cuda.is_available()

    def part(measure):
        try:
            return measure()
        except Exception as e:  # noqa: BLE001 -- recorded, not fatal, only when asked
            if not keep_going:
                raise
            return {"error": (str(e).strip().splitlines() or [type(e).__name__])[-1]}

    return Scaling({"model": model_size(model),
            "throughput": part(lambda: throughput(nranks_list, steps=steps, **kw)
                               .to_dict("records")),
            "profile": part(lambda: profile_split(top, **kw)),
            "buckets": part(lambda: buckets(caps, nprocs=top, **kw).to_dict("records")),
            "find_unused": part(lambda: cost(top, steps=max(steps, 10), **kw)),
            "provenance": {"host": platform.node(), "cpus": os.cpu_count(),
                           "date_utc": datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
                           "cuda": torch.version.cuda,
                           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                           "gpus": torch.cuda.device_count(),
                           "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
                           "model": model, "per_rank_batch": per_rank_batch, "steps": steps,
                           "command": command}})


class Scaling(Data):
    """What :func:`report` returns: plain data (a dict), one line per part as its text."""

    def render(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in self.items())


__all__ = ["MODELS", "build", "model_size", "throughput", "profile_split", "buckets", "split", "plot",
           "report"]
