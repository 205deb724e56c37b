"""Rank side: every check of every collective, run by :func:`run_specs` inside each rank.

Each rank runs the same checks in the same order (so every collective is entered by all ranks),
judges its own output against what it computed the answer must be, and returns one row per
check; the parent merges the ranks' rows (:func:`dtlab.collectives.report.merge`). A check
whose call the backend refuses (its own error, e.g. "does not support") is *unsupported*.

Sizes: ``size`` is the elements of each rank's input for all_reduce, broadcast, reduce,
all_gather, gather and send/recv; of each rank's *output* chunk for reduce_scatter and
scatter; of each chunk sent to one peer for all_to_all (uneven splits add 0-2 to it).

Every check names the torch function(s) it calls (``uses``); when an implementation is being
judged, checks of functions it does not replace are left out.
"""

from __future__ import annotations

import warnings

import torch

from .p2p_checks import batch_isend_irecv, sendrecv
from .values import Ctx, block, sum_tol, UNSUPPORTED

KNOWN_DTYPES = ("float32", "float64", "int64", "int32")  # exact for r*K + i
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")

REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "max": "MAX", "min": "MIN", "product": "PRODUCT"}


def _reduce(xs: list[torch.Tensor], how: str) -> torch.Tensor:
    """The exact answer of a reduction of the ranks' inputs (float64, or int64 for ints)."""
    s = torch.stack([x.double() if x.is_floating_point() else x.long() for x in xs])
    return {"sum": lambda: s.sum(0), "avg": lambda: s.double().mean(0),
            "max": lambda: s.max(0).values, "min": lambda: s.min(0).values,
            "product": lambda: s.prod(0)}[how]()


def _redop(how: str):
    import torch.distributed as dist

    return getattr(dist.ReduceOp, REDUCE_OPS[how])


def _noncontig(ctx: Ctx, x: torch.Tensor):
    """x as every other element of a buffer whose gaps hold -7: (view, gaps)."""
    buf = ctx.empty(2 * x.numel(), str(x.dtype).removeprefix("torch."))
    buf[::2] = x.to(buf.device)
    return buf[::2], buf[1::2]


# --- one function per collective: yields (check, uses, body); body() -> comparisons ----------

def all_reduce(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank
    if known:
        for how in REDUCE_OPS:
            if how == "avg" and dtype not in FLOAT_DTYPES:
                continue  # an average of integers is not defined the same way everywhere

            def body(how=how):
                xs = [ctx.known(q, size, dtype, kind=how) for q in range(n)]
                mine = ctx.dev(xs[r])
                ctx.call("all_reduce", mine, op=_redop(how))
                exp = _reduce(xs, how)
                tol = (exp.abs() * 2.0 ** -23) if how == "avg" else 0  # one rounding of sum/n
                return [(None, mine, exp, tol, None)]
            yield how, ("all_reduce",), body

        def noncontig():
            xs = [ctx.known(q, size, dtype) for q in range(n)]
            view, gaps = _noncontig(ctx, xs[r])
            ctx.call("all_reduce", view)
            return [(None, view, _reduce(xs, "sum"), 0, None),
                    ("outside the view", gaps, torch.full((size,), -7), 0, None)]
        yield "sum non-contiguous", ("all_reduce",), noncontig
    else:
        def rand():
            xs = [ctx.random(q, size, dtype) for q in range(n)]
            mine = ctx.dev(xs[r])
            ctx.call("all_reduce", mine)
            return [(None, mine, _reduce(xs, "sum"), sum_tol(xs, dtype, n), None)]
        yield "sum random", ("all_reduce",), rand


def all_gather(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank
    make = (lambda q: ctx.known(q, size, dtype)) if known \
        else (lambda q: ctx.random(q, size, dtype))
    k = block(size) if known else None

    def as_list(inplace=False, noncontig=False):
        xs = [make(q) for q in range(n)]
        out = [ctx.empty(size, dtype) for _ in range(n)]
        mine = _noncontig(ctx, xs[r])[0] if noncontig else ctx.dev(xs[r])
        if inplace:
            out[r] = mine
        ctx.call("all_gather", out, mine)
        return [(None, out, xs, 0, k)]

    def into_tensor(inplace=False):
        xs = [make(q) for q in range(n)]
        out = ctx.empty(n * size, dtype)
        if inplace:  # the input is this rank's own slot of the output
            mine = out[r * size:(r + 1) * size]
            mine.copy_(xs[r])
        else:
            mine = ctx.dev(xs[r])
        ctx.call("all_gather_into_tensor", out, mine)
        return [(None, out, torch.cat(xs), 0, k)]
    sfx = "" if known else " random"
    yield "list" + sfx, ("all_gather",), as_list
    yield "into_tensor" + sfx, ("all_gather_into_tensor",), into_tensor
    if known:
        yield "list in-place", ("all_gather",), lambda: as_list(inplace=True)
        yield "list non-contiguous", ("all_gather",), lambda: as_list(noncontig=True)
        yield "into_tensor in-place", ("all_gather_into_tensor",), lambda: into_tensor(True)


def reduce_scatter(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank
    make = (lambda q: ctx.known(q, n * size, dtype)) if known \
        else (lambda q: ctx.random(q, n * size, dtype))

    def expect(xs):
        mine = [x[r * size:(r + 1) * size] for x in xs]
        return _reduce(mine, "sum"), (0 if known else sum_tol(mine, dtype, n))

    def as_list(inplace=False):
        xs = [make(q) for q in range(n)]
        chunks = [ctx.dev(c) for c in xs[r].split(size)]
        out = chunks[r] if inplace else ctx.empty(size, dtype)
        ctx.call("reduce_scatter", out, chunks)
        return [(None, out, *expect(xs), None)]

    def as_tensor(inplace=False):
        xs = [make(q) for q in range(n)]
        full = ctx.dev(xs[r])
        out = full[r * size:(r + 1) * size] if inplace else ctx.empty(size, dtype)
        ctx.call("reduce_scatter_tensor", out, full)
        return [(None, out, *expect(xs), None)]
    sfx = "" if known else " random"
    yield "list" + sfx, ("reduce_scatter",), as_list
    yield "tensor" + sfx, ("reduce_scatter_tensor",), as_tensor
    if known:
        yield "list in-place", ("reduce_scatter",), lambda: as_list(True)
        yield "tensor in-place", ("reduce_scatter_tensor",), lambda: as_tensor(True)


def broadcast(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank
    make = (lambda q: ctx.known(q, size, dtype)) if known \
        else (lambda q: ctx.random(q, size, dtype))
    k = block(size) if known else None

    def body(src, noncontig=False):
        xs = [make(q) for q in range(n)]
        mine = _noncontig(ctx, xs[r])[0] if noncontig else ctx.dev(xs[r])
        ctx.call("broadcast", mine, src=src)
        return [(None, mine, xs[src], 0, k)]
    if known:
        yield "src 0", ("broadcast",), lambda: body(0)
        yield "src last", ("broadcast",), lambda: body(n - 1)
        yield "non-contiguous", ("broadcast",), lambda: body(0, True)
    else:
        yield "src last random", ("broadcast",), lambda: body(n - 1)


def reduce(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank

    def body(dst, how="sum"):
        xs = [ctx.known(q, size, dtype) if known else ctx.random(q, size, dtype)
              for q in range(n)]
        mine = ctx.dev(xs[r])
        ctx.call("reduce", mine, dst=dst, op=_redop(how))
        if r != dst:
            return []  # what a non-root's buffer holds afterwards is unspecified
        return [(None, mine, _reduce(xs, how), 0 if known else sum_tol(xs, dtype, n), None)]
    if known:
        yield "sum dst 0", ("reduce",), lambda: body(0)
        yield "sum dst last", ("reduce",), lambda: body(n - 1)
        yield "max dst 0", ("reduce",), lambda: body(0, "max")
    else:
        yield "sum dst last random", ("reduce",), lambda: body(n - 1)


def all_to_all(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank

    def split(q, j, uneven):  # elements rank q sends to rank j
        return size + (q + 2 * j) % 3 if uneven else size

    def inputs(uneven):
        tot = [sum(split(q, j, uneven) for j in range(n)) for q in range(n)]
        k = block(max(tot))
        xs = [ctx.known(q, max(tot), dtype)[:tot[q]] if known else ctx.random(q, tot[q], dtype)
              for q in range(n)]
        parts = [list(x.split([split(q, j, uneven) for j in range(n)])) for q, x in enumerate(xs)]
        return parts, (k if known else None)

    def as_list(uneven):
        parts, k = inputs(uneven)
        out = [ctx.empty(split(j, r, uneven), dtype) for j in range(n)]
        ctx.call("all_to_all", out, [ctx.dev(p) for p in parts[r]])
        return [(None, out, [parts[j][r] for j in range(n)], 0, k)]

    def single(uneven):
        parts, k = inputs(uneven)
        out = ctx.empty(sum(split(j, r, uneven) for j in range(n)), dtype)
        splits = dict(output_split_sizes=[split(j, r, uneven) for j in range(n)],
                      input_split_sizes=[split(r, j, uneven) for j in range(n)]) if uneven else {}
        ctx.call("all_to_all_single", out, ctx.dev(torch.cat(parts[r])), **splits)
        return [(None, out, torch.cat([parts[j][r] for j in range(n)]), 0, k)]
    sfx = "" if known else " random"
    yield "list equal" + sfx, ("all_to_all",), lambda: as_list(False)
    yield "single uneven" + sfx, ("all_to_all_single",), lambda: single(True)
    if known:
        yield "list uneven", ("all_to_all",), lambda: as_list(True)
        yield "single equal", ("all_to_all_single",), lambda: single(False)


def gather(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank

    def body(dst):
        xs = [ctx.known(q, size, dtype) if known else ctx.random(q, size, dtype) for q in range(n)]
        out = [ctx.empty(size, dtype) for _ in range(n)] if r == dst else None
        ctx.call("gather", ctx.dev(xs[r]), gather_list=out, dst=dst)
        return [(None, out, xs, 0, block(size) if known else None)] if r == dst else []
    yield "dst 0" + ("" if known else " random"), ("gather",), lambda: body(0)
    if known:
        yield "dst last", ("gather",), lambda: body(n - 1)


def scatter(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank

    def body(src):
        x = ctx.known(src, n * size, dtype) if known else ctx.random(src, n * size, dtype)
        out = ctx.empty(size, dtype)
        chunks = [ctx.dev(c) for c in x.split(size)] if r == src else None
        ctx.call("scatter", out, scatter_list=chunks, src=src)
        return [(None, out, x[r * size:(r + 1) * size], 0, block(n * size) if known else None)]
    yield "src 0" + ("" if known else " random"), ("scatter",), lambda: body(0)
    if known:
        yield "src last", ("scatter",), lambda: body(n - 1)


CHECKS = {f.__name__: f for f in (all_reduce, all_gather, reduce_scatter, broadcast, reduce,
                                  all_to_all, gather, scatter, sendrecv, batch_isend_irecv)}


def run_checks(ctx: Ctx, op: str, dtypes, sizes) -> list[dict]:
    """Every check of ``op`` for each dtype x size, on this rank: a list of row dicts."""
    rows = []
    for dtype in dtypes:
        for size in sizes:
            kinds = ([True] if dtype in KNOWN_DTYPES else []) + \
                    ([False] if dtype in FLOAT_DTYPES else [])
            for known in kinds:
                for check, uses, body in CHECKS[op](ctx, dtype, size, known):
                    if ctx.impl and not all(u in ctx.impl for u in uses):
                        continue  # judging an implementation: only the calls it replaces
                    ctx.seq += 1
                    rows.append({"op": op, "dtype": dtype, "size": size, "check": check,
                                 "rank": ctx.rank, **_run(ctx, body)})
    return rows


def _run(ctx: Ctx, body) -> dict:
    try:
        with warnings.catch_warnings():  # torch 2.x deprecation notes on *_into_tensor
            warnings.simplefilter("ignore", FutureWarning)
            comparisons = body()
    except Exception as e:  # the backend's refusal is data; anything else is a failure
        msg = " ".join(str(e).split())[:300]
        if UNSUPPORTED.search(msg):
            return {"status": "unsupported", "detail": f"{type(e).__name__}: {msg}"}
        return {"status": "fail", "detail": f"rank {ctx.rank} raised {type(e).__name__}: {msg}"}
    status, detail = ctx.judge(comparisons)
    return {"status": status, "detail": detail}


def run_specs(specs: list[dict], seed: int = 0) -> list[list[dict]]:
    """The rank function of one launch: for each spec ``{"op", "impl", "dtypes", "sizes"}``,
    its rows (one list per spec)."""
    import torch.distributed as dist

    from ..runtime.context import device

    rank, n = dist.get_rank(), dist.get_world_size()
    out = []
    for spec in specs:
        ctx = Ctx(rank, n, str(device()), spec.get("impl"), seed)
        out.append(run_checks(ctx, spec["op"], spec["dtypes"], spec["sizes"]))
    return out
