"""Pass 4: where do the ranks stop agreeing? The first call of one communicator where ranks
issue different collectives, or where a rank has issued fewer.

Every rank must issue the same collectives on a communicator in the same order: same op, same
count, same datatype (and reduction op, and root). The i-th COLL line of each rank on that
communicator is the same collective, so ranks are lined up by position. NCCL's ``opCount``
would be the natural key, but it is not reliable: in the NCCL 2.28.9 captures in data/, torch's
collectives log ``opCount 0`` on every call when the ranks talk over P2P or SHM, and 0, 1, 2, ...
only over the network transport. Where opCounts do increase they are checked against the
positions (``opcount_check``).

Send/Recv lines are left out: point-to-point calls differ between ranks by design.

>>> from dtlab.nccl_log.model import Call
>>> ar = lambda n: Call("AllReduce", 0, n, 7, 0, 0, "0x1", 3)
>>> d = divergence({0: [ar(8), ar(8)], 1: [ar(8), ar(8)], 2: [ar(8), ar(4)]})
>>> d["position"], d["ranks"], d["reason"]
(2, [2], 'count')
"""

from __future__ import annotations

from collections import Counter

from .model import Call

# compared in this order; the first that differs is the reason given
FIELDS = ("op", "datatype", "count", "redop", "root")


def odd_ones_out(values: dict[int, object]) -> list[int]:
    """Ranks whose value is not the majority's; all ranks when there is no clear majority
    (two ranks that disagree, or a tie)."""
    ranked = Counter(values.values()).most_common()
    top, n = ranked[0]
    if n > 1 and (len(ranked) == 1 or ranked[1][1] < n):
        return sorted(r for r, v in values.items() if v != top)
    return sorted(values)


def _report(i: int, ranks: list[int], reason: str, calls: dict[int, list[Call]]) -> dict:
    at = {r: (cs[i].to_dict() if i < len(cs) else None) for r, cs in sorted(calls.items())}
    return {"position": i + 1, "ranks": ranks, "reason": reason,
            "n_calls": {r: len(cs) for r, cs in sorted(calls.items())}, "calls": at}


def divergence(calls: dict[int, list[Call]]) -> dict | None:
    """The first position (1-based) where the ranks' call sequences disagree, or None.

    ``ranks`` names the ranks that differ (the odd one out when a majority agrees; both when two
    ranks disagree) or that fall short; ``reason`` is 'op', 'datatype', 'count', 'redop', 'root'
    or 'fewer_calls'.
    """
    if len(calls) < 2:
        return None
    for i in range(max(len(cs) for cs in calls.values())):
        present = {r: cs[i] for r, cs in calls.items() if i < len(cs)}
        sigs = {r: c.signature() for r, c in present.items()}
        if len(set(sigs.values())) > 1:
            reason = next(f for f in FIELDS if len({getattr(c, f) for c in present.values()}) > 1)
            return _report(i, odd_ones_out(sigs), reason, calls)
        short = sorted(r for r in calls if r not in present)
        if short:
            return _report(i, short, "fewer_calls", calls)
    return None


def opcount_check(calls: dict[int, list[Call]]) -> dict:
    """Do NCCL's own opCounts agree with lining ranks up by position?"""
    if not any(c.opcount for cs in calls.values() for c in cs):
        return {"used": False, "why": "opCount is 0 on every call; ranks lined up by position"}
    for i in range(min((len(cs) for cs in calls.values()), default=0)):
        if len({cs[i].opcount for cs in calls.values()}) > 1:
            return {"used": True, "agrees": False, "first_mismatch": i + 1,
                    "opcounts": {r: cs[i].opcount for r, cs in sorted(calls.items())}}
    return {"used": True, "agrees": True}
