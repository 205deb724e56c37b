"""Train the capstone's Llama with FSDP2 on N ranks and measure it: loss, step time, tokens/s,
peak memory and MFU per rank.

Contract: :func:`train` launches :func:`rank_train` through ``dtlab.run`` and returns a dict:
``losses`` (the loss averaged over ranks, one per step), and per rank ``step_s`` (median seconds
per step after the first ``WARMUP_STEPS``), ``tokens_per_s``, ``peak_bytes`` (CUDA
``max_memory_allocated``; None on CPU), ``gpu`` (the device's name), ``mfu`` (over the datasheet
peak; None on CPU or an unknown GPU), ``matmul_flops`` (bf16 matmul FLOP/s measured on that GPU
in the same job; None on CPU) and ``of_matmul`` (the same FLOPs over that rate); and ``gpu_panel``, the live GPU panel's summary
(:mod:`dtlab.monitor`; None without GPUs). Bad arguments raise ValueError before anything
starts. In a notebook, rank 0's steps show as a bar updated in place, beside every GPU's utilisation and
memory. From a terminal::

    dtlab capstone train --size tiny --steps 30 --nprocs 2 --backend gloo
    dtlab capstone train --size 1b --steps 20 --json          # 2+ GPUs

How the model is sharded (FSDP2, ``torch.distributed.fsdp.fully_shard``): one unit per decoder
block, then the root (embedding, final norm, head), so each block's parameters are all-gathered
just before it runs and freed after (ZeRO-3, Rajbhandari et al. 2020). On CUDA the policy is
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``: compute in bf16, gradients
reduce-scattered in fp32, AdamW steps fp32 shards. On CPU (gloo) everything is fp32.

MFU (PaLM, Chowdhery et al. 2022) = ``flops_per_token x tokens/s per GPU / peak``, with
``flops_per_token = 6N + 12 L d s`` (:func:`~dtlab.capstone.model.flops_per_token`: N without
the input embedding table) and ``peak`` the datasheet's dense bf16 rate of the GPU
(:mod:`.mfu`, with sources). ``of_matmul`` divides the same FLOPs by the rate of a large bf16
matmul timed on that GPU just before training instead: a second figure, not MFU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

from ..limits import MAX_STEPS, whole
from ..reporting import Data
from .mfu import datasheet_peak, percent
from .model import CONFIGS

WARMUP_STEPS = 2   # not timed: allocator growth, first all-gathers, kernel selection
MATMUL_N = 8192


def check_args(size: str, steps: int, batch: int | None = None, seq: int | None = None) -> None:
    if size not in CONFIGS:
        raise ValueError(f"size={size!r} is not one of: {', '.join(CONFIGS)}.")
    whole("steps", steps, 1, MAX_STEPS)
    if batch is not None:
        whole("batch", batch, 1, 4096, "sequences per rank per step")
    if seq is not None:
        whole("seq", seq, 1, 1 << 17, "tokens per sequence")


def matmul_flops(device, n: int = MATMUL_N, iters: int = 30) -> float | None:
    """FLOP/s of an ``n x n`` bf16 matmul on this CUDA device (best of 3 timed runs); None on
    CPU, where MFU is not reported."""
    import torch

    if device.type != "cuda":
        return None
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n ** 3 * iters / best


def shard(model, device) -> None:
    """FSDP2: one ``fully_shard`` unit per block, then the root; bf16/fp32 policy on CUDA. The
    device mesh is the ranks' own device type: without it FSDP2 builds a CUDA mesh whenever a
    GPU is visible and moves a gloo run's CPU model there."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {"mesh": init_device_mesh(device.type, (dist.get_world_size(),))}
    if device.type == "cuda":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                               reduce_dtype=torch.float32)
    blocks = getattr(model, "blocks", None) or model.model.layers   # ours, or transformers'
    for block in blocks:
        fully_shard(block, **kw)
    fully_shard(model, **kw)


def train_step(model, opt, x, y):
    """One step: forward, fp32 cross-entropy, backward (FSDP2 reduce-scatters the gradients),
    clip the global gradient norm to 1, AdamW. Returns the detached loss (not yet read back).
    The benchmark runs transformers' model through this same function (``.logits``)."""
    import torch
    import torch.nn.functional as F

    out = model(x)
    logits = getattr(out, "logits", out)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def make_optimizer(model, lr: float):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def rank_train(size: str = "tiny", steps: int = 30, batch: int | None = None,
               seq: int | None = None, data: str = "text", seed: int = 0,
               progress: bool = True, progress_file: str | None = None) -> dict:
    """Rank side of :func:`train` (call it inside ``dtlab.run``). ``data``: "text" (the standard
    library's sources as bytes, :mod:`.data`) or "random" (uniform ids, the benchmark's).
    ``progress``: rank 0 prints a ``[capstone] step`` line per step; ``progress_file``: rank 0
    appends the step as a JSON line there instead (the notebook's bar reads it,
    :mod:`dtlab.monitor`)."""
    import torch
    import torch.distributed as dist

    from ..runtime.context import device as rank_device
    from . import data as corpus
    from .mfu import mfu, of_matmul
    from .model import Llama, flops_per_token, n_params

    rank, world, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    cfg = CONFIGS[size]
    cfg = dataclasses.replace(cfg, batch=batch or cfg.batch, seq=seq or cfg.seq)
    peak = matmul_flops(dev)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    torch.manual_seed(seed)               # the same initial weights on every rank
    with torch.device(dev):
        model = Llama(cfg)
    shard(model, dev)
    opt = make_optimizer(model, cfg.lr)
    warm = max(1, min(10, steps // 5))    # linear learning-rate warm-up, then constant
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    batches = (corpus.batches(corpus.corpus(), cfg.batch, cfg.seq, rank, world, seed, dev)
               if data == "text" else
               corpus.random_batches(cfg.vocab, cfg.batch, cfg.seq, rank, world, seed, dev))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    losses, local, times = [], [], []
    for step in range(steps):
        x, y = next(batches)
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, y)
        sched.step()
        mean = loss.clone()
        dist.all_reduce(mean)             # the logged loss: every rank's, averaged
        mean = mean.item() / world        # .item() waits for the GPU: the step is done
        times.append(time.perf_counter() - t0)
        local.append(loss.item())
        losses.append(mean)
        step_s = step_time(times)  # what the table will say, so far: bar and table agree
        if progress_file and rank == 0:
            _append_line(progress_file, {"step": step + 1, "steps": steps, "loss": mean,
                                         "ms": step_s * 1e3, "warmup": step < WARMUP_STEPS,
                                         "tok_s": cfg.batch * cfg.seq / step_s})
        if progress and rank == 0:
            print(f"[capstone] step {step + 1}/{steps} loss {mean:.4f} "
                  f"{step_s * 1e3:.0f} ms/step "
                  f"{cfg.batch * cfg.seq / step_s / 1e3:.1f}k tok/s/rank"
                  + (" (warm-up)" if step < WARMUP_STEPS else ""),
                  file=sys.stderr, flush=True)
    step_s = step_time(times)
    tps = cfg.batch * cfg.seq / step_s
    fpt = flops_per_token(cfg)
    return {"rank": rank, "world": world, "device": str(dev), "backend": dist.get_backend(),
            "size": size, "config": cfg.to_json(), "n_params": n_params(cfg), "data": data,
            "losses": losses, "local_losses": local, "step_times_s": times, "step_s": step_s,
            "tokens_per_s": tps, "matmul_flops": peak, "gpu": gpu,
            "local_numel": sum(p.to_local().numel() for p in model.parameters()),
            "peak_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None,
            "mfu": mfu(fpt, tps, gpu) if dev.type == "cuda" else None,
            "of_matmul": of_matmul(fpt, tps, peak),
            "torch": torch.__version__}


def step_time(times: list[float]) -> float:
    """Seconds per step as every figure here reports it: the median of the steps after the first
    :data:`WARMUP_STEPS` (of all of them while there are no others yet)."""
    return statistics.median(times[WARMUP_STEPS:] or times)


def _append_line(path: str, record: dict) -> None:
    """One JSON line, opened and closed per step (~20 us): nothing is held open if the rank
    dies, and the parent's tail sees the whole line at once."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def train(size: str = "tiny", steps: int = 30, nprocs: int | None = 2, backend: str = "auto",
          batch: int | None = None, seq: int | None = None, data: str = "text",
          timeout: float | None = 600, progress: bool | str = True, panel=None) -> dict:
    """Train on ``nprocs`` ranks; the summary described in the module docstring, plus
    ``gpu_panel`` (:meth:`dtlab.monitor.GpuPanel.summary`: mean/max utilisation and peak memory per
    GPU over the run; None without GPUs).

    ``progress``: True shows rank 0's steps as a bar updated in place in a notebook and as
    ``[capstone] step`` lines elsewhere; "bar" or "lines" chooses; False shows none.
    ``panel``: the live GPU panel (:mod:`dtlab.monitor`) around the launch -- None: on when GPUs are
    visible; True: on, or one line saying why it is off; False: off; or a :class:`GpuPanel` of
    your own (not yet started), to keep its ``samples``.

    >>> s = train("tiny", 30, nprocs=2, backend="gloo")   # doctest: +SKIP
    >>> s["losses"][-1] < s["losses"][0], s["gpu_panel"]  # doctest: +SKIP
    (True, None)
    """
    from ..runtime.launch import run
    from ..runtime.plan import resolve
    from ..monitor import GpuPanel, StepProgress

    check_args(size, steps, batch, seq)
    if data not in ("text", "random"):
        raise ValueError(f"data={data!r} is not one of: text, random.")
    mode = progress_mode(progress)
    if not (panel is None or isinstance(panel, (bool, GpuPanel))):
        raise ValueError(f"panel={panel!r} must be None, True, False or a GpuPanel.")
    resolve(nprocs, backend)   # bad --nprocs / --backend: refused before anything starts
    with tempfile.TemporaryDirectory(prefix="dtlab-capstone-") as tmp:
        steps_file = os.path.join(tmp, "steps.jsonl") if mode == "bar" else None
        bar = StepProgress(steps_file) if steps_file else None
        if isinstance(panel, GpuPanel):
            live = panel
            live.progress = live.progress or bar
        else:   # False: the bar alone; None: quiet about a missing GPU outside a notebook
            live = GpuPanel(progress=bar, gpus=panel is not False,
                            show_off=True if panel is True else None)
        with live:
            res = run(rank_train, size, steps, batch, seq, data, nprocs=nprocs, backend=backend,
                      timeout=timeout, progress=mode == "lines", progress_file=steps_file)
    ranks = res.values
    first = ranks[0]
    keep = ("world", "backend", "size", "config", "n_params", "data", "losses", "torch")
    out = {k: first[k] for k in keep}
    out["ranks"] = [{k: r[k] for k in ("rank", "device", "step_s", "tokens_per_s", "peak_bytes",
                                       "gpu", "mfu", "matmul_flops", "of_matmul", "local_numel",
                                       "local_losses")} for r in ranks]
    out["gpu_panel"] = live.summary()
    return Summary(out)


def progress_mode(progress: bool | str) -> str | None:
    """"bar" (a notebook kernel), "lines" (elsewhere) or None, from ``train(progress=...)``."""
    from ..runtime.output import in_notebook_kernel

    if progress is True:
        return "bar" if in_notebook_kernel() else "lines"
    if progress is False or progress is None:
        return None
    if progress in ("bar", "lines"):
        return progress
    raise ValueError(f"progress={progress!r} is not one of: True, False, 'bar', 'lines'.")


class Summary(Data):
    """What :func:`train` returns: plain data (a dict), and :func:`format_summary` as its text."""

    def render(self) -> str:
        return format_summary(self)


def format_summary(s: dict) -> str:
    """A few lines for a terminal: the loss curve's ends, then one row per rank."""
    cfg, losses = s["config"], s["losses"]
    lines = [f"capstone {s['size']}: {s['n_params'] / 1e6:.2f}M parameters, {s['world']} ranks "
             f"({s['backend']}), {cfg['batch']}x{cfg['seq']} tokens per rank per step, "
             f"data {s['data']}",
             f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps",
             f"{'rank':>4} {'device':>8} {'ms/step':>9} {'tok/s':>10} {'peak MiB':>9} "
             f"{'MFU':>6} {'matmul TF/s':>11} {'of matmul':>9}"]
    for r in s["ranks"]:
        mem = f"{r['peak_bytes'] / 2**20:.0f}" if r["peak_bytes"] is not None else "-"
        tf = f"{r['matmul_flops'] / 1e12:.0f}" if r["matmul_flops"] else "-"
        lines.append(f"{r['rank']:>4} {r['device']:>8} {r['step_s'] * 1e3:>9.1f} "
                     f"{r['tokens_per_s']:>10.0f} {mem:>9} {percent(r.get('mfu')):>6} {tf:>11} "
                     f"{percent(r.get('of_matmul')):>9}")
    gpus = {r.get("gpu") for r in s["ranks"]} - {None}
    unknown = [g for g in gpus if datasheet_peak(g) is None]
    timed = (f"median after {WARMUP_STEPS} warm-up steps" if len(losses) > WARMUP_STEPS else
             f"from warm-up steps only (none ran after the {WARMUP_STEPS} warm-up steps: run "
             f"more than {WARMUP_STEPS} steps for a steady-state figure)")
    lines.append(f"ms/step: {timed}. MFU: (6N + 12 L d s) x "
                 f"tok/s / the GPU's datasheet dense bf16 peak (PaLM), N without the input "
                 f"embedding" + (f"; no datasheet peak known for {', '.join(unknown)}"
                                 if unknown else "")
                 + (". of matmul: the same FLOPs / the bf16 matmul rate measured here"
                    if gpus else "; no MFU without a GPU"))
    if s.get("gpu_panel"):
        from ..monitor import format_summary as gpu_table

        lines.append(gpu_table(s["gpu_panel"]))
    return "\n".join(lines)
