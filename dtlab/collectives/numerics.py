"""Numerics of a reduction: the order of a float sum changes its result, by a bounded amount.

A sum of n floats computed in any order -- left to right, a ring's rotating chunks, a tree --
with every partial sum rounded to a format of unit roundoff u (half the gap between 1 and the
next float) is off from the exact sum by at most

    |s_hat - s| <= gamma_(n-1) * sum_i |x_i|,    gamma_k = k*u / (1 - k*u)

(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 4.4 and §4.2: the bound
holds for every summation order, which is why it fits every all_reduce algorithm). That is the
bound :func:`dtlab.collectives.validate` judges float16/bfloat16 (and random float32) results
against: not bitwise equality, which only holds for one fixed order.

>>> round(sum_error_bound("bfloat16", 4, abs_sum=10.0), 4)   # 3 roundings of 2**-8, on 10.0
0.1186
>>> r = reduction_error("float16", 8, size=4096)
>>> r["max_error"] <= r["bound"], r["orders_differ"]
(True, True)
"""

from __future__ import annotations

import torch

from ..limits import MAX_SEED, whole

# unit roundoff u = 2**-(mantissa bits + 1): the largest relative error of one rounding
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11,
                 "bfloat16": 2.0 ** -8}


def gamma(k: int, dtype: str) -> float:
    """Higham's gamma_k = k*u / (1 - k*u) for the dtype's unit roundoff u."""
    ku = k * UNIT_ROUNDOFF[dtype]
    return ku / (1 - ku)


def sum_error_bound(dtype: str, nprocs: int, abs_sum):
    """Largest error of a sum of ``nprocs`` terms rounded in ``dtype``, in any order:
    ``gamma(nprocs - 1) * abs_sum`` (``abs_sum`` = sum of the terms' absolute values; a float or
    a tensor of them, one per element). Integers are exact: bound 0."""
    if dtype not in UNIT_ROUNDOFF:
        return abs_sum * 0
    return gamma(max(nprocs - 1, 0), dtype) * abs_sum


def reduction_error(dtype: str = "bfloat16", nprocs: int = 8, *, size: int = 4096,
                    seed: int = 0) -> dict:
    """Sum ``nprocs`` random tensors in ``dtype`` in two orders -- rank 0 first (a chain, as
    reduce-to-root does) and the ring's order (element chunk c starts at rank c+1) -- and
    compare both with the float64 sum of the same (already rounded) inputs. In one process, no
    ranks: this is what every all_reduce algorithm does to each element.

    Returns ``{"dtype", "nprocs", "size", "max_error", "bound", "orders_differ",
    "max_error_chain", "max_error_ring", "worst_index"}``: the worst error of either order,
    the bound of :func:`sum_error_bound` at that element, and whether the two orders disagree
    bitwise anywhere (they do, in low precision: the same all_reduce twice is bitwise equal,
    a different world size or algorithm is not).

    >>> r = reduction_error("float32", 4, size=64)
    >>> r["max_error"] <= r["bound"]
    True
    """
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"dtype={dtype!r}: give one of {', '.join(UNIT_ROUNDOFF)}.")
    whole("nprocs", nprocs, 1, 1 << 16, "simulated ranks")
    whole("size", size, 1, (1 << 26) // nprocs, "elements; nprocs x size float64s are held here")
    whole("seed", seed, 0, MAX_SEED)
    gen = torch.Generator().manual_seed(seed)
    tdt = getattr(torch, dtype)
    xs = [torch.randn(size, generator=gen, dtype=torch.float64).to(tdt) for _ in range(nprocs)]
    exact = torch.stack([x.double() for x in xs]).sum(0)
    abs_sum = torch.stack([x.double().abs() for x in xs]).sum(0)

    chain = xs[0].clone()
    for x in xs[1:]:
        chain = chain + x  # each partial sum rounded to dtype
    ring = torch.empty_like(xs[0])
    for c, idx in enumerate(torch.arange(size).chunk(min(nprocs, size))):
        acc = xs[(c + 1) % nprocs][idx].clone()  # the ring's reduce-scatter starts the chunk here
        for k in range(2, nprocs + 1):
            acc = acc + xs[(c + k) % nprocs][idx]
        ring[idx] = acc
    err_chain = (chain.double() - exact).abs()
    err_ring = (ring.double() - exact).abs()
    err = torch.maximum(err_chain, err_ring)
    worst = int(err.argmax())
    return {"dtype": dtype, "nprocs": nprocs, "size": size,
            "max_error": float(err[worst]),
            "bound": float(sum_error_bound(dtype, nprocs, abs_sum[worst])),
            "within_bound": bool((err <= sum_error_bound(dtype, nprocs, abs_sum)).all()),
            "orders_differ": bool((chain != ring).any()),
            "max_error_chain": float(err_chain.max()), "max_error_ring": float(err_ring.max()),
            "worst_index": worst}
