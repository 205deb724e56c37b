"""``dtlab nccl-tests FILE... [--json]``: nccl-tests' own output (all_reduce_perf & co.) read
back: each run's header, rows and trailer (:func:`dtlab.bench.parse_nccl_tests_all`), as text
like nccl-tests' own summary, or JSON."""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag

    return [json_flag("{header, rows, trailer} per run")]


def add_arguments(p) -> None:
    from ..flags import path

    p.add_argument("files", nargs="+", type=path("FILE"), metavar="FILE",
                   help="nccl-tests text output")
    p.epilog = "exit status: 0 read, 2 bad input (a file that is not nccl-tests output)"


def check(args) -> None:
    """Reading is all this command does: a file it cannot read is bad input."""
    from . import parse_nccl_tests_all

    args.reports = [r for path in args.files for r in parse_nccl_tests_all(path)]


def run(args):
    from ..reporting import Plain, Several
    from . import summary_text

    runs = [Plain(r, summary_text(r)) for r in args.reports]
    return runs[0] if len(runs) == 1 else Several(runs, "\n\n"), 0
