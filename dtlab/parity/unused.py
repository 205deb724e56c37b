"""What ``find_unused_parameters=True`` costs DDP, measured side by side in one launch.

Contract (launches only through :func:`dtlab.run`; bad input: one ``ValueError``, nothing
started)::

    cost(nprocs=2, backend="gloo")   dict: one row per variant (step, forward, backward ms;
                                     all-reduces and graph searches per step), the ratios to
                                     the plain run, and the warning DDP printed

    python -c "from dtlab.parity.unused import cost; print(cost()['ratio'])"
    dtlab parity --scaling --json      # its "find_unused" key is this dict

The variants (:data:`VARIANTS`), one model each, the same MLP (:data:`.scaling.MODELS`) and the
same batch, stepped in turn (interleaved, so a busy moment of a shared machine hits all three):

* ``plain``: every parameter used, ``find_unused_parameters=False`` (the default);
* ``find_unused``: every parameter used, ``find_unused_parameters=True``: pure overhead;
* ``dead_head``: a head that forward never uses, ``find_unused_parameters=True``: the fix of
  section 3's ``unused_param`` bug (without the flag DDP raises at the next iteration).

What DDP does extra with the flag, read from torch.profiler (CPU events, on every backend):
after each forward it searches the autograd graph from the outputs for the parameters it can
reach (``torch.distributed.ddp.reducer::search_unused_parameters``, one per step; it marks the
others ready at once, so their buckets do not wait), wraps the outputs in ``_DDPSink``, and at
the end of backward all-reduces a map of which parameters each rank used (so ranks that used
different parameters agree): ``c10d::allreduce_`` twice per step instead of once for a model that
fits one bucket. DDP says so itself, once, when the search finds nothing unused
(``reducer.cpp``: "... results in an extra traversal of the autograd graph every iteration ...").

Measured on a shared 2-core CPU box: BENCHMARKS.md, section "Parity checks", "What
``find_unused_parameters=True`` costs". The search grows with the autograd graph (nodes), the
map all-reduce with the network's latency (it is tiny: one flag per parameter tensor);
``scripts/gpu_parity.sh`` records the same dict on NCCL (``scaling.json``'s ``find_unused``).
The cheaper fixes when the graph does not change: delete the dead parameter, or
``static_graph=True`` ("DDP will not search graph in each iteration to detect unused
parameters": ``DistributedDataParallel``'s docstring, torch 2.13).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn

from .mlp import CLASSES, MODELS, _check, build, quiet_profiler

# name: (a head that forward never uses, find_unused_parameters)
VARIANTS = {"plain": (False, False), "find_unused": (False, True), "dead_head": (True, True)}
SEARCH = "search_unused_parameters"   # the profiler event of DDP's graph search (suffix)
WARNING = "find_unused_parameters=True was specified"


class DeadHeadMLP(nn.Module):
    """The scaling MLP ``model`` (:func:`.mlp.build`); ``dead_head=True`` adds a Linear head
    forward never calls (section 3's ``unused_param`` bug, on a larger model)."""

    def __init__(self, model: str = "mlp", dead_head: bool = False):
        super().__init__()
        self.body = build(model)
        if dead_head:
            self.aux = nn.Linear(MODELS[model][0], CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _rank_cost(model: str, steps: int, warmup: int, per_rank_batch: int, threads: int,
               profiled: int) -> dict:
    """Rank side: the three variants stepped in turn; then ``profiled`` steps each, profiled."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    from ..runtime.context import device

    dev = device()
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    width = MODELS[model][0]
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    x = torch.randn(per_rank_batch, width, generator=g).to(dev)
    y = torch.randint(0, CLASSES, (per_rank_batch,), generator=g).to(dev)
    runs = {}
    for name, (dead, find) in VARIANTS.items():
        ddp = DDP(DeadHeadMLP(model, dead).to(dev), find_unused_parameters=find)
        runs[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step(ddp, opt) -> tuple[float, float]:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = ddp(x)                 # with the flag, the graph search runs in here
        sync()
        t1 = time.perf_counter()
        F.cross_entropy(out, y).backward()
        opt.step()
        sync()
        return t1 - t0, time.perf_counter() - t1

    for _ in range(warmup):
        for ddp, opt in runs.values():
            step(ddp, opt)
    dist.barrier()
    times = {name: [] for name in runs}
    for _ in range(steps):
        for name, (ddp, opt) in runs.items():
            times[name].append(step(ddp, opt))
    rows = []
    quiet_profiler(torch.cuda.is_available() and dist.get_backend() == "nccl")
    for name, (ddp, opt) in runs.items():
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(profiled):
                step(ddp, opt)
        events = prof.events()
        search = [e for e in events if e.name.endswith(SEARCH)]
        dead, find = VARIANTS[name]
        fwd = [f for f, _ in times[name]]
        bwd = [b for _, b in times[name]]
        rows.append({
            "variant": name, "find_unused_parameters": find, "dead_head": dead,
            "step_s": statistics.median(f + b for f, b in times[name]),
            "forward_s": statistics.median(fwd), "backward_s": statistics.median(bwd),
            "allreduces_per_step": sum(e.name == "c10d::allreduce_" for e in events) / profiled,
            "searches_per_step": len(search) / profiled,
            "search_ms": sum(e.cpu_time_total for e in search) / 1e3 / profiled,
            "dead_params": sum(p.numel() for n, p in ddp.module.named_parameters()
                               if n.startswith("aux."))})
    return {"rows": rows, "backend": dist.get_backend()}


def cost(nprocs: int = 2, model: str = "mlp", steps: int = 20, per_rank_batch: int = 64,
         backend: str = "auto", warmup: int = 3, threads: int = 1, profiled: int = 2,
         timeout: float = 300) -> dict:
    """Step time with and without ``find_unused_parameters`` in one launch (module docstring).

    -> ``{"rows": [...], "ratio": {"find_unused": x, "dead_head": y}, "warning": str | None,
    "nranks", "backend", "model", "per_rank_batch", "steps"}``; each row: ``variant,
    find_unused_parameters, dead_head, step_ms, forward_ms, backward_ms, allreduces_per_step,
    searches_per_step, search_ms, dead_params`` (times: the slowest rank's median; counts and
    ``search_ms``: rank 0's profiled steps). ``ratio``: step_ms over ``plain``'s.
    """
    from ..runtime.launch import run

    _check([nprocs], model, steps, per_rank_batch, backend, [], warmup)
    if nprocs < 2:
        raise ValueError(f"nprocs={nprocs!r}: DDP's unused-parameter handling needs 2+ ranks.")
    if not isinstance(profiled, int) or isinstance(profiled, bool) or profiled < 1:
        raise ValueError(f"profiled={profiled!r} must be a whole number >= 1.")
    res = run(_rank_cost, model, steps, warmup, per_rank_batch, threads, profiled,
              nprocs=nprocs, backend=backend, timeout=timeout)
    rows = []
    for i, r0 in enumerate(res.values[0]["rows"]):
        row = {k: v for k, v in r0.items() if not k.endswith("_s")}
        for k in ("step_s", "forward_s", "backward_s"):
            row[k[:-2] + "_ms"] = 1e3 * max(v["rows"][i][k] for v in res.values)
        rows.append(row)
    plain = rows[0]["step_ms"]
    said = next((line.split("Warning: ", 1)[-1].split(" (function")[0].strip()
                 for r in range(nprocs) for line in res[r].stderr.splitlines()
                 if WARNING in line), None)
    return {"rows": rows, "ratio": {r["variant"]: r["step_ms"] / plain for r in rows[1:]},
            "warning": said, "nranks": nprocs, "backend": res.values[0]["backend"],
            "model": model, "per_rank_batch": per_rank_batch, "steps": steps}


__all__ = ["VARIANTS", "DeadHeadMLP", "cost"]
