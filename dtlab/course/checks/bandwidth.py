"""02's checks: what a check asserts of ``fit_alpha_beta``'s fit (its predictions of held-back
sizes and of the smallest), sweeps made from the alpha-beta model and a seed the test cell
passes in, and bandwidth matrices for ``slow_pairs`` written from a base and exceptions.

The cases (the seeds, the matrices' slow and missing pairs, the expected answers) are the test
cell's."""

from __future__ import annotations


def fit_checked(mine, sizes, times, held_sizes, held_times, where, smallest=None) -> tuple:
    """The learner's fit of (sizes, times), then its predictions of the held-back sizes and of the
    smallest one (`smallest`: its typical time where it is known, else the measured one)."""
    got = mine([int(x) for x in sizes], [float(x) for x in times])
    assert isinstance(got, list) and len(got) == 2 and all(isinstance(v, float) for v in got), \
        f"{where}: return (alpha_us, beta_GBps) as two floats, got {got!r}"
    alpha, beta = got
    assert beta > 0, f"{where}: beta must be positive, got {beta}"
    for size, measured in zip(held_sizes, held_times):
        pred = alpha + size / (beta * 1e3)
        assert abs(pred / measured - 1) <= 0.15, (
            f"{where}: {size} B predicted {pred:.1f} us, measured {measured:.1f} us")
    pred, ref = alpha + sizes[0] / (beta * 1e3), smallest or times[0]
    assert abs(pred / ref - 1) <= 0.25, (
        f"{where}: {sizes[0]} B predicted {pred:.1f} us, typically {ref:.1f} us")
    return alpha, beta


def sweep_of(seed: int) -> tuple:
    """A sweep from the model plus a 1-64 MiB ramp, 3 % noise and one slow call (an odd seed:
    the smallest size's): sizes, times, and the smallest size's typical time."""
    import numpy as np

    rng = np.random.default_rng(seed)
    alpha = float(rng.uniform(5, 60)); beta = float(rng.uniform(20, min(900, 16000 / alpha)))  # noqa: E702
    ramp = alpha * float(rng.uniform(0.8, 2.0)); knee = float(2 ** rng.uniform(20, 24))  # noqa: E702
    sizes = [2 ** k for k in range(3, 31)]
    t = [(alpha + s / (beta * 1e3) + ramp * s / (s + knee)) * (1 + 0.03 * rng.standard_normal())
         for s in sizes]
    t[0 if seed % 2 else int(rng.integers(1, 16))] *= 3
    return sizes, t, alpha + sizes[0] / (beta * 1e3)


def matrix(n, base, slow=(), missing=(), value=None) -> list[list]:
    """An n x n bandwidth matrix: ``base`` give or take a little, ``slow`` {(i, j): GB/s} where
    it says, None on the diagonal and at ``missing``."""
    return [[None if i == j or (i, j) in missing else
             (slow[(i, j)] if (i, j) in slow else base + (i * 7 + j * 3) % 5) for j in range(n)]
            for i in range(n)]
