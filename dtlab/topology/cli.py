"""``dtlab topo [FILE] [--json]``: how the GPUs and NICs connect, from a saved ``nvidia-smi topo
-m`` or NCCL topology XML, or this machine; and the transport predicted per GPU pair."""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag

    return [json_flag("devices, links [{a, b, kind}], affinity, predictions")]


def add_arguments(p) -> None:
    from ..flags import path

    p.epilog = "exit status: 0 read and shown, 2 bad input (no topology in the file, no nvidia-smi)"
    p.add_argument("file", nargs="?", type=path("FILE"), metavar="FILE", help="saved `nvidia-smi topo -m` output or "
                   "NCCL_TOPO_DUMP_FILE XML (default: this machine)")


def check(args) -> None:
    # reading is the whole command: a file that is not there or holds no topology, or no
    # nvidia-smi here, is bad input
    from . import load, local

    args.topo = load(args.file) if args.file else local()


def run(args):
    from .report import TopoReport

    return TopoReport(args.topo), 0
