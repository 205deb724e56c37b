"""A faulty network under a correct all-gather: how a validator exercise gets broken
implementations nobody can read.

The implementation a validator is handed (:func:`dtlab.course.harness.relayed_all_gather`) is
served by the relay in the grader's process; here is what the relay does to each rank's result
before handing it over. One fault (or none) per job: the learner's validator sees only the
numbers, and nothing it sends -- a case label included -- changes which fault it meets::

    for fault in [None, {"kind": "stale", "rank": 2}, {"kind": "echo"}]:
        net = Network(nprocs=3, fault=fault)
        out = Ranks(3, ..., deliver=net).run(harness.checks, "check_all_gather", [1] * 3)
        net.expected   # True for the sound network: what a correct validator says

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
    """The relay's ``deliver`` hook for ``impl:all_gather``: one fault (None: a sound network)
    on every call of the job."""

    def __init__(self, nprocs: int, fault: dict | None = None):
        if fault is not None and fault.get("kind") not in KINDS:
            raise ValueError(f"unknown fault {fault!r}: one of {', '.join(KINDS)}")
        self.n, self.fault = nprocs, fault
        self._seen: dict[tuple, bytes] = {}   # (rank, dtype, shape) -> last result

    @property
    def expected(self) -> bool:
        """A correct validator's verdict: True where the network is sound."""
        return self.fault is None

    def __call__(self, msg, out: bytes) -> bytes:
        import torch

        from ..runtime.relay import _dtype

        fault = self.fault  # marks come from the learner's process: they decide nothing here
        key = (msg.rank, msg.dtype, tuple(msg.shapes[0]))
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
