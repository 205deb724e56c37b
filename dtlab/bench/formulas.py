"""Bandwidth arithmetic exactly as nccl-tests does it: sizes, counts, algbw and busbw.

nccl-tests (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md) reports two bandwidths in GB/s
(1e9 bytes/s):

* **algbw** = S / t, where S is the printed ``size`` column and t the time of one operation;
* **busbw** = algbw x a factor that makes the number comparable to the link's speed whatever
  the number of ranks n:

  ===============  ============  ==========================================================
  all_reduce       2(n-1)/n      reduce-scatter then all-gather: each byte crosses 2(n-1)/n
  all_gather       (n-1)/n       each rank receives the n-1 chunks it lacks
  reduce_scatter   (n-1)/n       each rank sends the n-1 chunks others own
  all_to_all       (n-1)/n       each rank keeps 1/n of its buffer, sends the rest
  broadcast        1             all bytes leave the root over its one link
  reduce           1             all bytes arrive at the root over its one link
  sendrecv         1             point to point
  ===============  ============  ==========================================================

The ``size`` column is max(send buffer, receive buffer) of one rank: for all_gather the whole
gathered output, for reduce_scatter the whole input, for all_to_all the whole send buffer. The
``count`` column is the *count argument* of the NCCL call: for all_reduce, broadcast, reduce and
sendrecv the elements of the buffer, but for all_gather / reduce_scatter the elements per rank
and for all_to_all the elements per peer (src/common.cu prints ``args->nbytes / wordSize``, the
per-rank ``paramcount``). Those three also round the per-rank chunk down to a whole number of 16
bytes, so a requested 8 B all_gather on 2 ranks becomes 0 B (src/all_gather.cu,
``(count/nranks) & -(16/eltSize)``).

>>> from dtlab.bench.formulas import algbw, busbw, parse_size
>>> round(algbw("all_reduce", parse_size("1G"), 3279.91e-6, 2), 2)   # nt_all_reduce.txt, last row
327.37
>>> round(busbw("all_gather", 1 << 30, 4.0e-3, 8), 2)
234.88
"""

from __future__ import annotations

from dataclasses import dataclass

from ..limits import whole
from ..vocab import check_op, format_size, parse_size  # noqa: F401  (re-exported: dtlab.bench's API)

MAX_SWEEP_BYTES = 1 << 40  # one buffer of a sweep: 1 TiB, past any GPU's memory (H200: 141 GB)

# what nccl-tests prints in the redop and root columns of each test (its defaults: -o sum, -r 0);
# its keys are the collectives dtlab.bench measures, named as torch.distributed names them
# (dtlab.vocab): nccl-tests' alltoall_perf is ``all_to_all`` here
NCCL_TESTS_REDOP = {"all_reduce": "sum", "all_gather": "none", "reduce_scatter": "sum",
                    "broadcast": "none", "reduce": "sum", "all_to_all": "none", "sendrecv": "sum"}
NCCL_TESTS_ROOT = {"broadcast": 0, "reduce": 0}  # every other op prints -1
OPS = tuple(NCCL_TESTS_REDOP)
# per-rank chunks rounded to whole 16-byte lines (src/all_gather.cu & co.)
CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")


def canonical_op(op: str) -> str:
    """'allreduce', 'all_reduce_perf', 'AllReduce', 'alltoall' -> torch's name ('all_reduce',
    'all_to_all'); ValueError naming the choices if dtlab.bench does not measure it."""
    return check_op(op, OPS)


def busbw_factor(op: str, nranks: int) -> float:
    """busbw / algbw for ``op`` on ``nranks`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    op = canonical_op(op)
    n = _check_nranks(nranks)
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in CHUNKED:  # each rank keeps 1/n, moves the rest
        return (n - 1) / n
    return 1.0


def algbw(op: str, size_bytes: int, seconds: float, nranks: int) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s): ``size_bytes / seconds``.

    ``size_bytes`` follows nccl-tests' ``size`` column (see the module docstring): the same
    formula then holds for every op. ``op`` and ``nranks`` are checked so a typo cannot pass.

    >>> algbw("broadcast", 1 << 30, 2947.26e-6, 2)      # doctest: +ELLIPSIS
    364.31...
    """
    canonical_op(op)
    _check_nranks(nranks)
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes={size_bytes!r} must be a whole number of bytes >= 0.")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"seconds={seconds!r} must be a positive time of one operation "
                         f"(e.g. 3279.91e-6 for 3279.91 us).")
    return size_bytes / seconds / 1e9


def busbw(op: str, size_bytes: int, seconds: float, nranks: int) -> float:
    """Bus bandwidth in GB/s: ``algbw * busbw_factor(op, nranks)``; compare it to a link's speed.

    >>> round(busbw("all_reduce", 1073741824, 3279.91e-6, 2), 2)
    327.37
    """
    return algbw(op, size_bytes, seconds, nranks) * busbw_factor(op, nranks)


def _check_nranks(nranks) -> int:
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"nranks={nranks!r} must be a whole number of ranks >= 1.")
    return nranks


# --- sizes (parse_size / format_size: dtlab.vocab) ----------------------------------------

def sweep_sizes(min_bytes: int | str, max_bytes: int | str, factor: int = 2) -> list[int]:
    """The requested sizes of a sweep, like nccl-tests ``-b MIN -e MAX -f FACTOR``.

    >>> [format_size(s) for s in sweep_sizes("8", "64", 2)]
    ['8', '16', '32', '64']
    """
    lo, hi = parse_size(min_bytes, "min_bytes"), parse_size(max_bytes, "max_bytes")
    whole("factor", factor, 2, 1024, "nccl-tests -f; for one size give min_bytes = max_bytes")
    if hi > MAX_SWEEP_BYTES:
        raise ValueError(f"max_bytes={max_bytes!r} is more than {format_size(MAX_SWEEP_BYTES)}: "
                         f"no GPU holds a buffer that size; give at most 1T.")
    if lo < 1:
        raise ValueError(f"min_bytes={min_bytes!r} must be at least 1 byte.")
    if lo > hi:
        raise ValueError(f"min_bytes={min_bytes!r} is larger than max_bytes={max_bytes!r}; "
                         f"swap them.")
    out = []
    size = lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


@dataclass(frozen=True)
class CollShape:
    """One row's buffers, in elements, as nccl-tests lays them out for ``nranks`` ranks.

    ``size`` and ``count`` are the printed columns; ``send`` / ``recv`` are one rank's buffers.
    """

    op: str
    size: int          # bytes: max(send, recv) * elem_size
    count: int         # the NCCL call's count argument (per rank / per peer where it is one)
    send: int
    recv: int
    elem_size: int


def coll_shape(op: str, requested_bytes: int, nranks: int, elem_size: int) -> CollShape:
    """nccl-tests' ``*GetCollByteCount``: the buffers it really uses for a requested size.

    >>> coll_shape("all_gather", 1 << 30, 2, 4)
    CollShape(op='all_gather', size=1073741824, count=134217728, send=134217728, recv=268435456, elem_size=4)
    >>> coll_shape("all_gather", 8, 2, 4).size     # rounded down to 16 B per rank
    0
    """
    op = canonical_op(op)
    n = _check_nranks(nranks)
    if elem_size not in (1, 2, 4, 8, 16):
        raise ValueError(f"elem_size={elem_size!r}: element sizes are 1, 2, 4, 8 or 16 bytes.")
    count = parse_size(requested_bytes, "requested_bytes") // elem_size
    if op in CHUNKED:
        chunk = (count // n) & -(16 // elem_size)  # whole 16-byte lines per rank, like nccl-tests
        send, recv = {"all_gather": (chunk, chunk * n), "reduce_scatter": (chunk * n, chunk),
                      "all_to_all": (chunk * n, chunk * n)}[op]
        param = chunk
    else:
        send = recv = param = count
    return CollShape(op, max(send, recv) * elem_size, param, send, recv, elem_size)
