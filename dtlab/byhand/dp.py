"""DataParallel against DistributedDataParallel, on the same model and global batch.

``torch.nn.DataParallel`` is one process driving every GPU: each step it copies the module to
every GPU (``replicate``), splits the batch (``scatter``), runs the replicas in threads of that
one process, and sums the gradients onto GPU 0, which also runs the optimizer. DDP is one
process per GPU: the model is copied once at the start, each step all-reduces the gradients
(bucketed, overlapped with backward) and every rank runs its own optimizer step. PyTorch's
documentation recommends DDP over DataParallel for that reason
(https://docs.pytorch.org/docs/stable/generated/torch.nn.DataParallel.html).

    compare()      # on >= 2 GPUs: rows for one GPU, DataParallel and DDP, one launch each

Each row: ``mode``, ``gpus``, ``global_batch``, ``step_ms`` (median after ``warmup``),
``samples_per_s`` and ``speedup`` over one GPU. The model is :func:`dtlab.parity.scaling.build`'s
MLP; the same global batch everywhere (DDP: ``global_batch / gpus`` per rank). Where there are
fewer than two GPUs it raises ``ValueError``: there is nothing to compare, and the course shows
the recorded table instead.
"""

from __future__ import annotations

import statistics
import time

from ..parity import scaling


def _single(model: str, batch: int, steps: int, warmup: int, parallel: bool) -> dict:
    """Rank side (one rank that sees every GPU): plain model on cuda:0, or DataParallel."""
    import torch
    import torch.nn as nn

    net = scaling.build(model).cuda(0)
    if parallel:
        net = nn.DataParallel(net)  # every visible GPU
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, scaling.MODELS[model][0], generator=g).cuda(0)
    y = torch.randint(0, scaling.CLASSES, (batch,), generator=g).cuda(0)
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times), "gpus": torch.cuda.device_count() if parallel else 1}


def compare(model: str = "mlp-xl", global_batch: int = 512, steps: int = 20, warmup: int = 5,
            timeout: float = 300) -> list[dict]:
    """One GPU, DataParallel over all GPUs, DDP with one rank per GPU (module docstring)."""
    import torch

    from ..runtime.launch import run

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        raise ValueError(f"DataParallel vs DDP needs 2 or more GPUs; this machine has {n}")
    if model not in scaling.MODELS:
        raise ValueError(f"model={model!r} is not one of {', '.join(scaling.MODELS)}")
    if global_batch % n:
        raise ValueError(f"global_batch={global_batch} must divide among {n} GPUs")
    rows = []
    for mode, parallel in (("one GPU", False), ("DataParallel", True)):
        r = run(_single, model, global_batch, steps, warmup, parallel, nprocs=1,
                timeout=timeout).values[0]
        rows.append({"mode": mode, "gpus": r["gpus"], "step_s": r["step_s"]})
    ddp = scaling.throughput([n], model=model, steps=steps, warmup=warmup,
                             per_rank_batch=global_batch // n, timeout=timeout)
    rows.append({"mode": "DDP", "gpus": n, "step_s": float(ddp.step_ms.iloc[-1]) / 1e3})
    one = rows[0]["step_s"]
    for row in rows:
        step = row.pop("step_s")
        row.update(global_batch=global_batch, model=model, step_ms=1e3 * step,
                   samples_per_s=global_batch / step, speedup=one / step)
    return rows
