"""Section 01: the collectives -- what each one does, how to prove it did, how it is built.

    validate, validate_all, validate_each   check torch's collectives, or your own, on live ranks
    ring_all_reduce, recursive_doubling_all_reduce, tree_broadcast   the algorithms from send/recv
    traffic, cost                            bytes and steps each schedule sends; alpha-beta
    draw                                     before/after per rank of each collective
    reduction_error, sum_error_bound         why a float all_reduce is not bitwise one true answer

>>> from dtlab import collectives
>>> collectives.traffic("ring_all_reduce", 4, 1024)
{'bytes_sent_per_rank': 1536, 'bytes_sent_total': 6144, 'steps': 6}
>>> "all_to_all" in collectives.OPS
True
"""

from .algorithms import (ALGORITHMS, cost, recursive_doubling_all_reduce, ring_all_reduce,
                         traffic, tree_broadcast)
from .drawing import draw
from .numerics import reduction_error, sum_error_bound
from .report import Report, Row
from .validation import DTYPES, OPS, SIZES, validate, validate_all, validate_each

__all__ = ["OPS", "DTYPES", "SIZES", "validate", "validate_all", "validate_each", "Report", "Row",
           "ring_all_reduce", "recursive_doubling_all_reduce", "tree_broadcast", "ALGORITHMS",
           "traffic", "cost", "draw", "reduction_error", "sum_error_bound"]
