"""Compute / communication split of a profiler trace: interval arithmetic over events.

Contract: :func:`split` takes events ``(name, thread_or_stream, start_us, end_us)`` (what
:func:`dtlab.parity.scaling.profile_split` collects on rank 0) and returns per-step
``compute_ms, comm_ms, overlap_ms, comm_events, threads``; what each number means, and what it
cannot show on CPU, is in :mod:`dtlab.parity.scaling`'s docstring. Pure functions, no torch.

>>> split([("aten::mm", 1, 0, 10_000), ("gloo:all_reduce", 2, 5_000, 15_000)])["overlap_ms"]
5.0
"""

from __future__ import annotations


def _union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _measure(iv) -> float:
    return float(sum(e - s for s, e in iv))


def _intersect(a, b):
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def is_comm(name: str) -> bool:
    """An all-reduce event: ``gloo:all_reduce``, ``c10d::allreduce_``, ``nccl:all_reduce``, an
    NCCL kernel (``ncclDevKernel_AllReduce...``)."""
    n = name.lower()
    return "allreduce" in n or "all_reduce" in n or n.startswith("nccl")


def split(events, steps: int = 1, device: str = "cpu") -> dict:
    """Compute / communication split of ``events`` = ``(name, thread, start_us, end_us)``,
    per step in ms (module docstring: what each number means and what it cannot show)."""
    comm = [(t, s, e) for n, t, s, e in events if is_comm(n)]
    comm_by_t = {}
    for t, s, e in comm:
        comm_by_t.setdefault(t, []).append((s, e))
    comm_by_t = {t: _union(v) for t, v in comm_by_t.items()}
    compute_by_t = {}
    for n, t, s, e in events:  # CPU: aten ops outside any all-reduce on their thread
        if is_comm(n) or (device == "cpu" and not n.startswith("aten::")):
            continue
        if any(cs <= s and e <= ce for cs, ce in comm_by_t.get(t, ())):
            continue
        compute_by_t.setdefault(t, []).append((s, e))
    compute_by_t = {t: _union(v) for t, v in compute_by_t.items()}
    overlap = []
    for t, civ in comm_by_t.items():
        others = _union([iv for u, v in compute_by_t.items() if u != t for iv in v])
        overlap += _intersect(civ, others)
    k = 1000.0 * steps
    comm_ms = _measure(_union([(s, e) for _, s, e in comm])) / k
    return {"compute_ms": sum(map(_measure, compute_by_t.values())) / k, "comm_ms": comm_ms,
            "overlap_ms": min(_measure(_union(overlap)) / k, comm_ms),
            "comm_events": len(comm), "threads": len(set(compute_by_t) | set(comm_by_t))}


__all__ = ["is_comm", "split"]
