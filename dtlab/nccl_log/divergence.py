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

The rule itself (first position, reason, who is odd, how sure) is :mod:`dtlab.divergence`'s,
shared with the hang diagnoser: with a strict majority the odd ranks are named and
``confident`` is True; with none (two ranks that disagree, a tie) ``ranks`` lists every
candidate and ``confident`` is False.

>>> from dtlab.nccl_log.model import Call
>>> ar = lambda n: Call("AllReduce", 0, n, 7, 0, 0, "0x1", 3)
>>> d = divergence({0: [ar(8), ar(8)], 1: [ar(8), ar(8)], 2: [ar(8), ar(4)]})
>>> d["position"], d["ranks"], d["reason"], d["confident"]
(2, [2], 'count', True)
>>> d = divergence({0: [ar(8)], 1: [ar(4)]})
>>> d["ranks"], d["confident"]
([0, 1], False)
"""

from __future__ import annotations

from ..divergence import first_divergence
from .model import Call

# compared in this order; the first that differs is the reason given
FIELDS = ("op", "datatype", "count", "redop", "root")


def divergence(calls: dict[int, list[Call]]) -> dict | None:
    """The first position (1-based) where the ranks' call sequences disagree, or None.

    ``ranks``: the odd ones out when a strict majority agrees (``confident`` True), else every
    rank that disagrees there -- all candidates (``confident`` False); ``reason`` is 'op',
    'datatype', 'count', 'redop', 'root' or 'fewer_calls'; ``fewer``: ranks with fewer calls.
    """
    d = first_divergence(calls, FIELDS)
    if d is None:
        return None
    return {"position": d.position, "ranks": d.ranks, "confident": d.confident,
            "reason": d.reason, "fewer": d.fewer,
            "n_calls": {r: len(cs) for r, cs in sorted(calls.items())},
            "calls": {r: (c.to_dict() if c is not None else None) for r, c in d.items.items()}}


def opcount_check(calls: dict[int, list[Call]]) -> dict:
    """Do NCCL's own opCounts agree with lining ranks up by position?"""
    if not any(c.opcount for cs in calls.values() for c in cs):
        return {"used": False, "why": "opCount is 0 on every call; ranks lined up by position"}
    for i in range(min((len(cs) for cs in calls.values()), default=0)):
        if len({cs[i].opcount for cs in calls.values()}) > 1:
            return {"used": True, "agrees": False, "first_mismatch": i + 1,
                    "opcounts": {r: cs[i].opcount for r, cs in sorted(calls.items())}}
    return {"used": True, "agrees": True}
