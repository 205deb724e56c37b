"""``dtlab validate [--op OP,...] [--nprocs N] [--backend B] [--timeout S] [--json]``: every
collective checked on this machine's ranks (:func:`dtlab.collectives.validate_all`). Exit status
0 nothing failed, 1 something failed, 2 bad input."""

from __future__ import annotations


def _ops(text: str) -> list[str]:
    """``--op``'s type: "all" or a comma list of names, each in any spelling bench takes."""
    import argparse

    from ..flags import as_flag
    from .validation import OPS, check_op

    if text.strip().lower() == "all":
        return list(OPS)
    names = text.split(",")
    if not all(n.strip() for n in names):  # '' or 'a,,b': a slip
        raise argparse.ArgumentTypeError(f"--op {text!r}: an empty name; give op names "
                                         f"separated by commas, e.g. all_reduce,all_to_all "
                                         f"(or all).")
    out = []
    for n in names:
        try:
            out.append(check_op(n.strip()))
        except ValueError as e:
            raise as_flag(e, "op", n.strip(), "--op") from None
    return out


def parents() -> list:
    from ..flags import json_flag, ranks

    return [ranks(None, 120, min_ranks=2, why="a collective needs at least 2 ranks."),
            json_flag()]


def add_arguments(p) -> None:
    p.add_argument("--op", type=_ops, default="all", help="all_reduce, all_gather, "
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
