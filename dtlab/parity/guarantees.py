"""What DDP guarantees by itself: at construction it broadcasts rank 0's parameters and buffers.

Contract: :func:`broadcast_at_construction` builds the model on each rank from a *different*
seed (``seed + rank``), wraps it in DDP, and returns, per rank, a checksum of the parameters and
buffers before and after; after construction every rank holds rank 0's values. So seeding every
rank the same "to make DDP correct" fixes nothing that was broken. Run it::

    python -c "from dtlab.parity import broadcast_at_construction as b; print(b())"
"""

from __future__ import annotations

from ..limits import MAX_SEED, whole


def _state_sum(module) -> float:
    return float(sum(t.double().abs().sum() for t in module.state_dict().values()
                     if t.is_floating_point()))


def _rank_side(seed: int) -> dict:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..runtime.context import device
    from .setup import build_model

    model = build_model("batch", seed=seed + dist.get_rank()).to(device())
    with __import__("torch").no_grad():
        model.norm.running_mean.add_(dist.get_rank())   # buffers differ too
    before = _state_sum(model)
    ddp = DDP(model)
    return {"before": before, "after": _state_sum(ddp.module)}


def broadcast_at_construction(nprocs: int = 2, backend: str = "auto", seed: int = 0) -> list[dict]:
    """Per rank ``{"before": checksum, "after": checksum}``; every "after" equals rank 0's
    "before" (DDP's constructor broadcasts from rank 0)."""
    from ..runtime.launch import run

    whole("seed", seed, 0, MAX_SEED)
    return run(_rank_side, seed, nprocs=nprocs, backend=backend, timeout=60).values
