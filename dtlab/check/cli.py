"""``dtlab check [--level quick|standard|full] [--json] [--html FILE] [--nprocs N]`` (dtlab/cli.py
calls in): the table, or its rows as JSON, and with ``--html`` the same as one self-contained page
with the checks' pictures; exit 0 when nothing is WARN or FAIL, 1 otherwise, 2 for bad arguments.
The cross-node part is ``python -m dtlab.check`` under torchrun (:mod:`dtlab.check.__main__`)."""

from __future__ import annotations

import argparse

from .checks import LEVELS


def parents() -> list:
    from ..flags import json_flag, nprocs

    p = json_flag("the rows as JSON")
    p.add_argument("--nprocs", type=nprocs("--nprocs", 2, "a check of collectives needs at least "
                   "2 ranks"), help="ranks (default: every GPU, else 2 on the CPU)")
    return [p]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", default="quick", help=f"how much to check: {', '.join(LEVELS)} "
                   "(default quick; standard adds the P2P matrix, small-message latency and DDP "
                   "parity; full adds GPU-NUMA-NIC affinity, the ring's slowest hop, and how to "
                   "run the cross-node part: `python -m dtlab.check` under torchrun on every node, "
                   "e.g. from `dtlab multinode script --entry '-m dtlab.check'`)")
    p.add_argument("--html", metavar="FILE", help="also write the report as one self-contained "
                   "HTML page, with the pictures (busbw against the ceiling and the P2P matrix "
                   "at --level standard)")
    p.epilog = "exit status: 0 all PASS or SKIP, 1 a WARN or FAIL, 2 bad input"


def check(args) -> None:
    """Refuse bad arguments before anything runs (ValueError: one line, exit 2)."""
    if args.level not in LEVELS:
        raise ValueError(f"--level {args.level!r}: choose {', '.join(LEVELS[:-1])} or "
                         f"{LEVELS[-1]}")
    if args.html:
        from ..paths import check_output_file

        check_output_file(args.html, "--html")


def run(args):
    import sys

    from .checks import run as run_checks

    rep = run_checks(args.level, args.nprocs, progress=not args.json)
    if args.html:
        with open(args.html, "w") as f:
            f.write(rep.to_html())
        print(f"wrote {args.html}", file=sys.stderr)
    return rep, rep.exit_status
