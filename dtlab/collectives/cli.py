"""``dtlab validate [--op OP,...] [--nprocs N] [--backend B] [--timeout S] [--json]``: every
collective checked on this machine's ranks (:func:`dtlab.collectives.validate_all`). Exit status
0 nothing failed, 1 something failed, 2 bad input."""

from __future__ import annotations


def _every() -> tuple:
    from .validation import OPS

    return OPS


def _one(name: str) -> str:
    from .validation import check_op

    return check_op(name)


def parents() -> list:
    from ..flags import json_flag, ranks

    return [ranks(None, 120, min_ranks=2, why="a collective needs at least 2 ranks."),
            json_flag()]


def add_arguments(p) -> None:
    from ..flags import op_list

    p.add_argument("--op", type=op_list(_every, _one), default="all", help="all_reduce, all_gather, "
                   "reduce_scatter, broadcast, reduce, all_to_all, gather, scatter, sendrecv, "
                   "batch_isend_irecv, a comma list, or all (default all)")
    p.epilog = "exit status: 0 nothing failed, 1 something failed, 2 bad input"


def check(args) -> None:
    from ..runtime.plan import resolve

    resolve(args.nprocs, args.backend, flags=True)  # GPUs enough for nccl, before anything starts


def run(args):
    from . import validate_all

    rep = validate_all(args.op, nprocs=args.nprocs, backend=args.backend, timeout=args.timeout)
    return rep, 0 if rep.ok else 1
