"""Mixed precision under DDP and FSDP2: how far each way drifts from float32, and why that far.

Contract: :func:`mixed_precision` trains the seeded transformer of :mod:`.fsdp` (SGD with momentum,
the batches of :mod:`.fsdp`) in one launch of :func:`dtlab.run`, first in float32 under DDP (the
reference), then once per mode of :data:`MODES`, and returns one row (a dict) per mode; :data:`WHY`
says what each shows::

    python -c "from dtlab.parity import mixed_precision; [print(r) for r in mixed_precision()]"

Tolerances, derived. A format with p significant bits rounds to nearest with relative error at most
the unit roundoff u = 2^-p (IEEE 754-2019 sec. 2.1, 3.6): float32 p = 24, float16 p = 11 (10 stored
+ 1 implicit), bfloat16 p = 8 (7 stored + 1 implicit: float32's exponent, its significand cut to 8
bits). A mixed-precision gradient is a product of two operands rounded to the format, its result
rounded again: first order, 3 roundings (:data:`ROUNDINGS`), ``|dg_s|_2 <= 3 u |g_s|_2`` (errors
that reach it from deeper layers left out; row ``gradient_error_u``, from the first applied step's
drift). SGD with
momentum mu puts step s's gradient into the parameters after K applied steps with weight
``lr * c_s``, ``c_s = (1 - mu^n) / (1 - mu)``, n = steps applied from s on. Errors that all pointed
the same way would give ``|dp_K|_inf <= |dp_K|_2 <= 3 u lr sum_s c_s |g_s|_2``
(:func:`drift_bound`),
``|g_s|_2`` measured in the float32 reference (row ``grad_norms``). That is each row's
``tolerance``, held by ``param_l2_diff`` (so by ``max_abs_diff`` too). The loss at step K is held
to ``3 u |L_K| + |g_K|_2 tolerance_{K-1}`` (its own forward rounding plus the drift's first-order
effect). First order: the feedback of the drift into later gradients is left out (lr |H| is small
here). float32 modes keep float32's 1e-5 of :mod:`.report` (same numbers, another summation order).

The reduce itself (FSDP2 modes): each reduce-scatter is redone in float64 on the same inputs (a
custom reduce-scatter); ``reduce_error`` is ``|rs - rs64|_2 / |rs64|_2`` per step. A sum of W terms,
rounded at each of W-1 additions and once more by the division, is off by at most
``gamma_W = W u / (1 - W u)`` times the mean of the |terms| (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., sec. 3.1 and 4.2), checked per element (``reduce_within_bound``).

GradScaler (``torch.amp.GradScaler``'s docstring in torch 2.13, ``torch/amp/grad_scaler.py``;
defaults at https://pytorch.org/docs/stable/_modules/torch/cuda/amp/grad_scaler.html): the loss is
multiplied by the scale before backward, the gradients divided by it in ``step``; a power of two,
so both are exact, only float16's range changes. If a gradient is inf/NaN, ``step`` skips the
optimizer step and ``update`` multiplies the scale by ``backoff_factor`` (0.5); after
``growth_interval`` unskipped steps in a row it multiplies it by ``growth_factor`` (2). The
first step overflows by construction: cross entropy's gradient for the target logit is
``(p - 1) / N`` per token (N = 32 tokens per rank); the first loss, a mean over tokens, is 3.97
(a uniform guess over the 35 tokens would give ln 35 = 3.56), so some token has p <= e^-3.97 and ``|dlogit| >= 0.98 * 2^22 / 32 = 1.3e5 > 65504``, float16's largest
finite number. The fp16 row is compared with a float32 run that skips the same steps.

On CPU torch 2.13 runs float16 autocast and ``GradScaler("cpu")`` for real (not a no-op), so
fp16 is measured on CPU too, not only on GPU. Measured on 2 CPU cores: BENCHMARKS.md, section
"Parity checks", "Mixed precision".

On GPU (``scripts/gpu_precision.py OUT``): cuBLAS may reduce in bf16/fp16 inside a GEMM
(``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``, on by default), attention
takes fused kernels, NCCL reduces bf16 hop by hop (2 GPUs: one addition) -- other roundings, the
same bound. Recorded on 2x H100: ``data/h100x2-precision/`` (every verdict as on the CPU).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from ..reporting import Rows
from .fsdp import LR, MOMENTUM, TinyTransformer, _batch, shard, snapshot
from .report import tolerance

MODES = ("fp32", "ddp_bf16", "ddp_fp16_scaler", "fsdp2_fp32", "fsdp2_bf16_reduce_fp32",
         "fsdp2_bf16_reduce_bf16")
# mode -> (wrapper, autocast dtype, FSDP2 (param_dtype, reduce_dtype)); None: float32
SETUP = {"fp32": ("ddp", None, None), "ddp_bf16": ("ddp", "bfloat16", None),
         "ddp_fp16_scaler": ("ddp", "float16", None), "fsdp2_fp32": ("fsdp2", None, None),
         "fsdp2_bf16_reduce_fp32": ("fsdp2", None, ("bfloat16", "float32")),
         "fsdp2_bf16_reduce_bf16": ("fsdp2", None, ("bfloat16", "bfloat16"))}
WHY = {"fp32": "the reference's own code path again: bitwise, or the harness is not deterministic",
       "ddp_bf16": "autocast to bfloat16, no scaler: float32's range, 8 significant bits",
       "ddp_fp16_scaler": "autocast to float16 with GradScaler: 11 bits, but a range that ends at "
                          "65504 -- overflowing steps are skipped, the scale backs off and grows",
       "fsdp2_fp32": "FSDP2 in float32: a reduce-scatter instead of an all-reduce, same precision",
       "fsdp2_bf16_reduce_fp32": "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): "
                                 "bf16 compute, gradients summed in float32",
       "fsdp2_bf16_reduce_bf16": "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16): "
                                 "gradients summed in bfloat16: half the bytes, one more rounding"}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
ROUNDINGS = 3                   # two operands rounded, the result rounded: first order
FP16_MAX = 65504.0              # (2 - 2^-10) * 2^15
INIT_SCALE, GROWTH_INTERVAL = 2.0**22, 2   # torch's defaults: 2^16 and 2000


def drift_bound(u: float, grad_norms: list, applied: list | None = None, lr: float = LR,
                momentum: float = MOMENTUM, roundings: int = ROUNDINGS) -> list[float]:
    """Per step k, the bound on |parameter drift|_2 after steps 0..k: ``roundings * u * lr *
    sum_s c_s |g_s|_2`` over the applied steps s <= k, ``c_s = (1 - mu^n) / (1 - mu)``, n the
    steps applied from s to k (a skipped step adds no gradient and moves no momentum).

    >>> [round(b / (3 * 2**-8 * 0.1), 4) for b in drift_bound(2**-8, [1, 1, 1])]
    [1.0, 2.9, 5.61]
    >>> skip_first = [False, True, True]
    >>> [round(b / (3 * 2**-8 * 0.1), 4) for b in drift_bound(2**-8, [1, 1, 1], skip_first)]
    [0.0, 1.0, 2.9]
    """
    applied = [True] * len(grad_norms) if applied is None else applied
    out = []
    for k in range(len(grad_norms)):
        total, n = 0.0, 0
        for s in range(k, -1, -1):
            if applied[s]:
                n += 1
                total += (1 - momentum ** n) / (1 - momentum) * grad_norms[s]
        out.append(roundings * u * lr * total)
    return out


def _measuring_reduce_scatter(stats: list):
    """FSDP2's reduce-scatter, redone in float64 on the same inputs: error and bound per call."""
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class Measuring(DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            exact = torch.empty_like(output_tensor, dtype=torch.float64)
            mean_abs = torch.empty_like(exact)
            dist.reduce_scatter_tensor(exact, input_tensor.double(), op=op, group=group)
            dist.reduce_scatter_tensor(mean_abs, input_tensor.double().abs(), op=op, group=group)
            work = super().__call__(output_tensor, input_tensor, group, op, async_op)
            if work is not None:
                work.wait()
            w, u = group.size(), UNIT_ROUNDOFF[str(input_tensor.dtype).removeprefix("torch.")]
            err = (output_tensor.double() - exact).abs()
            over = (err > w * u / (1 - w * u) * mean_abs).sum()
            stats.append(torch.stack([err.square().sum(), exact.square().sum(), over.double()]))
    return Measuring()


def _train(mode: str, steps: int, init_scale: float, growth_interval: int, skip=()) -> dict:
    """One mode, from the same seed; ``skip``: steps whose optimizer step is left out."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..runtime.context import device

    rank, world, dev = dist.get_rank(), dist.get_world_size(), device()
    wrapper, autocast, mp = SETUP[mode]
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model, stats = TinyTransformer().to(dev), []
    if wrapper == "fsdp2":
        kw = {} if mp is None else {"mp_policy": MixedPrecisionPolicy(
            param_dtype=getattr(torch, mp[0]), reduce_dtype=getattr(torch, mp[1]))}
        for m in shard(model, dev, **kw):
            m.set_custom_reduce_scatter(_measuring_reduce_scatter(stats))
    else:
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    scaler = (torch.amp.GradScaler(dev.type, init_scale=init_scale,
                                   growth_interval=growth_interval)
              if autocast == "float16" else None)
    out = {"losses": [], "snaps": [], "grad_norms": [], "scales": [], "skipped": [],
           "reduce": [], "backend": dist.get_backend()}
    for step in range(steps):
        x, y = _batch(step, rank, world, dev)
        opt.zero_grad(set_to_none=True)
        stats.clear()
        with torch.autocast(dev.type, dtype=getattr(torch, autocast or "bfloat16"),
                            enabled=autocast is not None):
            loss = F.cross_entropy(model(x).float(), y.flatten())
        if scaler is not None:
            scale = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)         # unscales; skips opt.step() if a gradient is inf/NaN
            scaler.update()
            out["scales"].append(scale)
            out["skipped"].append(scaler.get_scale() < scale)   # backed off: it skipped
        else:
            loss.backward()
            grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                     for p in model.parameters()]
            out["grad_norms"].append(float(torch.cat([g.flatten() for g in grads]).norm()))
            if step not in skip:
                opt.step()
        total = loss.detach().float().clone()
        dist.all_reduce(total)
        out["losses"].append(total.item() / world)
        if stats:                    # sum the shards' squares over ranks: whole-gradient norms
            s = torch.stack(stats).sum(0)
            dist.all_reduce(s)
            out["reduce"].append((math.sqrt(s[0]) / math.sqrt(s[1]), int(s[2])))
        snap = snapshot(model)
        out["snaps"].append(snap if rank == 0 else None)
    out["seconds"] = time.perf_counter() - t0
    return out


def rank_side(modes: list, steps: int, init_scale: float, growth_interval: int) -> dict:
    out = {"reference": _train("fp32", steps, init_scale, growth_interval)}
    for mode in modes:
        out[mode] = _train(mode, steps, init_scale, growth_interval)
        skipped = [s for s, x in enumerate(out[mode]["skipped"]) if x]
        if skipped:                  # float32, the same steps left out
            out[mode + "/reference"] = _train("fp32", steps, init_scale, growth_interval, skipped)
    return out


def _row(mode: str, r: dict, ref: dict, vals: dict, steps: int, world: int) -> dict:
    wrapper, autocast, mp = SETUP[mode]
    dtype = autocast or (mp[0] if mp else "float32")
    reduce_dtype = mp[1] if mp else "float32"
    backend = ref["backend"]
    applied = [not x for x in r["skipped"]] or [True] * steps
    skipped = [s for s, a in enumerate(applied) if not a]
    max_abs = [float((a - b).abs().max()) for a, b in zip(r["snaps"], ref["snaps"])]
    l2 = [float((a - b).norm()) for a, b in zip(r["snaps"], ref["snaps"])]
    loss_diff = [abs(a - b) for a, b in zip(r["losses"], ref["losses"])]
    u = UNIT_ROUNDOFF[dtype]
    if dtype == "float32":
        tol = loss_tol = [tolerance("float32", backend)] * steps
        held, source = max_abs, "float32 on " + backend + ": dtlab.parity.report (1e-5)"
    else:
        tol = drift_bound(u, ref["grad_norms"], applied)
        loss_tol = [ROUNDINGS * u * abs(L) + g * t for L, g, t in
                    zip(ref["losses"], ref["grad_norms"], [0.0] + tol[:-1])]
        held = l2
        source = (f"{ROUNDINGS} u lr sum_s c_s |g_s|_2 on |dp|_2: u = 2^{int(math.log2(u))} "
                  f"({dtype}), lr {LR}, momentum {MOMENTUM}, |g_s|_2 of the float32 reference "
                  f"{min(ref['grad_norms']):.3g}..{max(ref['grad_norms']):.3g}")
    worst = max([*held, *loss_diff])
    within = all(h <= t for h, t in zip(held, tol)) and all(
        d <= t for d, t in zip(loss_diff, loss_tol))
    verdict = "bitwise" if worst == 0 else "within tolerance" if within else "differs"
    expected = "bitwise" if mode == "fp32" else "within tolerance"
    ok = verdict == expected or (mode == "fsdp2_fp32" and verdict == "bitwise")
    row = {"mode": mode, "wrapper": wrapper, "dtype": dtype, "reduce_dtype": reduce_dtype,
           "nprocs": world, "steps": steps, "backend": backend,
           "reference": "float32 DDP" + (f", skipping steps {skipped}" if skipped else ""),
           "max_abs_diff": max_abs, "param_l2_diff": l2, "loss_diff": loss_diff,
           "tolerance": tol, "loss_tolerance": loss_tol, "unit_roundoff": u,
           "tolerance_from": source, "grad_norms": ref["grad_norms"],
           "verdict": verdict, "expected": expected, "ok": ok, "why": WHY[mode],
           "losses": r["losses"], "reference_losses": ref["losses"], "seconds": r["seconds"],
           "scales": r["scales"] or None, "skipped": None, "reduce_error": None,
           "reduce_bound": None, "reduce_within_bound": None, "drift_vs_reduce_fp32": None}
    first = next((s for s, a in enumerate(applied) if a), None)
    if dtype != "float32" and first is not None:   # the parameters were equal before it
        row["gradient_error_u"] = l2[first] / (LR * u * ref["grad_norms"][first])
    if r["scales"]:
        row["skipped"] = skipped
        row["vs_unskipped_max_abs_diff"] = float((r["snaps"][-1] - vals["reference"]["snaps"][-1])
                                                 .abs().max())
    if r["reduce"]:
        ur = UNIT_ROUNDOFF[reduce_dtype]
        row["reduce_error"] = [e for e, _ in r["reduce"]]
        row["reduce_bound"] = world * ur / (1 - world * ur)
        row["reduce_within_bound"] = all(n == 0 for _, n in r["reduce"])
    other = vals.get("fsdp2_bf16_reduce_fp32")
    if mode == "fsdp2_bf16_reduce_bf16" and other is not None:
        row["drift_vs_reduce_fp32"] = [float((a - b).abs().max())
                                       for a, b in zip(r["snaps"], other["snaps"])]
    return row


def line(r: dict) -> str:
    """One row of :func:`mixed_precision` as one line: verdict, the last step's drift against
    its tolerance, and what the mode adds (gradient error in u, the reduce's error, skipped
    steps)."""
    out = (f"{r['mode']}: {r['verdict']} (max |dp| {r['max_abs_diff'][-1]:.2g}, |dp|_2 "
           f"{r['param_l2_diff'][-1]:.2g} <= {r['tolerance'][-1]:.2g})")
    if r.get("gradient_error_u") is not None:
        out += f", gradient error {r['gradient_error_u']:.2f} u"
    if r["reduce_error"]:
        out += f", reduce error {max(r['reduce_error']):.2g} (bound {r['reduce_bound']:.2g})"
    if r["skipped"] is not None:
        out += (f", scales 2^{int(math.log2(r['scales'][0]))}..2^"
                f"{int(math.log2(r['scales'][-1]))}, skipped steps {r['skipped']}")
    return out + ("" if r["ok"] else f"  NOT AS EXPECTED ({r['expected']})")


def plot(rows: list[dict]):
    """Each low-precision row's |dp|_2 per step (solid) against its derived tolerance (dashed,
    same colour), on a log scale; float32 rows have nothing to draw when they are bitwise."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, r in enumerate(x for x in rows if x["dtype"] != "float32"):
        steps = range(len(r["param_l2_diff"]))
        drift = [d if d > 0 else float("nan") for d in r["param_l2_diff"]]  # log scale: no 0
        ax.plot(steps, drift, "o-", c=f"C{i}", label=f"{r['mode']} ({r['verdict']})")
        ax.plot(steps, r["tolerance"], "--", c=f"C{i}")
    ax.set(yscale="log", xlabel="step", ylabel="|params - float32 run's|_2",
           title=f"drift from float32 (solid) and its derived bound (dashed), "
                 f"{rows[0]['nprocs']} ranks, {rows[0]['backend']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mixed_precision(modes=MODES, nprocs: int = 2, steps: int = 8, init_scale: float = INIT_SCALE,
              growth_interval: int = GROWTH_INTERVAL, backend: str = "auto",
              timeout: float = 180) -> list[dict]:
    """Each mode of ``modes`` against float32 DDP, one launch of ``nprocs`` ranks; one row each:

    ``mode``, ``wrapper`` (ddp/fsdp2), ``dtype`` (compute), ``reduce_dtype`` (gradients summed
    in), ``nprocs``, ``steps``, ``backend``, ``reference`` (what it is compared with);
    per step: ``max_abs_diff`` and ``param_l2_diff`` (parameters after the step),
    ``loss_diff``, ``tolerance`` (held by ``param_l2_diff``; by ``max_abs_diff`` for float32)
    and ``loss_tolerance``, ``grad_norms`` (the reference's |g|_2), ``losses``,
    ``reference_losses``; ``unit_roundoff``, ``tolerance_from`` (the formula and its numbers),
    ``verdict`` (bitwise / within tolerance / differs), ``expected``, ``ok``, ``why``,
    ``seconds``; low precision: ``gradient_error_u`` (the first applied step's |dg|_2 in units
    of ``u |g|_2``: ``|dp|_2 / (lr u |g|_2)``). ddp_fp16_scaler: ``scales`` (the scale
    each step's loss was multiplied by),
    ``skipped`` (steps with inf/NaN gradients), ``vs_unskipped_max_abs_diff`` (what the skipped
    steps cost against plain float32). FSDP2: ``reduce_error`` per step, ``reduce_bound``
    (gamma_W of the reduce dtype), ``reduce_within_bound``; fsdp2_bf16_reduce_bf16 also
    ``drift_vs_reduce_fp32`` (max |dp| vs the fp32-reduce run, if it ran). ``init_scale``
    (a power of two) and ``growth_interval``: GradScaler's."""
    from ..limits import number, whole
    from ..runtime.launch import run

    modes = list(modes) if not isinstance(modes, str) else [modes]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes or len(set(modes)) != len(modes):
        raise ValueError(f"modes={modes!r}: give some of {', '.join(MODES)}, each once.")
    nprocs = whole("nprocs", nprocs, 2, 8, "data parallel: 2 ranks or more")
    steps = whole("steps", steps, 1, 100, "a few optimizer steps")
    init_scale = number("init_scale", init_scale, 1, 2.0**64, "a power of two: exact scaling")
    if math.frexp(init_scale)[0] != 0.5:
        raise ValueError(f"init_scale={init_scale!r} must be a power of two: scaling by "
                         "anything else rounds.")
    growth_interval = whole("growth_interval", growth_interval, 1, 10_000,
                            "unskipped steps before the scale grows")
    vals = run(rank_side, modes, steps, init_scale, growth_interval, nprocs=nprocs,
               backend=backend, timeout=timeout).values[0]
    return Precision(_row(m, vals[m], vals.get(m + "/reference", vals["reference"]), vals, steps,
                          nprocs) for m in modes)


class Precision(Rows):
    """What :func:`mixed_precision` returns: one plain row per mode, one :func:`line` each as
    its text."""

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self)

    def render(self) -> str:
        return "\n".join(map(line, self))
