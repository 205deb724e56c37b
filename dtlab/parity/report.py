"""What a parity check reports, and the tolerance it is held to (per dtype and backend).

Contract: :class:`Report` is plain data (``.to_dict()`` gives the keys ``dtlab parity --json``
prints); :func:`tolerance` is the largest max-abs-difference of parameters (and losses) that
still counts as parity. ``python -m doctest dtlab/parity/report.py``

>>> tolerance("float64", "gloo")
1e-12
>>> check_args("sum_los", 2, 8, "float64")
Traceback (most recent call last):
ValueError: bug='sum_los' is not a known bug: give one of none, no_sampler, no_set_epoch, batchnorm, sum_loss, no_sync_missing, unused_param.

Why these numbers. DDP gives each rank the mean over its ``B/W`` samples, divides by ``W`` and
all-reduces (SUM); the single process takes one mean over ``B``. Same numbers, different
summation order, so the last bits differ: about 1e-16 relative per step in float64, 1e-7 in
float32, compounding over the steps. Bitwise equality is not achievable here, on gloo or NCCL,
unless ``W == 1``: addition in floating point is not associative. The tolerances below leave
room above the differences measured on the tiny classifier, and every bug in :data:`BUGS` that
breaks parity misses them (measured: BENCHMARKS.md, section "Parity checks", "The tolerances'
basis"). NCCL's ring/tree reductions add other orders, not larger errors; TF32 is off for float32.
bfloat16 (FSDP2's MixedPrecisionPolicy, params in bf16, reduce in fp32) keeps an 8-bit
significand, 7 bits stored (~4e-3 relative per rounding). Its tolerance is 1e-2: loose by
nature, above what bf16 gave on the 2-block transformer of :mod:`dtlab.parity.fsdp` and still
under what the bugs above do to the tiny classifier (the same section of BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses

from ..limits import whole

BUGS = ("none", "no_sampler", "no_set_epoch", "batchnorm", "sum_loss", "no_sync_missing",
        "unused_param")

# (dtype, backend) -> max |param diff| (and |loss diff|) that is still parity
TOLERANCE = {("float64", "gloo"): 1e-12, ("float64", "nccl"): 1e-12,
             ("float32", "gloo"): 1e-5, ("float32", "nccl"): 1e-5,
             ("bfloat16", "gloo"): 1e-2, ("bfloat16", "nccl"): 1e-2}


def tolerance(dtype: str, backend: str) -> float:
    """The tolerance for ``dtype`` on ``backend`` (see the module for why)."""
    return TOLERANCE[(dtype, backend)]


def check_args(bug: str, nprocs: int | None, steps: int, dtype: str) -> None:
    """Refuse what cannot run, before anything starts (ValueError, one line)."""
    if bug not in BUGS:
        raise ValueError(f"bug={bug!r} is not a known bug: give one of {', '.join(BUGS)}.")
    if nprocs is not None:
        whole("nprocs", nprocs, 2, 8, "parity is a comparison with one process")
    whole("steps", steps, 1, 64, "4 steps make an epoch")
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype={dtype!r}: give float64 or float32.")


@dataclasses.dataclass
class Report:
    """One comparison of a distributed run with the single process."""
    bug: str
    fixed: bool
    parity: bool
    max_abs_diff: float | None   # parameters and buffers, over every step
    loss_abs_diff: float | None
    tolerance: float
    loss_single: list[float]
    loss_distributed: list[float]
    allreduce_calls: int          # gradient all-reduces DDP issued (rank 0), or reduce-scatters
    error: str | None
    first_divergent_step: int | None
    nprocs: int
    backend: str
    dtype: str
    seconds: float
    memory: dict | None = None    # FSDP2 runs: bytes per rank, measured and predicted

    @classmethod
    def build(cls, bug, fixed, per_rank: list[dict], loss_single, snaps_single, nprocs, dtype,
              tol) -> "Report":
        r0 = per_rank[0]
        n = len(r0["losses"])
        loss_d = [sum(r["losses"][i] for r in per_rank) / len(per_rank) for i in range(n)]
        diffs = [float((a - b).abs().max()) for a, b in zip(r0["snaps"], snaps_single)]
        ldiffs = [abs(a - b) for a, b in zip(loss_d, loss_single)]
        bad = [i for i in range(n) if diffs[i] > tol or ldiffs[i] > tol]
        error = r0["error"] or next((r["error"] for r in per_rank if r["error"]), None)
        complete = error is None and n == len(loss_single)
        return cls(bug, fixed, complete and not bad, max(diffs) if diffs else None,
                   max(ldiffs) if ldiffs else None, tol, loss_single, loss_d,
                   r0["allreduce_calls"], error, bad[0] if bad else None, nprocs,
                   r0["backend"], dtype, r0["seconds"])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        name = self.bug + (" (fixed)" if self.fixed else "")
        if self.error:
            return f"{name}: DDP raised -- {self.error.splitlines()[0][:160]}"
        where = "" if self.parity or self.first_divergent_step is None else \
            f", first off at step {self.first_divergent_step + 1}"  # steps count from 1
        comm = "reduce-scatters" if self.bug.startswith("fsdp") else "all-reduces"
        return (f"{name}: parity {self.parity} (max |diff| {self.max_abs_diff:.3g}, tolerance "
                f"{self.tolerance:g} for {self.dtype} on {self.backend}{where}); "
                f"{self.allreduce_calls} gradient {comm} on rank 0")
