"""A faulty network under a correct all-gather: how a validator exercise gets broken
implementations nobody can read.

The implementation a validator is handed (:func:`dtlab.course.harness.relayed_all_gather`) is
served by the relay in the grader's process; here, per case, is what the relay does to each
rank's result before handing it over. The learner's validator sees only the numbers::

    net = Network(nprocs=3, cases=[None, {"kind": "stale", "rank": 2}, {"kind": "echo"}])
    Ranks(3, ..., deliver=net).run(harness.checks, "check_all_gather", [3] * 3)
    net.expected      # [True, False, False]: what a correct validator says per case

Faults (``rank``: only on that rank; ``origin``: only that rank's contribution):

======================  ===========================================================
``echo``                every slot holds the receiving rank's own tensor
``zero``                ``origin``'s slot arrives as zeros
``shift``               ``origin``'s slot arrives shifted by one element, on ``rank``
``plus_one``            ``rank``'s own slot has 1 added to its first element, on ``rank``
``swap_last``           the last two slots swapped, on every rank
``stale``               on ``rank``, a call whose shape and dtype came before gets that call's
                        result again
======================  ===========================================================
"""

from __future__ import annotations

KINDS = ("echo", "zero", "shift", "plus_one", "swap_last", "stale")


class Network:
    """The relay's ``deliver`` hook for ``impl:all_gather``, one fault (or None) per case."""

    def __init__(self, nprocs: int, cases: list[dict | None]):
        for f in cases:
            if f is not None and f.get("kind") not in KINDS:
                raise ValueError(f"unknown fault {f!r}: one of {', '.join(KINDS)}")
        self.n, self.cases = nprocs, list(cases)
        self._seen: dict[tuple, bytes] = {}   # (case, rank, dtype, shape) -> last result

    @property
    def expected(self) -> list[bool]:
        """A correct validator's verdict per case: True where the network is sound."""
        return [f is None for f in self.cases]

    def __call__(self, msg, out: bytes) -> bytes:
        import torch

        from ..runtime.relay import _dtype

        case = (msg.info.get("mark") or {}).get("case")
        fault = self.cases[case] if isinstance(case, int) and 0 <= case < len(self.cases) else None
        key = (case, msg.rank, msg.dtype, tuple(msg.shapes[0]))
        previous = self._seen.get(key)
        self._seen[key] = out
        if fault is None:
            return out
        dt = _dtype(msg.dtype)
        chunks = list(torch.frombuffer(bytearray(out), dtype=dt).clone().chunk(self.n)) if out \
            else []
        kind, r, q = fault["kind"], fault.get("rank"), fault.get("origin", 0)
        if r is not None and msg.rank != r and kind != "swap_last":
            return out
        if kind == "echo":
            own = torch.frombuffer(bytearray(msg.data), dtype=dt) if msg.data else chunks[0]
            chunks = [own.clone() for _ in chunks]
        elif kind == "zero":
            chunks[q].zero_()
        elif kind == "shift":
            chunks[q] = torch.roll(chunks[q], 1)
        elif kind == "plus_one":
            chunks[msg.rank][:1] += 1
        elif kind == "swap_last" and self.n >= 2:
            chunks[-2], chunks[-1] = chunks[-1], chunks[-2]
        elif kind == "stale":
            return previous if previous is not None else out
        return torch.cat(chunks).view(torch.uint8).numpy().tobytes()
