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
    from ..flags import json_flag, number, whole

    sub = p.add_subparsers(dest="multinode_command", metavar="script|simulate", required=True)
    what = "torchrun lines per node, or an sbatch script"
    s = sub.add_parser("script", parents=[json_flag("{lines} or {sbatch} as JSON")],
                       help=what, description=what + ".")
    s.add_argument("--nodes", type=whole("--nodes", 1, 4096), required=True,
                   help="nodes (hosts), 1 to 4096")
    s.add_argument("--gpus-per-node", type=whole("--gpus-per-node", 1, 64, "one rank per GPU"),
                   required=True, help="ranks per node, 1 to 64")
    s.add_argument("--slurm", action="store_true", help="an sbatch script (srun + torchrun)")
    s.add_argument("--entry", default="-m dtlab.multinode.check",
                   help="what torchrun runs (default: -m dtlab.multinode.check)")
    s.add_argument("--master", help="node 0's address for the torchrun lines: a hostname, an "
                   "IP address or a shell variable (default $MASTER_ADDR); not with --slurm, "
                   "whose script takes the allocation's first node")
    s.add_argument("--port", type=whole("--port", 1, 65535), default=29400,
                   help="rendezvous port (default 29400)")
    s.add_argument("--ifname", help="GLOO/NCCL_SOCKET_IFNAME, the NIC between nodes (an "
                   "interface name, e.g. eth0)")
    s.add_argument("--no-nvls", action="store_true",
                   help="add NCCL_NVLS_ENABLE=0: keep NVLink multicast (NVLS) off; by default "
                        "NCCL uses it where the NVSwitches have it")
    what = ("rehearse a multi-node launch on this machine: one torchrun agent per simulated "
            "node, each in its own network namespace")
    m = sub.add_parser("simulate", parents=[json_flag("machine-readable report")], help=what,
                       description=what + ".", formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="exit status: 0 it ran and the check passed (with --fault: the "
                              "diagnosis named the fault),\n             1 otherwise, 2 bad "
                              "input")
    m.add_argument("--nodes", type=whole("--nodes", 1, 16), default=2,
                   help="simulated nodes, 1 to 16 (default 2)")
    m.add_argument("--procs-per-node", type=whole("--procs-per-node", 1, 8), default=2,
                   help="ranks per node, 1 to 8, at most 32 in all (default 2)")
    m.add_argument("--mode", default="auto", help="netns (root), localhost, or auto (default)")
    m.add_argument("--fault", help="break it on purpose: " + ", ".join(FAULTS))
    m.add_argument("--join-timeout", type=number("--join-timeout", 2, 600), default=15,
                   help="rendezvous join and store timeout, 2 to 600 s (default 15)")
    m.add_argument("--pg-timeout", type=number("--pg-timeout", 2, 600), default=20,
                   help="process-group timeout in the ranks, 2 to 600 s (default 20)")
    m.add_argument("--iperf", type=whole("--iperf", 0, 60, "0: no iperf3"), default=0,
                   metavar="SECONDS",
                   help="then iperf3 from the last node to node 0 for SECONDS s (at most 60), "
                        "beside the check's busbw (netns mode; Debian's iperf3)")


def check(args) -> None:
    """Raises ValueError for bad arguments (the caller's ``arguments()`` turns it into one line)."""
    if args.multinode_command == "script":
        from .script import check_args

        check_args(args.nodes, args.gpus_per_node, args.entry, args.port, master=args.master,
                   ifname=args.ifname, slurm=args.slurm)
    else:
        from .simulate import check_args

        check_args(args.nodes, args.procs_per_node, args.mode, args.fault, args.join_timeout,
                   args.pg_timeout, args.iperf)


def run(args):
    from ..reporting import Plain

    if args.multinode_command == "script":
        from .script import DEFAULT_MASTER, sbatch, torchrun_lines

        if args.slurm:
            text = sbatch(args.nodes, args.gpus_per_node, args.entry, args.port, args.ifname,
                          nvls=not args.no_nvls)
            return Plain({"sbatch": text}, text.rstrip("\n")), 0
        lines = torchrun_lines(args.nodes, args.gpus_per_node, args.entry,
                               args.master or DEFAULT_MASTER, args.port, args.ifname, nvls=not args.no_nvls)
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
