"""Checkpoint and resume: ``torch.distributed.checkpoint`` (DCP) saves on N ranks, loads on M.

Contract: :func:`resume` trains the seeded transformer of :mod:`.fsdp` under FSDP2
(``fully_shard`` per block and the root, SGD with momentum) over a seeded dataset read through
``DistributedSampler``, in two launches of :func:`dtlab.run`:

1. on ``save_ranks`` ranks: the *uninterrupted* run of ``steps`` steps (the reference), then a
   fresh run that saves at step ``stop_at`` with ``dcp.save`` and stops;
2. on ``load_ranks`` fresh ranks, once per mode of :data:`MODES`: a fresh model and optimizer,
   ``dcp.load`` of what the mode restores, then training on to ``steps``.

It returns one row (a dict) per mode; :data:`WHY` says what each mode shows::

    python -c "from dtlab.parity.checkpoint import resume; [print(r) for r in resume()]"
    python -c "from dtlab.parity.checkpoint import resume
    [print(r) for r in resume(('full', 'no_optimizer'), save_ranks=2, load_ranks=3)]"

What is saved -- one ``dcp.save`` of one state dict, one folder (``.metadata`` + one
``__<rank>_0.distcp`` per saving rank):

* ``model``, ``optim``: ``get_state_dict(model, opt)`` -- FSDP2's shards as DTensors; DCP
  records each shard's place in the whole tensor, so a load on M ranks reads the rows its new
  shards need (resharding) and ``set_state_dict`` puts them in;
* ``train``: ``step``, sampler ``epoch`` and ``offset`` (batches of that epoch already done),
  as tensors (loaded in place): the same on every rank, so DCP writes them once;
* ``rng_rank<r>``: rank ``r``'s own torch CPU RNG state (and its CUDA one on GPUs), under a key
  of its own, so each rank writes and reads only its own entry (it lands in rank ``r``'s file).
  Per-rank RNG streams belong to a world size: on M != N ranks there is no stream to continue
  (rank 2 of 3 has no entry; rank 0's stream drew for 6 samples a step, now for 4). So with
  ``augment`` (the only consumer of the RNG here) resharding is refused; reshard with
  ``augment=False`` -- or draw randomness per sample, not per rank, in code that must reshard.

Same data order: the *global* batch is fixed, :data:`GLOBAL_BATCH` = 12 sequences a step,
``12 / ranks`` per rank. ``DistributedSampler`` gives rank ``r`` ``perm[r::W]``, so step ``b``
covers ``perm[12b:12b+12]`` on any ``W`` dividing 12 (the argument of :mod:`.setup`): 2 and 3
ranks see the same samples each step, the gradient is the same mean -- summed in another order.
Batches are taken from the sampler's indices directly, not through a ``DataLoader``: each
``DataLoader`` iterator draws its base seed from the global RNG (unless given a ``generator=``),
which would shift the RNG stream by one draw at every resume.

Verdicts per row (``expected``: what a correct implementation gives; ``ok``: it did):
``bitwise`` -- final parameters and every loss after resume equal to the last bit; ``within
tolerance`` -- nothing above float32's 1e-5 of :data:`dtlab.parity.TOLERANCE` (same numbers,
another summation order; :mod:`.report` says why); ``differs`` -- above it. ``full`` on the
same ranks: bitwise (same data, reductions and RNG draws in the same order). ``full`` on other
ranks: within tolerance (3 ranks sum the gradient in another order than 2). Broken: differs.

Measured on 2 CPU cores: BENCHMARKS.md, section "Parity checks", "Checkpoint and resume". On
2x H200 (``scripts/gpu_checkpoint.py OUT``): ``data/h200x2-checkpoint/``, the same verdicts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import torch
import torch.nn.functional as F

from .fsdp import LR, MOMENTUM, SEQ, VOCAB, TinyTransformer, shard
from .report import tolerance

MODES = ("full", "no_sampler_epoch", "no_rng", "no_optimizer")
WHY = {"full": "everything restored: the resumed run is the uninterrupted one",
       "no_sampler_epoch": "sampler epoch not restored: set_epoch(0) replays epoch 0's order "
                           "from the saved offset -- batches seen before, others skipped",
       "no_rng": "RNG not restored: each rank's stream restarts from its seed, so the token "
                 "corruption repeats step 0's draws instead of continuing",
       "no_optimizer": "optimizer state not loaded: SGD's momentum buffers start from the "
                       "first gradient again; the velocity built over the first steps is "
                       "lost (the first loss after resume still matches: it is computed "
                       "before the first optimizer step)"}
PARTS = {"optim", "epoch", "rng"}    # what a checkpoint holds besides the model and step/offset
DROPS = {"full": set(), "no_sampler_epoch": {"epoch"}, "no_rng": {"rng"},
         "no_optimizer": {"optim"}}   # what each mode does not restore
GLOBAL_BATCH, SAMPLES = 12, 48     # 48 / 12 = 4 steps an epoch; 12 splits over 1, 2, 3, 4, 6 ranks
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH
CORRUPT = 0.15                     # augmentation: a token is replaced by a random one this often
RANK_SEED = 1000                   # rank r's RNG stream starts from RANK_SEED + r


def dataset() -> torch.Tensor:
    """``SAMPLES`` sequences of ``SEQ + 1`` tokens, ``(start + stride * i) % VOCAB``: learnable
    (the loss falls), the same in every process.

    >>> dataset().shape, dataset()[0, :4].tolist()
    (torch.Size([48, 9]), [5, 8, 11, 14])
    """
    g = torch.Generator().manual_seed(7)
    start = torch.randint(VOCAB, (SAMPLES, 1), generator=g)
    stride = torch.randint(1, 4, (SAMPLES, 1), generator=g)
    return (start + stride * torch.arange(SEQ + 1)) % VOCAB


def _augment(x: torch.Tensor) -> torch.Tensor:
    """Token corruption drawn from this rank's global CPU RNG -- as dropout draws from it."""
    keep = torch.rand(x.shape) >= CORRUPT
    return torch.where(keep, x, torch.randint(VOCAB, x.shape))


def _fresh(dev):
    """Model and optimizer as a freshly started rank builds them; then the rank's RNG seed."""
    import torch.distributed as dist

    torch.manual_seed(0)
    model = TinyTransformer().to(dev)
    shard(model, dev)   # gloo ranks on a GPU machine stay on the CPU (recorded on 2x H200)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    torch.manual_seed(RANK_SEED + dist.get_rank())
    return model, opt, {"step": 0, "epoch": 0, "offset": 0}


def _train(model, opt, state: dict, until: int, augment: bool, dev) -> list[float]:
    """Train from ``state`` (updated in place) to step ``until``; the global mean loss per step."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    data, world = dataset(), dist.get_world_size()
    sampler, bs, losses = DistributedSampler(data, shuffle=True, seed=0), GLOBAL_BATCH // world, []
    while state["step"] < until:
        sampler.set_epoch(state["epoch"])
        order = list(sampler)
        for i in range(state["offset"], STEPS_PER_EPOCH):
            tokens = data[order[i * bs:(i + 1) * bs]]
            x, y = tokens[:, :-1], tokens[:, 1:]
            x = _augment(x) if augment else x
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(dev)).float(), y.flatten().to(dev))
            loss.backward()
            opt.step()
            total = loss.detach().clone()
            dist.all_reduce(total)   # every rank's mean over as many samples: the global mean
            losses.append(total.item() / world)
            state["step"], state["offset"] = state["step"] + 1, i + 1
            if state["step"] == until:
                return losses
        state["epoch"], state["offset"] = state["epoch"] + 1, 0
    return losses


def _full(model, opt) -> tuple:
    """Rank 0: every parameter and momentum buffer whole (``full_tensor()``: a collective)."""
    import torch.distributed as dist

    def whole(ts):
        return torch.cat([t.full_tensor().detach().double().flatten().cpu() for t in ts])
    ps = list(model.parameters())
    moms = [opt.state[p]["momentum_buffer"] for p in ps if "momentum_buffer" in opt.state[p]]
    out = whole(ps), whole(moms) if len(moms) == len(ps) else None
    return out if dist.get_rank() == 0 else (None, None)


def _state_dict(model, opt, state: dict, restore: set, dev) -> dict:
    """The state dict to save (``restore`` = all parts) or to load into (the mode's parts)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if "optim" in restore:
        sd = dict(zip(("model", "optim"), get_state_dict(model, opt)))
    else:
        sd = {"model": get_model_state_dict(model)}
    sd["train"] = {k: torch.tensor(v) for k, v in state.items() if k in restore or k != "epoch"}
    if "rng" in restore:
        rng = {"cpu": torch.get_rng_state()}
        if dev.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(dev)
        sd[f"rng_rank{dist.get_rank()}"] = rng
    return sd


def _save_side(path: str, steps: int, stop_at: int, augment: bool) -> dict:
    """Launch 1: the uninterrupted reference, then a run that saves at ``stop_at`` and stops."""
    import torch.distributed.checkpoint as dcp

    from ..runtime.context import device

    dev, t0 = device(), time.perf_counter()
    model, opt, state = _fresh(dev)
    ref_losses = _train(model, opt, state, steps, augment, dev)
    ref_final = _full(model, opt)[0]
    model, opt, state = _fresh(dev)
    leg_losses = _train(model, opt, state, stop_at, augment, dev)
    dcp.save(_state_dict(model, opt, state, PARTS, dev), checkpoint_id=path)
    params, moms = _full(model, opt)
    return {"ref_losses": ref_losses, "ref_final": ref_final, "leg_losses": leg_losses,
            "saved": params, "saved_momentum": moms, "seconds": time.perf_counter() - t0,
            "backend": torch.distributed.get_backend()}


def _load_side(path: str, modes: list, steps: int, augment: bool) -> dict:
    """Launch 2: per mode, fresh ranks' state, load what the mode restores, train on."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    from ..runtime.context import device

    dev, out = device(), {}
    present = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    mine = f"rng_rank{dist.get_rank()}"
    for mode in modes:
        t0 = time.perf_counter()
        model, opt, state = _fresh(dev)
        restore = PARTS - DROPS[mode]
        if not any(k.startswith(mine + ".") for k in present):
            restore.discard("rng")   # a rank the saving world did not have: no stream of its own
        sd = _state_dict(model, opt, state, restore, dev)
        dcp.load(sd, checkpoint_id=path)
        if "optim" in restore:
            set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        else:
            set_model_state_dict(model, sd["model"])
        state.update({k: int(v) for k, v in sd["train"].items()})
        loaded, loaded_moms = _full(model, opt)
        if "rng" in restore:         # last: nothing may draw between restoring and training
            torch.set_rng_state(sd[mine]["cpu"])
            if "cuda" in sd[mine]:
                torch.cuda.set_rng_state(sd[mine]["cuda"], dev)
        losses = _train(model, opt, state, steps, augment, dev)
        out[mode] = {"losses": losses, "loaded": loaded, "loaded_momentum": loaded_moms,
                     "final": _full(model, opt)[0], "rng_restored": "rng" in restore,
                     "seconds": time.perf_counter() - t0}
    return out


def _diff(a, b) -> float | None:
    return None if a is None or b is None else float((a - b).abs().max())


def resume(modes=MODES, save_ranks: int = 2, load_ranks: int | None = None, steps: int = 8,
           stop_at: int = 6, augment: bool | None = None, folder: str | None = None,
           backend: str = "auto", timeout: float = 180) -> list[dict]:
    """Save on ``save_ranks`` at ``stop_at``, resume on ``load_ranks`` (default: the same) in
    each mode, compare with the uninterrupted run. ``augment`` (default: on when the rank
    counts match) corrupts input tokens from each rank's RNG. ``folder``: where the checkpoint
    goes (``<folder>/step<stop_at>-<N>ranks``, replaced if there, kept); None: a temporary
    folder, removed. One row per mode:

    ``mode``, ``save_ranks``, ``load_ranks``, ``steps``, ``stop_at``, ``augment``;
    ``load_max_abs_diff`` / ``momentum_load_max_abs_diff``: parameters / momentum right after
    the load vs at the save, whole tensors (None: not loaded); ``rng_restored``: per loading
    rank, whether it found and restored its own RNG entry;
    ``max_abs_diff``: final parameters vs the uninterrupted run's; ``loss_diff``: per step after
    ``stop_at``, |resumed loss - uninterrupted loss|; ``losses``: the resumed curve;
    ``reference_losses``: the uninterrupted one, every step; ``verdict``, ``expected``, ``ok``,
    ``tolerance``, ``why``; ``checkpoint``: ``{"path", "files": {name: bytes}}``;
    ``seconds``: the mode's load and training on rank 0.
    """
    from ..limits import whole
    from ..runtime.launch import run

    modes = list(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes={modes!r}: give some of {', '.join(MODES)}.")
    splits = "the global batch of 12 must split evenly: 1, 2, 3, 4 or 6"
    save_ranks = whole("save_ranks", save_ranks, 1, 6, splits)
    load_ranks = whole("load_ranks", save_ranks if load_ranks is None else load_ranks, 1, 6, splits)
    for name, n in (("save_ranks", save_ranks), ("load_ranks", load_ranks)):
        if GLOBAL_BATCH % n:
            raise ValueError(f"{name}={n}: {splits}.")
    steps = whole("steps", steps, 2, 40, "a few epochs of 4 steps")
    stop_at = whole("stop_at", stop_at, 1, steps - 1, "the run stops before its end")
    augment = save_ranks == load_ranks if augment is None else bool(augment)
    if augment and save_ranks != load_ranks:
        raise ValueError("augment=True with save_ranks != load_ranks: per-rank RNG streams do "
                         "not carry over to another world size; give augment=False.")
    if "no_rng" in modes and not augment:
        raise ValueError("mode no_rng needs augment=True: without it nothing draws from the RNG.")
    if "no_sampler_epoch" in modes and stop_at < STEPS_PER_EPOCH:
        raise ValueError(f"mode no_sampler_epoch needs stop_at >= {STEPS_PER_EPOCH}: the sampler "
                         "epoch is still 0 before, so there is nothing to lose.")

    own = folder is None
    folder = tempfile.mkdtemp(prefix="dtlab-ckpt-") if own else os.fspath(folder)
    path = os.path.join(folder, f"step{stop_at}-{save_ranks}ranks")
    try:
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.makedirs(path)
        saved = run(_save_side, path, steps, stop_at, augment, nprocs=save_ranks,
                    backend=backend, timeout=timeout).values[0]
        files = {f: os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path))}
        every = run(_load_side, path, modes, steps, augment, nprocs=load_ranks,
                    backend=backend, timeout=timeout).values
        loaded = every[0]
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    tol = tolerance("float32", saved["backend"])
    ref = saved["ref_losses"]
    rows = []
    for mode in modes:
        r = loaded[mode]
        loss_diff = [abs(a - b) for a, b in zip(r["losses"], ref[stop_at:])]
        final = _diff(r["final"], saved["ref_final"])
        worst = max([final, *loss_diff])
        verdict = ("bitwise" if worst == 0 else "within tolerance" if worst <= tol else "differs")
        expected = ("differs" if mode != "full" else
                    "bitwise" if save_ranks == load_ranks else "within tolerance")
        rows.append({"mode": mode, "save_ranks": save_ranks, "load_ranks": load_ranks,
                     "steps": steps, "stop_at": stop_at, "augment": augment,
                     "load_max_abs_diff": _diff(r["loaded"], saved["saved"]),
                     "momentum_load_max_abs_diff": _diff(r["loaded_momentum"],
                                                         saved["saved_momentum"]),
                     "rng_restored": [v[mode]["rng_restored"] for v in every],
                     "max_abs_diff": final,
                     "loss_diff": loss_diff, "losses": r["losses"], "reference_losses": ref,
                     "verdict": verdict, "expected": expected, "ok": verdict == expected or (verdict, expected) == ("bitwise", "within tolerance"),
                     "tolerance": tol, "why": WHY[mode],
                     "checkpoint": {"path": None if own else path, "files": files},
                     "seconds": r["seconds"]})
    return rows
