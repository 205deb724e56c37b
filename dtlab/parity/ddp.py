"""DDP vs one process: the same seed, the same global batch, mean loss -- then the classic bugs.

Contract: :func:`compare` trains the tiny classifier of :mod:`.setup` once in this process (the
reference: global batch ``B``, mean loss, SGD) and once under DDP on ``nprocs`` ranks (``B /
nprocs`` per rank, DistributedSampler + ``set_epoch``), compares the parameters *and buffers*
after every step and the loss curves, and says whether they agree within
:data:`dtlab.parity.TOLERANCE`. ``bug=`` swaps in one classic mistake, ``fixed=True`` its fix;
several runs share one launch (:func:`compare_many`). Run it::

    python -c "from dtlab.parity import compare; print(compare('no_set_epoch'))"
    dtlab parity --bug no_set_epoch --json

What "caught" means is per bug (:func:`verdict`): parity broken (no_sampler, no_set_epoch,
batchnorm, sum_loss), twice the gradient all-reduces while parity holds (no_sync_missing; counted
by a DDP communication hook that wraps the default all-reduce), or DDP's own error
(unused_param).
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.nn.functional as F

from .report import BUGS, Report, check_args, tolerance
from .setup import build_model, global_batches, make_data

STEPS_PER_EPOCH = 4
PER_RANK = 4     # samples per rank per step: small, so BatchNorm's per-rank statistics are noisy
LR = 0.2


def knobs(bug: str, fixed: bool, cuda: bool = False) -> dict:
    """What the distributed loop does differently for ``bug`` (``fixed``: its fix)."""
    broken = not fixed
    return {"norm": ("batch" if broken else ("sync" if cuda else "global"))
            if bug == "batchnorm" else "none",
            "unused": bug == "unused_param",
            "find_unused": bug == "unused_param" and fixed,
            "sampler": not (bug == "no_sampler" and broken),
            "set_epoch": not (bug == "no_set_epoch" and broken),
            "reduction": "sum" if bug == "sum_loss" and broken else "mean",
            "accum": 2 if bug == "no_sync_missing" else 1,
            "no_sync": bug == "no_sync_missing" and fixed}


def _snapshot(module) -> torch.Tensor:
    """Every floating parameter and buffer, flattened in state-dict order."""
    return torch.cat([t.detach().double().flatten().cpu() for t in module.state_dict().values()
                      if t.is_floating_point()])


def train_single(bug: str, nprocs: int, steps: int, dtype: torch.dtype, seed: int = 0):
    """The reference: one process, global batch ``PER_RANK * nprocs``, mean loss."""
    batch = PER_RANK * nprocs
    x, y = make_data(batch * STEPS_PER_EPOCH, dtype=dtype)
    model = build_model("batch" if bug == "batchnorm" else "none", bug == "unused_param", seed,
                        dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, snaps = [], []
    for step in range(steps):
        idx = global_batches(len(x), batch, step // STEPS_PER_EPOCH, seed)[step % STEPS_PER_EPOCH]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        snaps.append(_snapshot(model))
    return losses, snaps


def _counting_hook(state: dict, bucket):
    """DDP's default all-reduce (divide by world size, all_reduce SUM), counted."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state["calls"] += 1
    return allreduce_hook(None, bucket)


def train_ddp(k: dict, steps: int, dtype: torch.dtype, seed: int = 0) -> dict:
    """Rank side: one DDP training run with the knobs ``k`` (see :func:`knobs`)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from ..runtime.context import device

    rank, world = dist.get_rank(), dist.get_world_size()
    dev = device()
    x, y = make_data(PER_RANK * world * STEPS_PER_EPOCH, dtype=dtype)
    data = TensorDataset(x, y)
    if k["sampler"]:
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(data, batch_size=PER_RANK, sampler=sampler)
    else:  # every rank shuffles the whole dataset with the same generator: the same batches
        sampler = None
        loader = DataLoader(data, batch_size=PER_RANK, shuffle=True,
                            generator=torch.Generator().manual_seed(seed))
    model = build_model(k["norm"], k["unused"], seed, dtype).to(dev)
    ddp = DDP(model, find_unused_parameters=k["find_unused"])
    counter = {"calls": 0}
    ddp.register_comm_hook(counter, _counting_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    losses, snaps, error, step = [], [], None, 0
    t0 = time.perf_counter()
    try:
        for epoch in range(-(-steps // STEPS_PER_EPOCH)):
            if sampler is not None and k["set_epoch"]:
                sampler.set_epoch(epoch)
            for xb, yb in loader:
                if step == steps:
                    break
                opt.zero_grad(set_to_none=True)
                seen = []
                pieces = list(zip(xb.to(dev).chunk(k["accum"]), yb.to(dev).chunk(k["accum"])))
                for i, (xm, ym) in enumerate(pieces):
                    last = i == len(pieces) - 1
                    with ddp.no_sync() if k["no_sync"] and not last else contextlib.nullcontext():
                        out = ddp(xm)
                        loss = F.cross_entropy(out, ym, reduction=k["reduction"])
                        (loss / len(pieces)).backward()
                    seen.append(F.cross_entropy(out.detach(), ym).item())  # logged: a mean
                opt.step()
                losses.append(sum(seen) / len(seen))
                if rank == 0:
                    snaps.append(_snapshot(ddp.module))
                step += 1
    except RuntimeError as e:  # DDP's own checks (an unused parameter) raise here
        error = str(e).strip()
    return {"losses": losses, "snaps": snaps, "allreduce_calls": counter["calls"],
            "error": error, "seconds": time.perf_counter() - t0,
            "backend": dist.get_backend(), "first_loss_rank": losses[0] if losses else None}


def rank_runs(runs: list[dict], steps: int, dtype_name: str) -> list[dict]:
    """Rank side of :func:`compare_many`: each run in turn, a fresh model and DDP each time."""
    return [train_ddp(k, steps, getattr(torch, dtype_name)) for k in runs]


def compare_many(runs: list[tuple[str, bool]], nprocs: int = 2, backend: str = "auto",
                 steps: int = 8, dtype: str = "float64", timeout: float = 120) -> list[Report]:
    """:func:`compare` for several ``(bug, fixed)`` pairs in one launch of ``nprocs`` ranks."""
    from ..runtime.launch import run
    from ..runtime.plan import gpu_count

    for bug, _ in runs:
        check_args(bug, nprocs, steps, dtype)
    cuda = backend in ("auto", "nccl") and gpu_count() >= nprocs
    res = run(rank_runs, [knobs(b, f, cuda) for b, f in runs], steps, dtype, nprocs=nprocs,
              backend=backend, timeout=timeout)
    reports = []
    for i, (bug, fixed) in enumerate(runs):
        per_rank = [v[i] for v in res.values]
        ls, ss = train_single(bug, nprocs, steps, getattr(torch, dtype))
        reports.append(Report.build(bug, fixed, per_rank, ls, ss, nprocs, dtype,
                                    tolerance(dtype, per_rank[0]["backend"])))
    return reports


def compare(bug: str = "none", fixed: bool = False, **kw) -> Report:
    """One run: DDP with ``bug`` (or its fix) against the single process. See the module."""
    return compare_many([(bug, fixed)], **kw)[0]


def verdict(bug: str, buggy: Report, fix: Report) -> tuple[bool, str]:
    """Was ``bug`` caught by its own definition, and did its fix restore parity? -> (ok, why)."""
    if not fix.parity:
        return False, f"{bug}: the fix does not restore parity ({fix.max_abs_diff})"
    if bug == "no_sync_missing":
        ok = buggy.parity and buggy.allreduce_calls == 2 * fix.allreduce_calls
        return ok, (f"parity holds, but {buggy.allreduce_calls} gradient all-reduces instead of "
                    f"{fix.allreduce_calls}")
    if bug == "unused_param":
        ok = bool(buggy.error) and "find_unused_parameters" in buggy.error
        return ok, f"DDP raised: {(buggy.error or 'nothing').splitlines()[0][:120]}"
    ok = not buggy.parity
    return ok, (f"parity broken from step {buggy.first_divergent_step}: max |diff| "
                f"{buggy.max_abs_diff:.3g} > {buggy.tolerance:g}")


__all__ = ["BUGS", "compare", "compare_many", "verdict", "knobs", "train_single", "train_ddp"]
