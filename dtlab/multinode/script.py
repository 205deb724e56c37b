"""``dtlab multinode script``: the launch lines for a real cluster, torchrun or sbatch.

Contract: :func:`torchrun_lines` returns one shell line per node (``--nnodes --node-rank
--nproc-per-node --rdzv-backend c10d --rdzv-endpoint``), to run on node i; :func:`sbatch` returns
a batch script whose single ``srun`` starts one torchrun per node of the allocation, with
MASTER_ADDR the allocation's first node. The entry defaults to ``-m dtlab.multinode.check``, so
the first job on a new cluster proves the world is whole before any training::

    dtlab multinode script --nodes 2 --gpus-per-node 8                  # one line per node
    dtlab multinode script --nodes 4 --gpus-per-node 8 --slurm > job.sh && sbatch job.sh

NVLS (NVLink SHARP: the NVSwitch reduces, NCCL's fastest all-reduce on HGX H100/H200) is left
to NCCL, which uses it where the hardware has it; ``--no-nvls`` (``nvls=False``) adds
``NCCL_NVLS_ENABLE=0`` for a cluster that must keep NVLink multicast off. Whatever the lines say,
a variable already in the environment that runs them is inherited unchanged.

Why the sbatch script looks as it does: ``$SLURM_NODEID`` differs per node, so it is expanded
by the shell *srun* starts on each node (single quotes), never by the batch shell, which runs
on the first node only; ``--kill-on-bad-exit`` ends every node's torchrun when one fails
instead of leaving the rest waiting out the rendezvous timeout.
"""

from __future__ import annotations

import ipaddress
import re
import shlex

DEFAULT_ENTRY = "-m dtlab.multinode.check"
DEFAULT_MASTER = "$MASTER_ADDR"
PORT = 29400

# what Linux takes as an interface name (IFNAMSIZ 16, with the NUL); nothing a shell reads
_IFNAME = re.compile(r"[A-Za-z0-9_.:-]{1,15}")
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?")
_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")


def _ipv6(master: str) -> str | None:
    """The IPv6 address ``master`` is (bare or in brackets), else None."""
    bare = master[1:-1] if master.startswith("[") and master.endswith("]") else master
    try:
        return str(ipaddress.IPv6Address(bare)) if ":" in bare else None
    except ValueError:
        return None


def _endpoint(master: str, port: int) -> str:
    six = _ipv6(master)
    return f"[{six}]:{port}" if six else f"{master}:{port}"


def check_args(nodes: int, gpus_per_node: int, entry: str, port: int, master: str | None = None,
               ifname: str | None = None, slurm: bool = False) -> None:
    """ValueError naming the flag, before any line is written. ``master`` None: the default
    (``$MASTER_ADDR``); with ``slurm`` it must be None, since the script finds node 0 itself."""
    if not 1 <= nodes <= 4096:
        raise ValueError(f"--nodes {nodes}: give 1 to 4096 nodes.")
    if not 1 <= gpus_per_node <= 64:
        raise ValueError(f"--gpus-per-node {gpus_per_node}: give 1 to 64 (one rank per GPU).")
    if not entry.strip():
        raise ValueError("--entry is empty: give a script and its arguments, or -m module.")
    if not 1 <= port <= 65535:
        raise ValueError(f"--port {port}: give 1 to 65535.")
    shlex.split(entry)  # unbalanced quotes: ValueError naming them
    if slurm and master is not None:
        raise ValueError(f"--master {master!r} with --slurm: the sbatch script derives node 0's "
                         f"address from the allocation's node list; drop --master.")
    if master is not None and not (_HOSTNAME.fullmatch(master) or _VARIABLE.fullmatch(master)
                                   or _ipv6(master)):
        raise ValueError(f"--master {master!r}: give node 0's hostname, its IP address, or a "
                         f"shell variable such as $MASTER_ADDR.")
    if ifname is not None and not _IFNAME.fullmatch(ifname):
        raise ValueError(f"--ifname {ifname!r} is not a network interface name: give one as "
                         f"`ip link` lists it (1 to 15 letters, digits, _ . : -), e.g. eth0.")


def _torchrun(nodes: str, node_rank: str, gpus: int, endpoint: str, rdzv_id: str,
              entry: str) -> str:
    return (f"torchrun --nnodes {nodes} --node-rank {node_rank} --nproc-per-node {gpus} "
            f"--rdzv-backend c10d --rdzv-endpoint {endpoint} --rdzv-id {rdzv_id} "
            f"--max-restarts 0 {entry}")


def _ifname_env(ifname: str | None) -> str:
    return f"GLOO_SOCKET_IFNAME={ifname} NCCL_SOCKET_IFNAME={ifname} " if ifname else ""


def torchrun_lines(nodes: int, gpus_per_node: int, entry: str = DEFAULT_ENTRY,
                   master: str = DEFAULT_MASTER, port: int = PORT, ifname: str | None = None,
                   rdzv_id: str = "dtlab", nvls: bool = True) -> list[str]:
    """One line per node; line i runs on node i (node 0's address is ``master``). ``nvls=False``
    prefixes ``NCCL_NVLS_ENABLE=0`` (NVLink multicast off).

    >>> torchrun_lines(2, 8, master="10.0.0.1")[1]  # doctest: +NORMALIZE_WHITESPACE
    'torchrun --nnodes 2 --node-rank 1 --nproc-per-node 8 --rdzv-backend c10d
     --rdzv-endpoint 10.0.0.1:29400 --rdzv-id dtlab --max-restarts 0 -m dtlab.multinode.check'
    """
    check_args(nodes, gpus_per_node, entry, port, master=master, ifname=ifname)
    off = "" if nvls else "NCCL_NVLS_ENABLE=0 "
    return [f"{off}{_ifname_env(ifname)}"
            + _torchrun(str(nodes), str(i), gpus_per_node, _endpoint(master, port), rdzv_id,
                        entry)
            for i in range(nodes)]


def sbatch(nodes: int, gpus_per_node: int, entry: str = DEFAULT_ENTRY, port: int = PORT,
           ifname: str | None = None, time_limit: str = "00:15:00", nvls: bool = True) -> str:
    """An sbatch script: one task per node, each running torchrun for that node's GPUs.
    ``nvls=False`` exports ``NCCL_NVLS_ENABLE=0``."""
    check_args(nodes, gpus_per_node, entry, port, ifname=ifname, slurm=True)
    inner = _torchrun('"$SLURM_NNODES"', '"$SLURM_NODEID"', gpus_per_node,
                      '"$MASTER_ADDR:$MASTER_PORT"', '"$SLURM_JOB_ID"', entry)
    exports = (f"export GLOO_SOCKET_IFNAME={ifname} NCCL_SOCKET_IFNAME={ifname}\n" if ifname else
               "# export GLOO_SOCKET_IFNAME=... NCCL_SOCKET_IFNAME=...   # the NIC between "
               "nodes, if not the first\n")
    nvls_line = ("" if nvls else "export NCCL_NVLS_ENABLE=0   # --no-nvls: NVLink multicast off\n")
    return f"""#!/bin/bash
#SBATCH --job-name=dtlab
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --time={time_limit}
set -euo pipefail
# the first node of the allocation hosts the c10d rendezvous
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR MASTER_PORT={port}
{nvls_line}{exports}# single quotes: each node's shell expands its own $SLURM_NODEID
srun --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}
"""
