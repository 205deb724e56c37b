"""``dtlab ...``: the library from a terminal. Each subcommand is a thin call into a module.

    dtlab doctor [--json] [--no-launch]     is this machine ready? (dtlab.doctor)
"""

from __future__ import annotations

import argparse
import sys


def _doctor(args) -> int:
    from . import doctor

    return doctor.main(as_json=args.json, launch=not args.no_launch)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtlab", description="Distributed-training lab: tools and course.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("doctor", help="check torch, GPUs, links, NCCL/gloo, py-spy, /dev/shm")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument("--no-launch", action="store_true", help="skip the live 2-rank all_reduce")
    d.set_defaults(func=_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
