"""The alpha-beta model of a sweep: ``time_us = alpha_us + size / (beta_GBps * 1e3)``.

Contract: :func:`fit` takes a sweep (a :func:`dtlab.bench.sweep` result or a
:func:`dtlab.bench.to_frame` DataFrame, of one op on one number of ranks, or its path) and returns a :class:`Fit`: ``alpha_us``
(the fixed cost of one call), ``beta_GBps`` (the bytes-per-second slope, in nccl-tests' ``size``
column's bytes), ``residuals`` (measured vs. model at every size), :meth:`Fit.predict`,
:attr:`Fit.crossover_bytes` (where ``alpha == size / beta``: below it a call is latency-bound)
and :meth:`Fit.predict_busbw` (a ring-model extrapolation to more ranks).

Why not one least-squares fit. Sizes span 8 B .. 1 GiB, 8 decades, and the real curve is not
the model: between ~1 MiB and ~64 MiB NCCL ramps up (more channels, pipelining), so one line
through every point fits neither end well. Ordinary least squares on time is ruled by the
largest sizes: its intercept is whatever absorbs their curvature and noise, and one slow call
moves it (recorded dtlab all_to_all in place: the smallest size predicted 87 % high). Least
squares on *relative* error is ruled by the many small sizes, where the bandwidth term is noise
(recorded nccl-tests all_reduce: 1 GiB predicted 16 % high from sizes <= 256 MiB; dtlab
all_to_all in place 18 %). On sweeps with a ramp and 3 % noise (tests/bench/test_fit.py) both
miss by more. So each parameter is fitted where it is the one that matters (Hockney's model
fitted per regime, as in Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005, section 2):

1. ``alpha0`` = the median time of the smallest quarter of the sizes (at least 3): the latency
   plateau, robust to the odd slow call;
2. beta: a least-squares line ``t = a + size / beta`` through the *bandwidth-bound* sizes only,
   the largest sizes from which on every call took ``t >= 4 * alpha0`` (the fixed cost is at most
   a quarter of the time), in absolute time: the curve approaches its asymptote from below (the
   recorded sendrecv gains 18 % busbw from 256 MiB to 1 GiB), so the largest sizes say most about
   beta, and absolute least squares weighs them most. A robust first guess (Theil-Sen) drops
   outliers first. The free intercept ``a`` soaks up the ramp; it is not alpha;
3. alpha = the median of ``t - size / beta`` over the *latency-bound* sizes (``t < 2 * alpha0``).

A sweep that never leaves the plateau (fewer than 2 bandwidth-bound sizes, e.g. 8 B .. 64 KiB on
NVLink) cannot determine beta: :func:`fit` falls back to a relative-error WLS of both terms and
says so in ``method`` and ``warnings``.

>>> import dtlab.bench as bench
>>> f = bench.fit(bench.to_frame("data/h200x2-nccl-tests/nt_all_reduce.txt"), max_bytes="256M")
>>> round(f.alpha_us, 1), round(f.beta_GBps), round(f.predict(1 << 30))
(17.7, 309, 3498)

Terminal: ``python -c "import dtlab.bench as b; print(b.fit('data/h200x2-nccl-tests/nt_all_reduce.txt'))"``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .formulas import busbw_factor, canonical_op, parse_size

if TYPE_CHECKING:
    import pandas

LATENCY_BOUND = 2.0     # t < 2 alpha0: the fixed cost is at least half the time
BANDWIDTH_BOUND = 4.0   # t >= 4 alpha0: the fixed cost is at most a quarter of the time


def ring_steps(op: str, nranks: int) -> int:
    """Sequential neighbour-to-neighbour steps of NCCL's ring for ``op`` on ``nranks`` ranks:
    reduce-scatter + all-gather for all_reduce (2(n-1)), one pass for the others (n-1), one
    message for sendrecv. (NCCL docs, "Collective Operations"; doc/PERFORMANCE.md)"""
    op = canonical_op(op)
    if op == "sendrecv":
        return 1
    return 2 * (nranks - 1) if op == "all_reduce" else max(nranks - 1, 1)


@dataclass
class Fit:
    """An alpha-beta fit of one sweep; ``time_us = alpha_us + size / (beta_GBps * 1e3)``."""

    op: str | None
    nranks: int | None
    column: str                      # 'oop' or 'ip': which measured column was fitted
    alpha_us: float
    beta_GBps: float
    method: str
    residuals: "pandas.DataFrame"    # size, time_us, model_us, rel_err, regime
    warnings: list = field(default_factory=list)

    def predict(self, size) -> float:
        """Model time in microseconds of one call of ``size`` bytes (nccl-tests' size column)."""
        return self.alpha_us + parse_size(size, "size") / (self.beta_GBps * 1e3)

    @property
    def crossover_bytes(self) -> float:
        """The size where the fixed cost equals the transfer time (``alpha = size / beta``):
        smaller messages are latency-bound, larger ones bandwidth-bound."""
        return self.alpha_us * self.beta_GBps * 1e3

    def predict_busbw(self, nranks: int, size) -> float:
        """busbw (GB/s) of the same op at ``size`` on ``nranks`` ranks, from this fit, by NCCL's
        ring model. Assumptions (each one breaks somewhere): every rank's link to its ring
        neighbour is as fast as the link measured here (true on an NVSwitch node, false across a
        PCIe or network hop); the per-step cost ``alpha / ring_steps(op, measured nranks)``
        stays the same and there are ``ring_steps(op, nranks)`` steps; NCCL keeps the ring (at
        small sizes and on many ranks it switches to trees, NVLS or CollNet, which this does
        not predict); the bandwidth term moves ``busbw_factor(op, n) * size`` per rank over that
        link. busbw at large sizes therefore stays at the fitted link rate, while the latency
        term grows with n, so the size needed to reach it grows too."""
        if not self.op or not self.nranks:
            raise ValueError("this fit does not know its op and number of ranks; fit a sweep "
                             "with 'op' and 'nranks' columns.")
        size = parse_size(size, "size")
        link = self.beta_GBps * busbw_factor(self.op, self.nranks)   # GB/s a rank's link carries
        step_us = self.alpha_us / ring_steps(self.op, self.nranks)
        t_us = ring_steps(self.op, nranks) * step_us + \
            busbw_factor(self.op, nranks) * size / (link * 1e3)
        return size / (t_us * 1e-6) / 1e9 * busbw_factor(self.op, nranks)

    def __repr__(self) -> str:
        worst = self.residuals["rel_err"].abs().max()
        return (f"Fit({self.op or '?'} on {self.nranks or '?'} ranks, {self.column}: alpha "
                f"{self.alpha_us:.2f} us, beta {self.beta_GBps:.1f} GB/s, crossover "
                f"{self.crossover_bytes / 2**20:.2f} MiB, {len(self.residuals)} sizes, worst "
                f"residual {worst:+.0%}, {self.method})")


def _points(frame, column: str, max_bytes):
    from .engine import to_frame

    frame = to_frame(frame)  # a path, a sweep's result, a DataFrame
    df = frame
    for key in ("op", "nranks", "tool"):
        if key in df and df[key].nunique(dropna=False) > 1:
            raise ValueError(f"the frame holds several {key}s ({sorted(map(str, df[key].unique()))}); "
                             f"fit one sweep: e.g. frame[frame['{key}'] == ...].")
    if column not in ("auto", "oop", "ip"):
        raise ValueError(f"column={column!r} must be 'auto', 'oop' or 'ip'.")
    if column == "auto":
        column = "oop" if df["oop_time_us"].notna().any() else "ip"
    df = df[(df["size"] > 0) & df[f"{column}_time_us"].notna()]
    if max_bytes is not None:
        df = df[df["size"] <= parse_size(max_bytes, "max_bytes")]
    df = df.sort_values("size")
    if len(df) < 3:
        raise ValueError(f"fit needs at least 3 measured sizes in column {column!r}; got {len(df)}.")
    op = str(df["op"].iloc[0]) if "op" in df and df["op"].notna().all() else None
    n = int(df["nranks"].iloc[0]) if "nranks" in df and df["nranks"].notna().all() else None
    return (df["size"].to_numpy(dtype=float), df[f"{column}_time_us"].to_numpy(dtype=float),
            column, canonical_op(op) if op else None, n)


def _wls(x, y, w):
    """Weighted least squares of y = a + b x; returns (a, b)."""
    import numpy as np

    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    return float(a), float(b)


def _slope(s, t) -> float:
    """Slope of ``t = a + s * slope`` by least squares in absolute time over the inliers of a
    robust first guess (Theil-Sen: the median of every pairwise slope; inliers: relative
    residual within 3 MADs, at least 10 %): one slow call (a recorded all_to_all took 447 us
    at 8 MiB among 30-150 us neighbours) must not set beta."""
    import numpy as np

    i, j = np.triu_indices(len(s), 1)
    b0 = float(np.median((t[j] - t[i]) / (s[j] - s[i])))
    a0 = float(np.median(t - b0 * s))
    rel = (a0 + b0 * s - t) / t
    keep = np.abs(rel - np.median(rel)) <= max(0.10, 3 * 1.4826 * np.median(np.abs(rel - np.median(rel))))
    if keep.sum() < 2:
        return b0
    return _wls(s[keep], t[keep], np.ones(int(keep.sum())))[1]


def fit(frame, column: str = "auto", max_bytes=None) -> Fit:
    """Fit ``time_us = alpha_us + size / (beta_GBps * 1e3)`` to one sweep (see the module
    docstring for the method and why). ``column``: 'auto' (out-of-place where measured, else
    in-place), 'oop' or 'ip'; ``max_bytes`` leaves larger sizes out (to test a prediction on
    them). ValueError on a frame that holds several sweeps or too few sizes.

    >>> fit("data/h200x2-nccl-tests/nt_broadcast.txt").crossover_bytes > 1 << 20   # doctest: +SKIP
    True
    """
    import numpy as np
    import pandas as pd

    s, t, column, op, n = _points(frame, column, max_bytes)
    warnings = []
    alpha0 = float(np.median(t[:max(3, len(t) // 4)]))
    # bandwidth-bound: the tail of sizes from which on every call took >= 4 alpha0 (a lone
    # slow small call -- a recorded all_gather took 308 us at 32 KiB -- is not bandwidth)
    above = t >= BANDWIDTH_BOUND * alpha0
    tail = len(t) - int(np.argmin(above[::-1])) if not above.all() else 0
    big = np.zeros(len(t), dtype=bool)
    big[tail:] = above[tail:]
    if big.sum() >= 2:
        slope = _slope(s[big], t[big])
        method = "alpha: latency-plateau median; beta: least squares over bandwidth-bound sizes"
    else:
        warnings.append(f"only {int(big.sum())} size(s) take >= {BANDWIDTH_BOUND:g}x the "
                        f"small-message time: beta is barely determined; sweep to larger sizes")
        _, slope = _wls(s, t, 1 / t)
        method = "relative WLS of both terms over all sizes (no bandwidth-bound sizes)"
    if not slope > 0:
        raise ValueError("the times do not grow with size: beta cannot be fitted (is this a "
                         "sweep of one op, sizes from small to large?).")
    beta = 1 / slope / 1e3     # slope is us per byte; GB/s = 1e9 B/s = 1e3 B/us
    small = t < LATENCY_BOUND * alpha0
    alpha = float(np.median((t - s * slope)[small])) if small.any() else alpha0
    if alpha <= 0:
        warnings.append(f"alpha came out {alpha:.3g} us <= 0: the plateau is not flat")
    model = alpha + s * slope
    regime = np.where(small, "latency", np.where(big, "bandwidth", "between"))
    res = pd.DataFrame({"size": s.astype("int64"), "time_us": t, "model_us": model,
                        "rel_err": (model - t) / t, "regime": regime})
    return Fit(op, n, column, alpha, beta, method, res, warnings)
