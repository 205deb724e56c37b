"""01's checks: what a check asserts of ``check_all_gather``'s verdicts on a faulty network
(:class:`dtlab.course.faults.Network`), and for ``ring_all_gather`` and ``composed_all_reduce``
the calls made from a random source the test cell passes in (values only each rank knows) and
what a check asserts of every rank's result and of the messages that carried it.

The cases (the worlds, faults, shapes and dtypes, the hidden faults' order) are the test cell's;
the jobs themselves are run from it (``course.Ranks(...).run``)."""

from __future__ import annotations

import math

from .. import traffic

AGREE = {"impl:all_gather", "all_reduce", "barrier"}  # impl, and one-element verdicts
REDUCE = {"SUM": sum, "MAX": max, "MIN": min, "PRODUCT": math.prod}


# -- check_all_gather ------------------------------------------------------------------------
def verdicts(out, net, k: int, what: str) -> None:
    """Every rank of ``out`` (the job of case ``k``, on ``net``) said what a correct validator
    says (``net.expected``), agreeing through at most 4 one-element all-reduces."""
    n, fault = net.n, net.fault
    problems = traffic.within(out.traffic, AGREE, {"all_reduce": 4})
    assert not problems, f"{what}: {problems[0]}"
    for r in range(n):
        reduces = traffic.count(out.traffic, r, "all_reduce")  # however the calls are labelled
        assert reduces <= 4, f"{what}: rank {r} ran {reduces} one-element all-reduces (at most 4)"
        got = out.values[r][0]
        assert got is net.expected, (f"{what}, case {k + 1} ({fault['kind'] if fault else 'sound'}"
                                     f"): rank {r} said {got!r}; expected {net.expected}")


# -- ring_all_gather -------------------------------------------------------------------------
def gather_cases(n: int, shapes: list, dtypes: list, rng) -> tuple:
    """Each shape and dtype twice, on values drawn from ``rng`` that only each rank knows:
    (specs [(shape, dtype)], calls [call][rank] -> values, per_rank [rank] -> the calls' dicts)."""
    specs = [(s, d) for _ in range(2) for s in shapes for d in dtypes]
    calls = [[[float(rng.randint(-10**6, 10**6)) if d == "float32" else rng.randint(-2**40, 2**40)
               for _ in range(math.prod(s))] for _ in range(n)] for s, d in specs]
    per_rank = [[{"shape": list(s), "dtype": d, "mine": calls[c][r]} for c, (s, d) in enumerate(specs)]
                for r in range(n)]
    return specs, calls, per_rank


def gathered(out, n: int, specs: list, calls: list) -> None:
    """Every rank of ``out`` holds every rank's values in its slot, every call, sent around a ring."""
    for r in range(n):
        for c, (s, d) in enumerate(specs):
            for q in range(n):
                got, want = out.values[r][c][q], calls[c][q]
                assert got == want, (f"{n} ranks, shape {s}, {d}, call {c + 1}: on rank {r}, slot {q} "
                                     f"holds {got[:6]}..., rank {q} gave {want[:6]}...")
    problems = traffic.ring_all_gather(out.traffic, calls, n)
    assert not problems, f"{n} ranks: {problems[0]}"


# -- composed_all_reduce ---------------------------------------------------------------------
def reduce_cases(n: int, shapes: list, dtypes: list, rng) -> tuple:
    """Each shape, dtype and op, on values drawn from ``rng`` that only each rank knows (small
    integers: every result is exact in float32): (specs [(shape, dtype, op)], calls [call][rank]
    -> values, per_rank [rank] -> the calls' dicts)."""
    specs = [(s, d, op) for s in shapes for d in dtypes for op in REDUCE]
    calls = [[[float(rng.randint(1, 5)) if d == "float32" else rng.randint(1, 5)
               for _ in range(math.prod(s))] for _ in range(n)] for s, d, _ in specs]
    per_rank = [[{"shape": list(s), "dtype": d, "op": op, "mine": calls[c][r]}
                 for c, (s, d, op) in enumerate(specs)] for r in range(n)]
    return specs, calls, per_rank


def reduced(out, n: int, specs: list, calls: list) -> None:
    """Every rank of ``out`` holds each call's reduction, in its shape, reached through one
    reduce-scatter and one all-gather."""
    for c, (s, d, op) in enumerate(specs):
        want = [REDUCE[op](col) for col in zip(*calls[c])]
        for r in range(n):
            got = out.values[r][c]
            assert got["shape"] == list(s), f"{n} ranks, {op}: rank {r}'s tensor came back shaped {got['shape']}, not {list(s)}"
            bad = [i for i, (g, w) in enumerate(zip(got["values"], want)) if g != w]
            assert not bad, (f"{n} ranks, shape {s}, {d}, {op}: rank {r}, index {bad[0]}: expected "
                             f"{want[bad[0]]}, got {got['values'][bad[0]]}")
    problems = traffic.composed_all_reduce(out.traffic, calls, n)
    assert not problems, f"{n} ranks: {problems[0]}"
