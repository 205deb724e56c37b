"""FSDP2 (``torch.distributed.fsdp.fully_shard``) vs DDP on a small transformer; memory per rank.

Contract: :func:`fsdp_vs_ddp` trains the same seeded transformer under DDP (float32, the
reference) and under FSDP2 in each setting of :data:`SETTINGS` on the same ranks and batches,
gathers FSDP2's sharded parameters (``full_tensor()``) after every step and compares; each
:class:`~dtlab.parity.report.Report` counts FSDP2's gradient reduce-scatters (a counting
``set_custom_reduce_scatter``) and carries the per-rank bytes measured (local shards of params,
grads and optimizer state) next to :func:`predict_memory`. Runs on CPU/gloo with torch 2.13
(checked: fully_shard, DTensor and a bf16 all-gather all work there) and on NCCL::

    dtlab parity --fsdp --json
    python -c "from dtlab.parity.fsdp import fsdp_vs_ddp; [print(r) for r in fsdp_vs_ddp()]"

Tolerances (:data:`dtlab.parity.TOLERANCE`): float32 FSDP2 vs DDP differs only in reduction
order (reduce-scatter vs all-reduce) -> float32's 1e-5. With 2 ranks on gloo both sum the same two
numbers and divide by 2, so the result is bitwise equal (measured: 0); with more ranks or NCCL's
rings the order differs. ``MixedPrecisionPolicy(param_dtype=
bfloat16, reduce_dtype=float32)`` computes forward and backward in bf16 (8-bit significand), so it is
held to bfloat16's 1e-2 against float32 DDP; the optimizer still steps float32 shards.

ZeRO stages as FSDP2 settings (Rajbhandari et al. 2020, sec. 5; ``P`` = parameter bytes,
ring collectives, per rank per step): DDP all-reduces gradients (~2P). ZeRO-3 =
``fully_shard(reshard_after_forward=True)``: all-gather in forward, again in backward, and a
reduce-scatter (~3P). ``reshard_after_forward=False`` keeps the gathered parameters from forward
to backward (one all-gather, ~2P, ZeRO-2's traffic) at the price of unsharded parameters during
the step; at rest FSDP2 always shards parameters. ZeRO-1 (optimizer state only) is not an FSDP2
setting: ``torch.distributed.optim.ZeroRedundancyOptimizer`` over DDP.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .report import Report

# VOCAB rows divide none of 2, 3, 4 ranks: the embedding and the head shard unevenly
VOCAB, DIM, HEADS, LAYERS, SEQ = 35, 32, 2, 2, 8
PER_RANK, LR, MOMENTUM = 4, 0.1, 0.9
PARTS = ("params", "grads", "optimizer")   # what a rank holds at rest, per parameter

# name -> (fully_shard keyword arguments, dtype whose tolerance applies)
SETTINGS = {"fsdp2_fp32": ({"reshard_after_forward": True}, "float32"),
            "fsdp2_fp32_keep_gathered": ({"reshard_after_forward": False}, "float32"),
            "fsdp2_bf16_mixed": ({"reshard_after_forward": True, "mp": True}, "bfloat16")}

# ZeRO stage -> what is sharded, and gradient/parameter traffic per rank per step in units of P
ZERO_STAGES = {"ddp": ((), 2), "zero1": (("optimizer",), 2),
               "zero2": (("grads", "optimizer"), 2),
               "zero3": (("params", "grads", "optimizer"), 3)}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """A two-block causal language model: embedding, blocks, final norm, head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x).flatten(0, 1))   # (batch * seq, vocab)


def predict_memory(n_params: int, world: int, shard: tuple = ("params", "grads", "optimizer"),
                   param_bytes: int = 4, grad_bytes: int = 4, optim_states: int = 1,
                   state_bytes: int = 4) -> dict:
    """Bytes per rank at rest after a step: each of params, grads, optimizer state is either
    replicated (all ``n_params``) or sharded (``n_params / world``). ``optim_states``: 1 for SGD
    with momentum, 2 for Adam. Activations and transient gathered parameters are not counted.

    >>> predict_memory(1_000_000, 4, optim_states=2)["total"]
    4000000.0
    >>> predict_memory(1_000_000, 4, shard=(), optim_states=2)["total"]   # Adam, replicated
    16000000
    """
    def part(name, nbytes):
        return n_params * nbytes / world if name in shard else n_params * nbytes

    out = {"params": part("params", param_bytes), "grads": part("grads", grad_bytes),
           "optimizer": part("optimizer", optim_states * state_bytes)}
    out["total"] = sum(out.values())
    return out


def _held(model, opt) -> dict[str, list]:
    ps = list(model.parameters())
    return {"params": ps, "grads": [p.grad for p in ps if p.grad is not None],
            "optimizer": [v for s in opt.state.values() for v in s.values()
                          if torch.is_tensor(v) and v.dim() > 0]}


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _local_bytes(model, opt) -> dict:
    """The bytes of each rank's shards as tensors (``to_local()``: FSDP2's ``torch.chunk`` rows)."""
    return {part: sum(_local(t).numel() * _local(t).element_size() for t in ts)
            for part, ts in _held(model, opt).items()}


def _storage_bytes(model, opt) -> dict:
    """The bytes of the storage behind those shards, each storage once: what is allocated.
    FSDP2 pads every parameter's shard to the size of the first chunk (so the last ranks'
    shorter views sit in storage as large as rank 0's), and its gradients are views into one
    padded reduce-scatter output per unit; the optimizer's state is made from the views."""
    out = {}
    for part, ts in _held(model, opt).items():
        seen = {}
        for t in ts:
            st = _local(t).untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        out[part] = sum(seen.values())
    return out


def _batch(step: int, rank: int, world: int, dev):
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(VOCAB, (PER_RANK * world, SEQ + 1), generator=g)[rank::world]
    return tokens[:, :-1].to(dev), tokens[:, 1:].to(dev)


def _allocated(dev) -> int | None:
    """CUDA bytes allocated now (None on CPU, where the local tensors are the measurement)."""
    if dev.type != "cuda":
        return None
    torch.cuda.synchronize(dev)
    return torch.cuda.memory_allocated(dev)


def shard(model: "TinyTransformer", dev, **kw) -> list:
    """FSDP2 as this package shards the transformer: one unit per block, the rest in the root,
    on a mesh of the rank's own device type (left to itself, ``fully_shard`` puts its mesh on
    CUDA whenever a GPU exists, and gloo ranks on a GPU machine then train on cuda:0: recorded
    on 2x H200). ``kw`` goes to every ``fully_shard``; returns the units, for their hooks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
    units = [*model.blocks, model]
    for m in units:
        fully_shard(m, mesh=mesh, **kw)
    return units


def snapshot(model) -> torch.Tensor:
    """Every parameter whole (FSDP2's gathered with ``full_tensor()``: a collective, so every
    rank calls it), flattened into one float64 CPU tensor."""
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return torch.cat([p.detach().double().flatten().cpu() for p in full])


def _train(model, steps, rank, world, dev, base=None):
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses, snaps = [], []
    for step in range(steps):
        x, y = _batch(step, rank, world, dev)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
        snap = snapshot(model)
        snaps.append(snap if rank == 0 else None)
    held = _local_bytes(model, opt)
    held["storage"] = _storage_bytes(model, opt)
    if base is not None:   # GPU: the allocator's view, incl. DDP buckets / FSDP2 buffers kept
        held["cuda_allocated"] = _allocated(dev) - base
    return losses, snaps, held


def _counting_reduce_scatter(counter: dict):
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class Counting(DefaultReduceScatter):
        def __call__(self, *args, **kwargs):
            counter["calls"] += 1
            return super().__call__(*args, **kwargs)
    return Counting()


def rank_side(steps: int, settings: list[str]) -> dict:
    """Rank side of :func:`fsdp_vs_ddp`: FSDP2 in each setting, then DDP once."""
    import gc
    import time

    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..runtime.context import device

    rank, world, dev = dist.get_rank(), dist.get_world_size(), device()
    out: dict = {"backend": dist.get_backend()}
    # what a process allocates once, at its first matmul and collective (cuBLAS's workspace:
    # 68 MB on 2x H200), allocated before any baseline, so that no setting's figure holds it
    x, y = _batch(0, rank, world, dev)
    F.cross_entropy(TinyTransformer().to(dev)(x).float(), y.flatten()).backward()
    dist.barrier()
    model = None
    # FSDP2's settings first, DDP last: each baseline is taken once the previous run's model is
    # freed, and DDP's is not freed at once (on 2x H200 its buffers went during the next run,
    # which then read 74752 bytes -- or less than nothing -- "allocated" for 185856 held)
    for name in settings:
        kw = dict(SETTINGS[name][0])
        if kw.pop("mp", False):
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
        model = None
        gc.collect()
        torch.manual_seed(0)
        base = _allocated(dev)
        model = TinyTransformer().to(dev)
        counter = {"calls": 0}
        for m in shard(model, dev, **kw):
            m.set_custom_reduce_scatter(_counting_reduce_scatter(counter))
        t0 = time.perf_counter()
        out[name] = (*_train(model, steps, rank, world, dev, base), counter["calls"],
                     time.perf_counter() - t0)
    model = None
    gc.collect()
    torch.manual_seed(0)
    base = _allocated(dev)
    ddp = DDP(TinyTransformer().to(dev))
    out["ddp"] = _train(ddp, steps, rank, world, dev, base)
    out["n_params"] = sum(p.numel() for p in ddp.parameters())
    return out


def fsdp_vs_ddp(nprocs: int = 2, backend: str = "auto", steps: int = 4,
                settings: list[str] | None = None, timeout: float = 120) -> list[Report]:
    """FSDP2 in each setting vs DDP, one launch. Each Report's ``memory`` attribute holds
    ``{"measured": per-rank bytes, "predicted": ...}``; ``allreduce_calls`` counts
    reduce-scatters (rank 0)."""
    from ..runtime.launch import run
    from .report import check_args, tolerance

    check_args("none", nprocs, steps, "float32")
    settings = list(settings or SETTINGS)
    vals = run(rank_side, steps, settings, nprocs=nprocs, backend=backend,
               timeout=timeout).values
    d_losses, d_snaps, _ = vals[0]["ddp"]
    ref = [sum(v["ddp"][0][i] for v in vals) / nprocs for i in range(steps)]
    reports = []
    for name in settings:
        per_rank = [{"losses": v[name][0], "snaps": v[name][1], "allreduce_calls": v[name][3],
                     "error": None, "seconds": v[name][4], "backend": v["backend"]} for v in vals]
        dtype = SETTINGS[name][1]
        r = Report.build(name, False, per_rank, ref, d_snaps, nprocs, dtype,
                         tolerance(dtype, vals[0]["backend"]))
        r.memory = {"measured": [v[name][2] for v in vals],
                    "predicted": predict_memory(vals[0]["n_params"], nprocs),
                    "replicated": predict_memory(vals[0]["n_params"], nprocs, shard=()),
                    "measured_ddp": [v["ddp"][2] for v in vals]}
        reports.append(r)
    return reports



def memory_table(report: Report) -> str:
    """Per rank, bytes at rest of params + grads + optimizer state: DDP's; FSDP2's shards as
    tensors (``to_local()``); the storage FSDP2 allocated for them; the even split
    (:func:`predict_memory`). Then the storage per part, where padding shows."""
    m, n = report.memory, len(report.memory["measured"])
    lines = [f"{'rank':<6}{'DDP':>10}{'FSDP2 shards':>14}{'FSDP2 allocated':>17}{'even split':>12}"]
    for r in range(n):
        ddp, held = m["measured_ddp"][r], m["measured"][r]
        lines.append(f"{r:<6d}{sum(ddp[p] for p in PARTS):>10d}{sum(held[p] for p in PARTS):>14d}"
                     f"{sum(held['storage'][p] for p in PARTS):>17d}"
                     f"{m['predicted']['total']:>12.0f}")
    lines.append("allocated per part: " + "; ".join(
        f"rank {r}: " + ", ".join(f"{p} {m['measured'][r]['storage'][p]}" for p in PARTS)
        for r in range(n)))
    return "\n".join(lines)
