"""Judging what crossed between ranks: each function reads an observed job's traffic
(:class:`dtlab.runtime.relay.Message` list) and returns the problems found, in words (empty: fine).

    problems = traffic.ring_all_gather(out.traffic, inputs, n=3)
    assert not problems, problems[0]

A harness marks where each call (or case) of the learner's function begins
(:mod:`dtlab.course.harness`), so messages are grouped per rank and per call.
"""

from __future__ import annotations

import math


def values(msg, which: str = "data") -> list:
    """The numbers in a message: what the rank gave (``data``) or got (``got``), flat."""
    import torch

    from ..runtime.relay import _dtype

    raw = getattr(msg, which)
    if not raw:
        return []
    return torch.frombuffer(bytearray(raw), dtype=_dtype(msg.dtype)).tolist()


def forged(traffic, key: str = "call") -> str:
    """Where a rank's marks are not the harness's (``key`` 0, 1, ..., C in order, the same on
    every rank), in words; empty if they are. Rank code can send a mark too: traffic filed under
    a call the harness never made would escape the per-call checks."""
    seen: dict[int, list] = {}
    for m in traffic:
        if m.op == "mark":
            seen.setdefault(m.rank, []).append(m.info or {})
    # each mark as the rank sent it (the relay stamps the one before under "mark")
    runs = {r: [i.get(key) if set(i) - {"mark"} == {key} else i for i in infos]
            for r, infos in seen.items()}
    for r, got in sorted(runs.items()):
        if got != list(range(len(got))) or got != runs[min(runs)]:
            return (f"rank {r} marked {_short(got)}, not the harness's {key}s 0, 1, ... in order: "
                    f"code that marks its own {key}s hides traffic from these checks")
    return ""


def by_call(traffic, key: str = "call") -> dict[tuple[int, int], list]:
    """{(rank, call): its messages}, marks left out. Raises AssertionError if a rank's marks are
    not the harness's (:func:`forged`)."""
    problem = forged(traffic, key)
    if problem:
        raise AssertionError(problem)
    out: dict[tuple[int, int], list] = {}
    for m in traffic:
        k = (m.info.get("mark") or {}).get(key)
        if m.op != "mark" and isinstance(k, int):
            out.setdefault((m.rank, k), []).append(m)
    return out


def ring_all_gather(traffic, inputs: list[list[list]], n: int) -> list[str]:
    """A ring all-gather, per call: rank r sends exactly n-1 messages, all to (r+1) % n, the k-th
    holding rank (r-k) % n's chunk (the one that arrived at the step before), and receives n-1,
    all from (r-1) % n; nothing else. ``inputs[call][rank]``: each rank's values, flat."""
    problems = []
    grouped = by_call(traffic)
    for c, chunks in enumerate(inputs):
        for r in range(n):
            msgs = grouped.get((r, c), [])
            where = f"call {c + 1} (shape of {len(chunks[r])} elements), rank {r}"
            other = sorted({m.op for m in msgs} - {"send", "recv"})
            if other:
                problems.append(f"{where} called {', '.join(other)}: a ring all-gather only "
                                f"sends to its right neighbour and receives from its left")
            sends = [m for m in msgs if m.op == "send"]
            recvs = [m for m in msgs if m.op == "recv"]
            if len(sends) != n - 1 or len(recvs) != n - 1:
                problems.append(f"{where} sent {len(sends)} and received {len(recvs)} messages: a "
                                f"ring on {n} ranks takes {n - 1} steps, one chunk each way per step")
            for k, m in enumerate(sends):
                want = (r - k) % n
                if m.peer != (r + 1) % n:
                    problems.append(f"{where} sent to rank {m.peer}; in a ring rank {r} sends "
                                    f"only to {(r + 1) % n}")
                elif values(m) != chunks[want]:
                    problems.append(f"{where}, step {k + 1}: sent {_short(values(m))}, not rank "
                                    f"{want}'s chunk (the one received at the step before)")
            for m in recvs:
                if m.peer != (r - 1) % n:
                    problems.append(f"{where} received from rank {m.peer}; in a ring rank {r} "
                                    f"receives only from {(r - 1) % n}")
            if problems:
                return problems
    return problems


def composed_all_reduce(traffic, inputs: list[list[list]], n: int) -> list[str]:
    """Per call: rank r's only calls are one reduce_scatter of n chunks of ceil(numel / n)
    elements holding its tensor (padded), then one all_gather of the chunk it got back."""
    problems = []
    grouped = by_call(traffic)
    for c, per_rank in enumerate(inputs):
        for r in range(n):
            mine = per_rank[r]
            chunk = math.ceil(len(mine) / n)
            msgs = grouped.get((r, c), [])
            where = f"call {c + 1} ({len(mine)} elements), rank {r}"
            ops = [m.op for m in msgs]
            if ops != ["reduce_scatter", "all_gather"]:
                problems.append(f"{where} called {ops or 'nothing'}: expected one reduce_scatter, "
                                f"then one all_gather")
                continue
            rs, ag = msgs
            if rs.numel != n * chunk or any(math.prod(s) != chunk for s in rs.shapes):
                problems.append(f"{where}: reduce_scatter of {rs.numel} elements; {n} chunks of "
                                f"ceil({len(mine)} / {n}) = {chunk} were expected")
            elif not _contains(values(rs), mine):
                problems.append(f"{where}: what went into reduce_scatter does not hold this "
                                f"rank's tensor")
            elif ag.numel != chunk or values(ag) != values(rs, "got"):
                problems.append(f"{where}: all_gather of {_short(values(ag))}; expected the "
                                f"{chunk}-element chunk reduce_scatter returned")
        if problems:
            return problems
    return problems


def carried(traffic, rank: int, number: int, ops: tuple[str, ...] | None = None) -> bool:
    """True if some message ``rank`` sent (a send, or its part of a collective; with ``ops``,
    one of those operations) holds ``number`` as one of its elements."""
    return any(m.rank == rank and m.op not in ("recv", "mark", "fetch")
               and (ops is None or m.op in ops) and number in values(m) for m in traffic)


def within(traffic, allowed: set[str], per_case: dict[str, int], key: str = "case") -> list[str]:
    """Per rank and case: only ``allowed`` ops, and at most ``per_case[op]`` calls of each."""
    problems = []
    for (r, k), msgs in sorted(by_call(traffic, key).items()):
        counts: dict[str, int] = {}
        for m in msgs:
            counts[m.op] = counts.get(m.op, 0) + 1
        for op, count in counts.items():
            if op not in allowed:
                problems.append(f"{key} {k + 1}, rank {r}: called {op}")
            elif op in per_case and count > per_case[op]:
                problems.append(f"{key} {k + 1}, rank {r}: {count} {op} calls (at most "
                                f"{per_case[op]})")
    return problems


def _contains(seq: list, part: list) -> bool:
    n = len(part)
    return any(seq[i:i + n] == part for i in range(len(seq) - n + 1))


def _short(vals: list, k: int = 6) -> str:
    return str(vals[:k])[:-1] + (", ...]" if len(vals) > k else "]")


def fetched(traffic, rank: int, case: int | None = None) -> list[int]:
    """The samples ``rank`` fetched (:class:`dtlab.course.harness.Samples`), in order; in one
    case of the harness's, or all."""
    return [m.info["sample"] for m in traffic if m.rank == rank and m.op == "fetch"
            and (case is None or (m.info.get("mark") or {}).get("case") == case)]


def count(traffic, rank: int, op: str, case: int | None = None) -> int:
    """How many ``op`` calls ``rank`` made (in one case of the harness's, or in all)."""
    return sum(1 for m in traffic if m.rank == rank and m.op == op
               and (case is None or (m.info.get("mark") or {}).get("case") == case))
