"""``dtlab multinode script|simulate``: the section's terminal commands (dtlab/cli.py calls in).

Bad input is a ValueError raised inside the caller's ``arguments()`` block, before anything is
made: one line on stderr, exit status 2.

    dtlab multinode script --nodes 2 --gpus-per-node 8 [--slurm] [--entry CMD] [--master ADDR]
    sudo dtlab multinode simulate --nodes 2 --procs-per-node 2 [--mode netns] [--fault NAME]
        [--iperf SECONDS] [--json]
"""

from __future__ import annotations

import argparse
import sys

from .faults import FAULTS


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..flags import json_flag

    sub = p.add_subparsers(dest="multinode_command", metavar="script|simulate", required=True)
    s = sub.add_parser("script", parents=[json_flag("{lines} or {sbatch} as JSON")],
                       help="torchrun lines per node, or an sbatch script")
    s.add_argument("--nodes", type=int, required=True, help="nodes (hosts)")
    s.add_argument("--gpus-per-node", type=int, required=True, help="ranks per node")
    s.add_argument("--slurm", action="store_true", help="an sbatch script (srun + torchrun)")
    s.add_argument("--entry", default="-m dtlab.multinode.check",
                   help="what torchrun runs (default: -m dtlab.multinode.check)")
    s.add_argument("--master", default="$MASTER_ADDR", help="node 0's address (torchrun lines)")
    s.add_argument("--port", type=int, default=29400, help="rendezvous port (default 29400)")
    s.add_argument("--ifname", help="GLOO/NCCL_SOCKET_IFNAME, the NIC between nodes")
    s.add_argument("--no-nvls", action="store_true",
                   help="add NCCL_NVLS_ENABLE=0: keep NVLink multicast (NVLS) off; by default "
                        "NCCL uses it where the NVSwitches have it")
    m = sub.add_parser("simulate", parents=[json_flag("machine-readable report")], help="rehearse a multi-node launch on this machine: one "
                       "torchrun agent per simulated node, each in its own network namespace")
    m.add_argument("--nodes", type=int, default=2, help="simulated nodes (default 2)")
    m.add_argument("--procs-per-node", type=int, default=2, help="ranks per node (default 2)")
    m.add_argument("--mode", default="auto", help="netns (root), localhost, or auto (default)")
    m.add_argument("--fault", help="break it on purpose: " + ", ".join(FAULTS))
    m.add_argument("--join-timeout", type=float, default=15,
                   help="rendezvous join and store timeout, s (default 15)")
    m.add_argument("--pg-timeout", type=float, default=20,
                   help="process-group timeout in the ranks, s (default 20)")
    m.add_argument("--iperf", type=int, default=0, metavar="SECONDS",
                   help="then iperf3 from the last node to node 0 for SECONDS s, beside the "
                        "check's busbw (netns mode; Debian's iperf3)")


def check(args) -> None:
    """Raises ValueError for bad arguments (the caller's ``arguments()`` turns it into one line)."""
    if args.multinode_command == "script":
        from .script import check_args

        check_args(args.nodes, args.gpus_per_node, args.entry, args.port)
    else:
        from .simulate import check_args

        check_args(args.nodes, args.procs_per_node, args.mode, args.fault, args.join_timeout,
                   args.pg_timeout, args.iperf)


def run(args):
    from ..reporting import Plain

    if args.multinode_command == "script":
        from .script import sbatch, torchrun_lines

        if args.slurm:
            text = sbatch(args.nodes, args.gpus_per_node, args.entry, args.port, args.ifname,
                          nvls=not args.no_nvls)
            return Plain({"sbatch": text}, text.rstrip("\n")), 0
        lines = torchrun_lines(args.nodes, args.gpus_per_node, args.entry, args.master,
                               args.port, args.ifname, nvls=not args.no_nvls)
        return Plain({"lines": lines}, "\n".join(f"# node {i}\n{line}"
                                                   for i, line in enumerate(lines))), 0
    from .simulate import Terminated, simulate

    try:
        res = simulate(args.nodes, args.procs_per_node, args.mode, args.fault, args.join_timeout,
                       args.pg_timeout, iperf_seconds=args.iperf)
    except KeyboardInterrupt as e:  # simulate has removed everything it made
        how, status = ("SIGTERM", 128 + 15) if isinstance(e, Terminated) else ("Ctrl-C", 128 + 2)
        print(f"dtlab multinode simulate: stopped by {how}; everything it made is removed",
              file=sys.stderr)
        return status  # as a shell reports a process ended by that signal
    if args.fault:
        return res, 0 if res["diagnosis"]["confident"] else 1  # named, or unsure: not found
    return res, 0 if res["ok"] else 1
