"""``dtlab hang KIND [--nprocs N] [--backend B] [--timeout S] [--out DIR] [--delay S]
[--detail|--no-detail] [--json]``: a distributed failure reproduced on purpose, the evidence
every tool gives kept in a folder, and its diagnosis (:func:`dtlab.hang.reproduce`)."""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag, ranks

    return [ranks(3, 30, min_ranks=2, why="a distributed failure needs at least 2 ranks; 3, the "
                  "default, shows the odd one out", nprocs_help="ranks (default 3: the odd one "
                  "out shows)", timeout_help="seconds before dtlab stops the ranks"),
            json_flag("the outcome and the diagnosis as JSON")]


def add_arguments(p) -> None:
    from ..flags import number
    from .kinds import KINDS

    p.add_argument("kind", choices=list(KINDS), metavar="KIND", help=", ".join(KINDS))
    p.add_argument("--out", default=None, help="evidence folder (new or empty; default: a "
                   "temp dir)")
    p.add_argument("--delay", type=number("--delay", 0, 600, "the straggler's lag per step, "
                   "seconds"), default=1.0, help="the straggler's lag per step (s)")
    dg = p.add_mutually_exclusive_group()
    dg.add_argument("--detail", dest="detail", action="store_true", default="auto",
                    help="always rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (default: only when "
                         "the raw evidence leaves the diagnosis unsure)")
    dg.add_argument("--no-detail", dest="detail", action="store_false")


def check(args) -> None:
    from ..paths import check_output_folder
    from .reproduce import check_args

    if args.out is not None:  # named as the flag; check_args checks it again
        check_output_folder(args.out, "--out", empty=True,
                            so="evidence from two runs never mixes")
    check_args(args.kind, args.nprocs, args.backend, args.timeout, args.out, args.delay,
               detail=args.detail)


def run(args):
    from . import reproduce

    return reproduce(args.kind, nprocs=args.nprocs, backend=args.backend, timeout=args.timeout,
                     out=args.out, detail=args.detail, delay=args.delay), 0
