"""Read ``NCCL_DEBUG=INFO`` logs of all ranks at once: who is which rank, how the GPUs talk,
what each rank called, and where the ranks stopped agreeing.

Record a log (one file per process; ``%h`` host, ``%p`` pid)::

    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,GRAPH,TUNING,ENV \\
    NCCL_DEBUG_FILE=/tmp/nccl/nccl.%h.%p torchrun --nproc-per-node 2 train.py

then ``dtlab nccl-log /tmp/nccl`` (or ``--json``), or from Python:

>>> import dtlab.nccl_log as nl
>>> log = nl.parse('''
... h:11:11 [0] NCCL INFO NCCL version 2.28.9+cuda12.9
... h:11:11 [0] NCCL INFO ncclCommInitRankConfig comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e - Init START
... h:12:12 [1] NCCL INFO ncclCommInitRankConfig comm 0xb rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x5e - Init START
... h:11:11 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1024 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x2
... h:12:12 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 512 datatype 7 op 0 root 0 comm 0xb [nranks=2] stream 0x2
... ''')
>>> log.nccl_version, log.world_size, [p["rank"] for p in log.processes]
('2.28.9', 2, [0, 1])
>>> log.divergence["position"], log.divergence["reason"], log.divergence["ranks"]
(1, 'count', [0, 1])

The work is done in small passes, one module each: ``sources`` (inputs -> texts), ``lines``
and ``tuning`` (one line -> fields), ``assemble`` (lines -> each process's communicators),
``groups`` (communicators matched across processes; the world one), ``divergence``
(the first call where ranks disagree), ``net`` and ``nodes`` (hosts, nNodes, and how the bytes
cross nodes: NET/IB or NET/Socket, which NIC, GPUDirect RDMA), ``report`` (the human summary).
"""

from __future__ import annotations

from .assemble import assemble
from .divergence import divergence
from .groups import group, select, world
from .nodes import nodes
from .model import Call, CommView, Communicator, Transport
from .result import NcclLog
from .sources import HINT, NotAnNcclLog, Sources, numbered_lines, read_sources

__all__ = ["parse", "NcclLog", "NotAnNcclLog", "divergence", "Call", "CommView",
           "Communicator", "Transport"]


def parse(src: Sources, comm: str | int | None = None) -> NcclLog:
    """Parse NCCL logs: a path, a list of paths, a directory, or the text itself.

    ``comm`` picks the communicator that ``ranks``, ``collectives`` and ``divergence`` describe:
    a key from ``log.communicators`` (e.g. ``"id:0x5e"``), a commId, or an index; default the
    world one. Files named explicitly must be NCCL logs (else ``NotAnNcclLog``); files found in a
    directory that are not (a README) are skipped and listed in ``skipped_sources``.
    """
    sources = read_sources(src)
    asm = assemble(numbered_lines(sources))
    for s in sources:
        if s.explicit and not asm.nccl_lines.get(s.name):
            raise NotAnNcclLog(f"{s.name}: no NCCL log lines in it (expected lines like "
                               f"'host:pid:tid [dev] NCCL INFO ...' from NCCL_DEBUG=INFO): {HINT}")
    if not asm.nccl_lines:
        names = ", ".join(s.name for s in sources) or ", ".join(
            map(str, src if isinstance(src, (list, tuple)) else [src]))
        raise NotAnNcclLog(f"{names}: no NCCL log lines found: {HINT}")
    comms = group(asm.views)
    world_comm = world(comms)
    rank_of = {(v.host, v.pid): r for r, v in world_comm.members.items()} if world_comm else {}
    processes = [{"host": h, "pid": p, "rank": rank_of.get((h, p)),
                  "sources": sorted(asm.sources.get((h, p), ()))}
                 for (h, p) in asm.processes]
    processes.sort(key=lambda d: (d["rank"] is None, d["rank"] or 0, d["host"], d["pid"]))

    def label(key):
        return f"{key[0]}:{key[1]}" if key else ""

    return NcclLog(
        sources=[s.name for s in sources if asm.nccl_lines.get(s.name)],
        skipped_sources=[s.name for s in sources if not asm.nccl_lines.get(s.name)],
        processes=processes, communicators=comms, world=world_comm,
        selected=select(comms, comm),
        versions={label(k): v for k, v in asm.versions.items()},
        env_by_process={label(k): asm.env.get(k, {}) for k in asm.processes},
        networks={label(k): v for k, v in asm.networks.items()},
        warnings=asm.warnings, errors=asm.errors, nodes=nodes(asm),
        overlong_lines={s.name: s.overlong for s in sources if s.overlong})
