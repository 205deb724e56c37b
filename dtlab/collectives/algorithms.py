"""The algorithms under the collectives, from point-to-point sends, as code you can read.

Each algorithm is two things that share one *schedule* -- who sends which piece to whom at each
step -- so the counts come out of the code that runs, not off a slide:

    ring_schedule(n, r)                ─► ring_all_reduce(tensor)            (runs in ranks)
                                       └► traffic("ring_all_reduce", n, nbytes)   (counts it)
    recursive_doubling_schedule(n, r)  ─► recursive_doubling_all_reduce(tensor) / traffic(...)
    binomial_tree_schedule(n, r, src)  ─► tree_broadcast(tensor, src) / traffic(...)

Ring all-reduce (Patarasuk & Yuan 2009; what NCCL's Ring does): reduce-scatter, then
all-gather, n-1 steps each; every step each rank sends one chunk of nbytes/n to its right
neighbour: 2(n-1) steps, 2(n-1)/n * nbytes sent per rank -- bandwidth-optimal, latency 2(n-1)a.
Recursive doubling (Thakur, Rabenseifner & Gropp 2005, §4.1): log2(n) steps, each exchanging the
whole buffer with the partner r XOR 2^k: few steps, log2(n) * nbytes per rank. On a world size
that is not a power of two, the n - p extra ranks (p = largest power of two below n) first fold
their data into ranks 0..n-p-1 and get the answer back at the end: two more steps.
Binomial tree broadcast: in round k every rank that has the data sends it 2^k ranks on:
ceil(log2 n) steps; the root sends the most, ceil(log2 n) * nbytes.

The alpha-beta model (Hockney 1994): a message of m bytes costs alpha + m*beta; an algorithm
costs steps * alpha + bytes_sent_per_rank * beta (:func:`cost`).

>>> traffic("ring_all_reduce", 4, 4096)["bytes_sent_per_rank"] == 2 * 3 / 4 * 4096
True
>>> traffic("recursive_doubling_all_reduce", 8, 1000)
{'bytes_sent_per_rank': 3000, 'bytes_sent_total': 24000, 'steps': 3}
>>> traffic("tree_broadcast", 5, 100)
{'bytes_sent_per_rank': 300, 'bytes_sent_total': 400, 'steps': 3}
>>> round(cost("ring_all_reduce", 8, 1 << 30, alpha=5e-6, beta=1 / 100e9), 4)   # 1 GiB, 100 GB/s
0.0189
"""

from __future__ import annotations

import torch

# --- the schedules (pure: no ranks, no torch.distributed) --------------------------------------


def chunk_bounds(count: int, n: int) -> list[tuple[int, int]]:
    """[start, stop) of n chunks covering ``count`` elements, the first ``count % n`` one longer
    (like numpy.array_split): any size works, 1 element included (then n-1 chunks are empty)."""
    q, rem = divmod(count, n)
    bounds, start = [], 0
    for c in range(n):
        stop = start + q + (c < rem)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(n: int, rank: int) -> list[dict]:
    """Rank ``rank``'s steps of ring all-reduce: send chunk ``send`` right, receive chunk
    ``recv`` from the left, then reduce it in ("reduce-scatter") or copy it ("all-gather").
    After n-1 reduce-scatter steps rank r owns the finished chunk (r+1) % n."""
    right, left = (rank + 1) % n, (rank - 1) % n
    steps = [{"phase": "reduce-scatter", "to": right, "send": (rank - s) % n, "from": left,
              "recv": (rank - s - 1) % n} for s in range(n - 1)]
    steps += [{"phase": "all-gather", "to": right, "send": (rank + 1 - s) % n, "from": left,
               "recv": (rank - s) % n} for s in range(n - 1)]
    return steps


def recursive_doubling_schedule(n: int, rank: int) -> list[dict]:
    """Rank ``rank``'s steps: ``{"kind": "send"|"recv"|"exchange", "peer"}``, in order.
    Ranks >= p (largest power of two <= n) only fold in and wait for the answer."""
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    if rank >= p:  # fold my data into rank - p, get the answer back at the end
        return [{"kind": "send", "peer": rank - p}, {"kind": "recv", "peer": rank - p}]
    steps = [{"kind": "recv", "peer": rank + p}] if rank < extra else []
    steps += [{"kind": "exchange", "peer": rank ^ (1 << k)} for k in range(p.bit_length() - 1)]
    return steps + ([{"kind": "send", "peer": rank + p}] if rank < extra else [])


def binomial_tree_schedule(n: int, rank: int, src: int = 0) -> list[dict]:
    """Rank ``rank``'s steps of a binomial-tree broadcast from ``src``: ``{"round", "kind",
    "peer"}``. Ranks are renumbered so the root is 0 (v = (rank - src) % n); in round k the ranks
    v < 2^k that hold the data send it to v + 2^k."""
    v, out = (rank - src) % n, []
    for k in range((n - 1).bit_length()):
        mask = 1 << k
        if v < mask and v + mask < n:
            out.append({"round": k, "kind": "send", "peer": (v + mask + src) % n})
        elif mask <= v < 2 * mask:
            out.append({"round": k, "kind": "recv", "peer": (v - mask + src) % n})
    return out


# --- counting: the same schedules, summed ---------------------------------------------------------


def traffic(name: str, n: int, nbytes: int) -> dict:
    """``{"bytes_sent_per_rank", "bytes_sent_total", "steps"}`` of algorithm ``name`` on ``n``
    ranks for a buffer of ``nbytes``: per rank is the busiest rank's (with nbytes not divisible
    by n, ring chunks differ by a byte); steps is the rounds on the critical path."""
    if name not in ALGORITHMS:
        raise ValueError(f"name={name!r} is not one of: {', '.join(ALGORITHMS)}.")
    sent = [0] * n
    if name == "ring_all_reduce":
        size = [b - a for a, b in chunk_bounds(nbytes, n)]
        for r in range(n):
            sent[r] = sum(size[s["send"]] for s in ring_schedule(n, r))
        steps = 2 * (n - 1)
    elif name == "recursive_doubling_all_reduce":
        for r in range(n):
            sent[r] = nbytes * sum(s["kind"] in ("send", "exchange")
                                   for s in recursive_doubling_schedule(n, r))
        steps = max(len(recursive_doubling_schedule(n, r)) for r in range(n))
    else:
        for r in range(n):
            sent[r] = nbytes * sum(s["kind"] == "send" for s in binomial_tree_schedule(n, r))
        steps = (n - 1).bit_length()
    return {"bytes_sent_per_rank": max(sent), "bytes_sent_total": sum(sent), "steps": steps}


def cost(name: str, n: int, nbytes: int, alpha: float, beta: float) -> float:
    """Seconds by the alpha-beta model: ``steps * alpha + bytes_sent_per_rank * beta``
    (alpha: latency per message, s; beta: seconds per byte = 1 / bandwidth)."""
    t = traffic(name, n, nbytes)
    return t["steps"] * alpha + t["bytes_sent_per_rank"] * beta


# --- the algorithms, run inside ranks ---------------------------------------------------------

def _combine(op):
    import torch.distributed as dist

    R = dist.ReduceOp
    table = {R.SUM: torch.add, R.AVG: torch.add, R.PRODUCT: torch.mul, R.MAX: torch.maximum,
             R.MIN: torch.minimum}
    if op not in table:
        raise ValueError(f"op={op}: these algorithms do SUM, AVG, PRODUCT, MAX and MIN.")
    return table[op]


def _flat(tensor):
    """A contiguous 1-D buffer to work in (a view when possible), and how to put it back."""
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    return buf.view(-1), (lambda: None) if buf is tensor else (lambda: tensor.copy_(buf))


def _finish_avg(buf, op, n):
    import torch.distributed as dist

    if op == dist.ReduceOp.AVG:
        buf.div_(n)


def ring_all_reduce(tensor, op=None, group=None, async_op=False):
    """All-reduce ``tensor`` in place over the world by the ring: reduce-scatter then
    all-gather from isend/recv (:func:`ring_schedule`). Same signature as
    ``dist.all_reduce``, so ``validate("all_reduce", ring_all_reduce)`` judges it; SUM by
    default, any size (chunks by :func:`chunk_bounds`; empty chunks are not sent)."""
    import torch.distributed as dist

    assert group is None and not async_op, "this teaching version runs on the world, blocking"
    op = dist.ReduceOp.SUM if op is None else op
    combine, n, r = _combine(op), dist.get_world_size(), dist.get_rank()
    buf, put_back = _flat(tensor)
    chunk = [buf[a:b] for a, b in chunk_bounds(buf.numel(), n)]
    for step in ring_schedule(n, r):
        out, into = chunk[step["send"]], chunk[step["recv"]]
        # a chunk is empty when the size is below n; sender and receiver of a chunk agree on
        # that, so an empty one is simply neither sent nor received
        # isend: every rank sends and receives at once (blocking sends in a ring deadlock)
        req = dist.isend(out.clone(), step["to"]) if out.numel() else None
        if into.numel():
            got = torch.empty_like(into)
            dist.recv(got, step["from"])
            into.copy_(combine(into, got) if step["phase"] == "reduce-scatter" else got)
        if req is not None:
            req.wait()
    _finish_avg(buf, op, n)
    put_back()


def recursive_doubling_all_reduce(tensor, op=None, group=None, async_op=False):
    """All-reduce ``tensor`` in place by recursive doubling (:func:`recursive_doubling_schedule`):
    log2(n) exchanges of the whole buffer on a power-of-two world; on any other world size the
    extra ranks fold in first and are sent the answer last (two more steps). Same signature as
    ``dist.all_reduce``."""
    import torch.distributed as dist

    assert group is None and not async_op, "this teaching version runs on the world, blocking"
    op = dist.ReduceOp.SUM if op is None else op
    combine, n, r = _combine(op), dist.get_world_size(), dist.get_rank()
    buf, put_back = _flat(tensor)
    for step in recursive_doubling_schedule(n, r):
        peer = step["peer"]
        if step["kind"] == "send":
            dist.send(buf.clone(), peer)
        elif step["kind"] == "recv":
            got = torch.empty_like(buf)
            dist.recv(got, peer)
            # a folded rank receives the answer; a partner receives data to combine
            buf.copy_(got if r > peer else combine(buf, got))
        else:
            req = dist.isend(buf.clone(), peer)
            got = torch.empty_like(buf)
            dist.recv(got, peer)
            req.wait()
            # lower rank's data first on both sides, so both hold bitwise the same result
            buf.copy_(combine(buf, got) if r < peer else combine(got, buf))
    _finish_avg(buf, op, n)  # folded ranks too: they were sent the sum, not the average
    put_back()


def tree_broadcast(tensor, src=0, group=None, async_op=False):
    """Broadcast ``tensor`` from ``src`` in place along a binomial tree
    (:func:`binomial_tree_schedule`), from send/recv. Same signature as ``dist.broadcast``."""
    import torch.distributed as dist

    assert group is None and not async_op, "this teaching version runs on the world, blocking"
    n, r = dist.get_world_size(), dist.get_rank()
    buf, put_back = _flat(tensor)
    for step in binomial_tree_schedule(n, r, src):
        if step["kind"] == "send":
            dist.send(buf, step["peer"])
        else:
            dist.recv(buf, step["peer"])
    put_back()


ALGORITHMS = {"ring_all_reduce": ring_all_reduce,
              "recursive_doubling_all_reduce": recursive_doubling_all_reduce,
              "tree_broadcast": tree_broadcast}
