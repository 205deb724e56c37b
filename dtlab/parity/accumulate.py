"""Gradient accumulation: several micro-batches per optimizer step, synchronised once or each time.

Contract: :func:`accumulation` trains the seeded transformer of :mod:`.fsdp` on the same ranks
and batches five ways and returns one row each (a list of dicts, rank 0's counts and every
rank's bytes):

* ``reference``         -- DDP, one backward per step on the whole step's batch (``MICRO``
  micro-batches' worth at once): what accumulation must reproduce;
* ``ddp_sync_each``     -- DDP, ``micro`` backwards of ``loss / micro`` per step, each one
  all-reducing its gradients (the naive loop);
* ``ddp_no_sync``       -- the same under ``with ddp.no_sync():`` for all but the last
  micro-batch: gradients accumulate locally in ``param.grad`` and are all-reduced once;
* ``fsdp2_sync_each``   -- FSDP2 (``fully_shard`` per block and the root), a reduce-scatter
  after every micro-batch;
* ``fsdp2_no_sync``     -- ``model.set_requires_gradient_sync(False)`` for all but the last:
  FSDP2 keeps each parameter's *unsharded* gradient between micro-batches and reduce-scatters
  once.

Each row: ``max_abs_diff`` of every parameter against the reference after every step (FSDP2's
gathered with ``full_tensor()``), ``parity`` within float32's tolerance, ``grad_syncs`` (DDP's
bucket all-reduces, counted by a communication hook; FSDP2's reduce-scatters, counted by a
custom reduce-scatter), and ``grad_bytes``: per rank, the gradient bytes held between two
micro-batches (DDP: ``param.grad``; FSDP2: the sharded gradients plus the unsharded ones it
keeps while sync is off -- read from FSDP2's parameter groups, an internal of torch 2.13 that
this module names in one place, :func:`_fsdp2_grad_bytes`). What it shows: the sum is the same
(parity), the synchronisations drop from ``micro x steps`` to ``steps``, and under FSDP2 the
price is memory -- while sync is off every rank holds whole gradients, as DDP does, instead of
its shard::

    python -c "from dtlab.parity.accumulate import accumulation; print(accumulation())"
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from .fsdp import LR, MOMENTUM, PER_RANK, SEQ, VOCAB, TinyTransformer, shard, snapshot
from .report import tolerance

MODES = ("reference", "ddp_sync_each", "ddp_no_sync", "fsdp2_sync_each", "fsdp2_no_sync")


def _batch(step: int, rank: int, world: int, micro: int, dev):
    """This rank's ``micro`` micro-batches of step ``step`` (PER_RANK sequences each)."""
    g = torch.Generator().manual_seed(500 + step)
    tokens = torch.randint(VOCAB, (micro * PER_RANK * world, SEQ + 1), generator=g)[rank::world]
    return [(t[:, :-1].to(dev), t[:, 1:].to(dev)) for t in tokens.chunk(micro)]


def _fsdp2_grad_bytes(model) -> int:
    """Gradient bytes this rank holds under FSDP2: sharded ``param.grad`` plus the unsharded
    gradients FSDP2 keeps while gradient sync is off (``FSDPParam._unsharded_param.grad`` or
    ``unsharded_accumulated_grad``: torch 2.13 internals)."""
    held = sum(p.grad.to_local().nbytes for p in model.parameters() if p.grad is not None)
    for m in model.modules():
        state = getattr(m, "_get_fsdp_state", None)
        group = getattr(state(), "_fsdp_param_group", None) if state else None
        for fp in getattr(group, "fsdp_params", []):
            for g in (fp.unsharded_accumulated_grad,
                      getattr(getattr(fp, "_unsharded_param", None), "grad", None)):
                held += g.nbytes if g is not None else 0
    return held


def _train(mode: str, micro: int, steps: int) -> dict:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..runtime.context import device
    from .ddp import _counting_hook
    from .fsdp import _counting_reduce_scatter

    rank, world, dev = dist.get_rank(), dist.get_world_size(), device()
    torch.manual_seed(0)
    model = TinyTransformer().to(dev)
    counter = {"calls": 0}
    if mode.startswith("fsdp2"):
        for m in shard(model, dev):
            m.set_custom_reduce_scatter(_counting_reduce_scatter(counter))
    else:
        model = DDP(model)
        model.register_comm_hook(counter, _counting_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    snaps, held = [], 0
    for step in range(steps):
        batches = _batch(step, rank, world, micro, dev)
        if mode == "reference":  # the step's micro-batches as one batch, one backward
            batches = [(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))]
        opt.zero_grad(set_to_none=True)
        for k, (x, y) in enumerate(batches):
            last = k == len(batches) - 1
            if mode == "fsdp2_no_sync":
                model.set_requires_gradient_sync(last)
            quiet = model.no_sync() if mode == "ddp_no_sync" and not last else contextlib.nullcontext()
            with quiet:
                loss = F.cross_entropy(model(x).float(), y.flatten()) / len(batches)
                loss.backward()
            if k == 0 and not last:  # between two micro-batches: what is held now
                held = max(held, _fsdp2_grad_bytes(model) if mode.startswith("fsdp2") else
                           sum(p.grad.nbytes for p in model.parameters() if p.grad is not None))
        opt.step()
        snaps.append(snapshot(model))
    return {"snaps": snaps if rank == 0 else None, "syncs": counter["calls"], "grad_bytes": held,
            "backend": dist.get_backend()}


def rank_side(micro: int, steps: int) -> dict:
    return {mode: _train(mode, micro, steps) for mode in MODES}


def accumulation(nprocs: int = 2, backend: str = "auto", micro: int = 4, steps: int = 3,
                 timeout: float = 180) -> list[dict]:
    """Every mode of :data:`MODES` in one launch of ``nprocs`` ranks; one row per mode."""
    from ..limits import whole
    from ..runtime.launch import run

    nprocs = whole("nprocs", nprocs, 2, 64, "ranks on one machine")
    micro = whole("micro", micro, 2, 64, "micro-batches per step")
    steps = whole("steps", steps, 1, 100, "optimizer steps")
    vals = run(rank_side, micro, steps, nprocs=nprocs, backend=backend, timeout=timeout).values
    ref = vals[0]["reference"]["snaps"]
    tol = tolerance("float32", vals[0]["reference"]["backend"])
    rows = []
    for mode in MODES:
        diff = max(float((a - b).abs().max()) for a, b in zip(vals[0][mode]["snaps"], ref))
        rows.append({"mode": mode, "micro": 1 if mode == "reference" else micro, "steps": steps,
                     "grad_syncs": vals[0][mode]["syncs"], "max_abs_diff": diff,
                     "parity": diff <= tol, "tolerance": tol,
                     # the reference has one batch per step: nothing is held between two
                     "grad_bytes": None if mode == "reference" else
                     [v[mode]["grad_bytes"] for v in vals]})
    return rows
