"""Rank side: the point-to-point checks (send/recv around a ring, batch_isend_irecv with both
neighbours), the same contract as :mod:`dtlab.collectives.checks`: each yields
``(check, uses, body)`` and ``body()`` returns the comparisons for this rank."""

from __future__ import annotations

from .values import Ctx, block


def sendrecv(ctx: Ctx, dtype: str, size: int, known: bool):
    n, r = ctx.n, ctx.rank

    def ring(step):  # send to r+step, receive from r-step; even ranks send first (no deadlock)
        xs = [ctx.known(q, size, dtype) if known else ctx.random(q, size, dtype) for q in range(n)]
        mine, got = ctx.dev(xs[r]), ctx.empty(size, dtype)
        for turn in ((0, 1) if r % 2 == 0 else (1, 0)):
            if turn == 0:
                ctx.call("send", mine, dst=(r + step) % n)
            else:
                ctx.call("recv", got, src=(r - step) % n)
        return [(None, got, xs[(r - step) % n], 0, block(size) if known else None)]
    yield "ring" + ("" if known else " random"), ("send", "recv"), lambda: ring(1)
    if known:
        yield "ring backwards", ("send", "recv"), lambda: ring(-1)


def batch_isend_irecv(ctx: Ctx, dtype: str, size: int, known: bool):
    import torch.distributed as dist

    n, r = ctx.n, ctx.rank

    def body():
        fwd = [ctx.known(q, size, dtype) if known else ctx.random(q, size, dtype) for q in range(n)]
        bwd = [-x - 1 for x in fwd]  # a second message per rank, told apart from the first
        got_prev, got_next = ctx.empty(size, dtype), ctx.empty(size, dtype)
        ops = [dist.P2POp(dist.isend, ctx.dev(fwd[r]), (r + 1) % n),
               dist.P2POp(dist.irecv, got_prev, (r - 1) % n),
               dist.P2POp(dist.isend, ctx.dev(bwd[r]), (r - 1) % n),
               dist.P2POp(dist.irecv, got_next, (r + 1) % n)]
        for work in ctx.call("batch_isend_irecv", ops) or ():
            work.wait()
        k = block(size) if known else None
        return [("from rank r-1", got_prev, fwd[(r - 1) % n], 0, k),
                ("from rank r+1", got_next, bwd[(r + 1) % n], 0, None)]
    yield "both neighbours" + ("" if known else " random"), ("batch_isend_irecv",), body
