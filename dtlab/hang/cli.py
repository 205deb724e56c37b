"""``dtlab hang KIND [--nprocs N] [--backend B] [--timeout S] [--out DIR] [--delay S]
[--detail|--no-detail] [--json]``: a distributed failure reproduced on purpose, the evidence
every tool gives kept in a folder, and its diagnosis (:func:`dtlab.hang.reproduce`)."""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag, ranks

    return [ranks(3, None, min_ranks=2, why="a distributed failure needs at least 2 ranks; 3, "
                  "the default, shows the odd one out", nprocs_help="ranks (default 3: the odd "
                  "one out shows)"),
            json_flag("the outcome and the diagnosis as JSON")]


def add_arguments(p) -> None:
    from ..flags import number, path
    from .kinds import KINDS

    p.add_argument("kind", choices=list(KINDS), metavar="KIND", help=", ".join(KINDS))
    p.add_argument("--timeout", type=number("--timeout", 0.1, 86400, "seconds: the reproduction "
                   "of a hang ends with it"), default=30.0, help="seconds before dtlab stops "
                   "the ranks (default 30)")
    p.add_argument("--out", type=path("--out"), default=None, help="evidence folder, new or "
                   "empty (default: a new folder under ./dtlab-evidence)")
    p.add_argument("--delay", type=number("--delay", 0, 600, "the straggler's lag per step, "
                   "seconds"), default=1.0, help="the straggler's lag per step, s (default 1)")
    dg = p.add_mutually_exclusive_group()
    dg.add_argument("--detail", dest="detail", action="store_true", default="auto",
                    help="always rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (default: only when "
                         "the raw evidence leaves the diagnosis unsure)")
    dg.add_argument("--no-detail", dest="detail", action="store_false",
                    help="never rerun with DETAIL")
    p.epilog = ("exit status: 0 reproduced and diagnosed (the report names the cause, or says "
                "it is unsure), 2 bad input")


def check(args) -> None:
    from ..paths import check_output_folder
    from .reproduce import check_args

    if args.out is not None:  # named as the flag; check_args checks it again
        check_output_folder(args.out, "--out", empty=True,
                            so="evidence from two runs never mixes")
    from ..runtime.plan import resolve

    resolve(args.nprocs, args.backend, flags=True)
    check_args(args.kind, args.nprocs, args.backend, args.timeout, args.out, args.delay,
               detail=args.detail)


def run(args):
    from . import reproduce

    return reproduce(args.kind, nprocs=args.nprocs, backend=args.backend, timeout=args.timeout,
                     out=args.out, detail=args.detail, delay=args.delay), 0
