"""``dtlab nccl-log FILE... [--comm C] [--json]``: NCCL_DEBUG=INFO logs of all ranks as one
screen for a person, or JSON for a script.

    $ dtlab nccl-log /tmp/nccl/                 # every file in the folder, one per process
    $ dtlab nccl-log rank0.log rank1.log --json
    $ dtlab nccl-log torchrun-output.txt --comm id:0x5e...   # another communicator

Exit status: 0 parsed and the ranks agree, 1 the ranks diverge, 2 not an NCCL log / no file.
"""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag

    return [json_flag()]


def add_arguments(p) -> None:
    from ..flags import path

    p.add_argument("files", nargs="+", type=path("FILE"), metavar="FILE", help="log files, or a folder of them, or "
                   "captured torchrun output")
    p.add_argument("--comm", default=None, help="communicator to report (key or commId; "
                   "default: the world one)")
    p.epilog = "exit status: 0 the ranks agree, 1 they diverge, 2 not an NCCL log / no file"


def check(args) -> None:
    """Reading is the whole command: a file that is missing, unreadable or holds no NCCL line,
    or a --comm that is not in it, is bad input (KeyError included)."""
    from pathlib import Path

    from . import parse

    try:
        args.log = parse([Path(f) for f in args.files], comm=args.comm)
    except KeyError as e:
        raise ValueError(e.args[0] if e.args else str(e)) from None


def run(args):
    return args.log, 1 if args.log.divergence else 0
