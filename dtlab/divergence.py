"""The first position where ranks' sequences of collectives disagree: one algorithm for every
reader of per-rank sequences -- :mod:`dtlab.nccl_log` on NCCL's COLL lines, :mod:`dtlab.hang`'s
diagnoser on Flight Recorder dumps and COLL lines.

Why a leaf module of its own: ``nccl_log`` must not import ``hang`` (hang builds on nccl_log),
and the rule is about sequences, not about either source of them. Like :mod:`dtlab.vocab` it
imports nothing from dtlab but the vocabulary (ARCHITECTURE.md: leaves).

The contract:

* Ranks are lined up by position: the i-th call of every rank on one communicator is the same
  collective (that is what NCCL and torch require of a program).
* Two calls agree when every field in ``fields`` is equal. ``reason`` is the first field, in the
  order given, on which the calls present at that position differ; ``"fewer_calls"`` when they
  agree but some rank has no call there (its sequence ended).
* Who is odd: each rank votes with its call's signature at that position (a rank with no call
  votes "none"), and :func:`dtlab.vocab.odd_ones_out` decides. With a strict majority the
  ranks outside it are named and ``confident`` is True. With no strict majority (two ranks that
  disagree, a tie) ``ranks`` lists every rank -- each is a candidate -- and ``confident`` is
  False: the sequences alone cannot tell which side is wrong; the program's source at that call,
  a run with a third rank, or each call's stack (Flight Recorder ``frames``) can.

>>> from collections import namedtuple
>>> C = namedtuple("C", "op count")
>>> d = first_divergence({0: [C("ar", 8)], 1: [C("ar", 8)], 2: [C("ar", 4)]}, ("op", "count"))
>>> d.position, d.reason, d.ranks, d.confident
(1, 'count', [2], True)
>>> d = first_divergence({0: [C("ar", 8), C("ar", 8)], 1: [C("ar", 8)]}, ("op", "count"))
>>> d.position, d.reason, d.ranks, d.confident, d.fewer
(2, 'fewer_calls', [0, 1], False, [1])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .vocab import odd_ones_out

NONE = ("none",)  # the signature of "no call at this position"


@dataclass
class Divergence:
    position: int  # 1-based position in the sequences
    reason: str  # the first field in ``fields`` that differs, or "fewer_calls"
    items: dict[int, object | None]  # each rank's call at that position (None: it had none)
    groups: dict[tuple, list[int]]  # signature (NONE for no call) -> ranks, in rank order
    ranks: list[int]  # the odd ones out (confident) or every candidate (not confident)
    confident: bool
    fewer: list[int]  # ranks whose sequence is shorter than the longest one


def signature(item, fields: Sequence[str]) -> tuple:
    return NONE if item is None else tuple(getattr(item, f) for f in fields)


def vote(groups: Mapping[tuple, list[int]]) -> tuple[list[int], bool]:
    """:func:`dtlab.vocab.odd_ones_out` over ``{signature: ranks}`` groups."""
    return odd_ones_out({r: sig for sig, ranks in groups.items() for r in ranks})


def first_divergence(seqs: Mapping[int, Sequence], fields: Sequence[str]) -> Divergence | None:
    """The first position where the ranks' sequences disagree (see the module's contract), or
    None when they never do or fewer than two ranks are given."""
    if len(seqs) < 2:
        return None
    longest = max(len(s) for s in seqs.values())
    for i in range(longest):
        items = {r: (s[i] if i < len(s) else None) for r, s in sorted(seqs.items())}
        sigs = {r: signature(c, fields) for r, c in items.items()}
        if len(set(sigs.values())) == 1:
            continue
        present = [c for c in items.values() if c is not None]
        reason = next((f for f in fields if len({getattr(c, f) for c in present}) > 1),
                      "fewer_calls")
        groups: dict[tuple, list[int]] = {}
        for r, sig in sigs.items():
            groups.setdefault(sig, []).append(r)
        ranks, confident = vote(groups)
        fewer = sorted(r for r, s in seqs.items() if len(s) < longest)
        return Divergence(i + 1, reason, items, groups, ranks, confident, fewer)
    return None
