"""00's checks: what ``gather_pids``'s ranks must have returned and sent, the failures of a job of
the test's own in rank order, and ``root_cause`` asked of failures in both orders.

The cases (the failing programs, the tracebacks written out, the culprits) are the test cell's;
:func:`dtlab.course.checks.hangs.traceback_of` writes a traceback."""

from __future__ import annotations

from .. import traffic
from ..graded import run_graded


def pids_gathered(out, pids: list[int]) -> None:
    """Every rank of ``out`` returned ``pids``, and sent its own as a number through all_gather."""
    n = len(pids)
    for r in range(n):
        assert out.values[r] == pids, (f"{n} ranks: rank {r} returned {out.values[r]!r}; the "
                                       f"ranks' pids were {pids}")
        assert traffic.carried(out.traffic, r, pids[r], ops=("all_gather",)), (
            f"{n} ranks: rank {r}'s pid never left it as a number in an all-gathered tensor "
            f"(all_gather_object sends pickled bytes instead): put it in an int64 tensor and "
            f"all-gather that")


def failures_in_rank_order(fn, nprocs: int = 3) -> dict:
    """The failures of ``fn`` run on ``nprocs`` ranks (it must fail), by rank."""
    from ... import RankError

    try:
        run_graded(fn, nprocs=nprocs)
    except RankError as err:
        return dict(sorted(err.failures.items()))
    raise AssertionError(f"{fn.__name__} was expected to fail")


def root_cause_checked(mine, failures: dict, culprit: int, what: str) -> None:
    """``mine`` names ``culprit`` whichever order the failures come in (``what`` names the case
    for whoever reads the cell; the feedback says only that a hidden case failed)."""
    for order in (sorted(failures.items()), sorted(failures.items(), reverse=True)):
        got = mine(dict(order))
        assert got == culprit, f"a hidden case: root_cause returned {got!r}, not the rank that failed first"
