"""Synthetic NCCL log lines, written with the printf formats of NCCL's source (cited per
function), for the fixtures and for tests that need many variants. Not real evidence: real
logs live in data/.

    python tests/nccl_log/nccl_synth.py      # rewrite tests/nccl_log/fixtures/synthetic_*
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"

ALGOS_228 = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"]
ALGOS_218 = ALGOS_228[:6]
PROTOS = ["LL", "LL128", "Simple"]
FUNCS = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]


def info(host: str, pid: int, tid: int, dev: int, msg: str) -> str:
    # src/debug.cc: "%s:%d:%d " then "[%d] NCCL INFO %s"
    return "%s:%d:%d [%d] NCCL INFO %s" % (host, pid, tid, dev, msg)


def warn(host: str, pid: int, tid: int, dev: int, msg: str) -> str:
    return "%s:%d:%d [%d] enqueue.cc:1234 (ncclEnqueueCheck) NCCL WARN %s" % (host, pid, tid, dev, msg)


def init_228(func, ptr, rank, nranks, dev, bus, comm_id, phase="Init START"):
    # src/init.cc (2.21+): "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - %s"
    return "%s comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x commId 0x%x - %s" % (
        func, ptr, rank, nranks, dev, dev, bus, comm_id, phase)


def split_228(ptr, rank, nranks, dev, bus, parent, split_count, color, key, phase="Init START"):
    # src/init.cc: "... busId %lx parent %p splitCount %d color %d key %d- Init START" (sic)
    sep = "- " if phase == "Init START" else " - "
    return ("ncclCommSplit comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x parent %s "
            "splitCount %d color %d key %d%s%s") % (ptr, rank, nranks, dev, dev, bus, parent,
                                                   split_count, color, key, sep, phase)


def init_218(ptr, rank, nranks, dev, bus, comm_id=None, phase="Init START"):
    # older: "comm %p rank %d nranks %d cudaDev %d busId %lx - Init START";
    # "... busId %lx commId 0x%llx - Init COMPLETE"
    ident = "" if comm_id is None else " commId 0x%x" % comm_id
    return "comm %s rank %d nranks %d cudaDev %d busId %x%s - %s" % (ptr, rank, nranks, dev, bus,
                                                                     ident, phase)


def timings(func, rank, nranks, total):
    # src/init.cc: "Init timings - %s: rank %d nranks %d total %.2f (kernels %.2f, alloc %.2f, ...)"
    return ("Init timings - %s: rank %d nranks %d total %.2f (kernels %.2f, alloc %.2f, bootstrap "
            "%.2f, allgathers %.2f, topo %.2f, graphs %.2f, connections %.2f, rest %.2f)") % (
        func, rank, nranks, total, *(total * f for f in (0.35, 0.04, 0.02, 0.0, 0.15, 0.0, 0.36, 0.08)))


def coll(op, opcount, count, dtype, redop, root, comm, nranks, buf=0x7F3A4C000000):
    # src/enqueue.cc: "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d
    # comm %p [nranks=%d] stream %p"
    return ("%s: opCount %x sendbuff 0x%x recvbuff 0x%x count %d datatype %d op %d root %d comm %s "
            "[nranks=%d] stream 0x55d0c8b31a40") % (op, opcount, buf, buf, count, dtype, redop, root,
                                                    comm, nranks)


def algo_228(op, nbytes, algo, proto, lo=0, hi=0):
    # src/enqueue.cc: "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"
    return "%s: %d Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}" % (op, nbytes, algo, proto, lo, hi)


def algo_218(nbytes, algo, proto, time):
    # src/enqueue.cc (older): "%ld Bytes -> Algo %d proto %d time %f"
    return "%d Bytes -> Algo %d proto %d time %f" % (nbytes, algo, proto, time)


def _cell(func, a, p):
    """Made-up but plausible latency (us) / bandwidth (GB/s); 0/0 for the disabled ones."""
    if a not in ("Tree", "Ring") or (a == "Tree" and func != "AllReduce"):
        return 0.0, 0.0
    lat = {"LL": 4.4, "LL128": 7.2, "Simple": 12.0}[p] + (2.0 if a == "Tree" else 0.0)
    bw = {"LL": 19.5, "LL128": 65.0, "Simple": 110.0}[p] * (0.5 if a == "Tree" else 1.0)
    return lat, bw


def tuning_table_blocks(algos=ALGOS_228) -> list[str]:
    # src/graph/tuning.cc (newer): blocks of three algorithms
    out = []
    for block in range((len(algos) + 2) // 3):
        names = [a for a in algos[block * 3:block * 3 + 3]]
        out.append("  Algorithm   |" + "".join(" %14s   %14s   %14s |" % ("", a, "") for a in names))
        out.append("  Protocol    |" + "".join(" %14s |" % p for _ in range(3) for p in PROTOS))
        out.append(" Max NThreads |" + "".join(" %14d |" % (640 if p == "LL128" else 512)
                                                for _ in names for p in PROTOS))
        for f in FUNCS:
            out.append("%13s |" % f + "".join("%8.1f/%6.1f |" % _cell(f, a, p)
                                              for a in names for p in PROTOS))
    return out


def tuning_table_wide(algos=ALGOS_218) -> list[str]:
    # src/graph/tuning.cc (older): one header "Latency/AlgBw |" then " %7s/%6s |" per column
    out = ["Latency/AlgBw |" + "".join(" %7s/%6s |" % (a, p) for a in algos for p in PROTOS),
           " Max NThreads |" + "".join(" %14d |" % 512 for _ in algos for _ in PROTOS)]
    for f in FUNCS:
        out.append("%13s |" % f + "".join("%8.1f/%6.1f |" % _cell(f, a, p)
                                          for a in algos for p in PROTOS))
    return out


def torch_228_rank(rank: int, pid: int, calls: list[tuple], p2p_disabled: bool = False,
                   host: str = "gpu-a", n_channels: int = 4) -> list[str]:
    """One process of a 2-rank torch job on NCCL 2.28: world comm, then its collectives.

    ``calls`` are (op, count, dtype, redop, root); with runtime connection the transports are
    logged after the first COLL line.
    """
    tid, dev, bus = pid, rank, (0x18000, 0x2A000)[rank]
    ptr, cid = "0x55d0c8a0e1f0" if rank == 0 else "0x5612f7c3d2a0", 0x5AE2FF3C1D2B9E01
    L = lambda msg: info(host, pid, tid, dev, msg)  # noqa: E731
    out = [L("Bootstrap: Using eth0:10.0.0.5<0>"), L("cudaDriverVersion 12080"),
           L("NCCL version 2.28.9+cuda12.9"), L("NCCL_SOCKET_IFNAME set by environment to eth0"),
           L("NCCL_NVLS_ENABLE set by environment to 0.")]
    if p2p_disabled:
        out.append(L("NCCL_P2P_DISABLE set by environment to 1."))
    out += [L("Comm config Blocking set to 1"),
            info(host, pid, tid + 30, dev, "NET/IB : No device found."),
            info(host, pid, tid + 30, dev, "NET/Socket : Using [0]eth0:10.0.0.5<0>"),
            L("Using network Socket"),
            L(init_228("ncclCommInitRankConfig", ptr, rank, 2, dev, bus, cid)),
            L("comm %s rank %d nRanks 2 nNodes 1 localRanks 2 localRank %d MNNVL 0" % (ptr, rank, rank))]
    if rank == 0:  # 2.28 prints the ring single-spaced (data/h200x2-nccl-logs)
        out += [L("Channel %02d/%02d : 0 1" % (c, n_channels)) for c in range(n_channels)]
    out += [L("Ring %02d : %d -> %d -> %d" % (c, 1 - rank, rank, 1 - rank)) for c in range(n_channels)]
    down, up = ("1/-1/-1", -1) if rank == 0 else ("-1/-1/-1", 0)
    out.append(L("Trees" + "".join(" [%d] %s->%d->%d" % (c, down, rank, up) for c in range(n_channels))))
    if rank == 0:
        out += [L(line) for line in tuning_table_blocks()]
    out += [L("%d coll channels, %d collnet channels, 0 nvls channels, %d p2p channels, 2 p2p "
              "channels per peer" % (n_channels, n_channels, n_channels)),
            L(init_228("ncclCommInitRankConfig", ptr, rank, 2, dev, bus, cid, "Init COMPLETE")),
            L(timings("ncclCommInitRankConfig", rank, 2, 0.52 + 0.03 * rank))]
    via = "SHM/direct/direct" if p2p_disabled else "P2P/CUMEM/read"
    for i, (op, count, dtype, redop, root) in enumerate(calls):
        out.append(L(coll(op, 0, count, dtype, redop, root, ptr, 2)))
        if i == 0:
            for c in range(n_channels):
                if p2p_disabled:  # src/transport/shm.cc prints no connection index
                    out.append(L("Channel %02d : %d[%d] -> %d[%d] via %s" % (c, rank, dev, 1 - rank, 1 - dev, via)))
                else:
                    out.append(L("Channel %02d/0 : %d[%d] -> %d[%d] via %s" % (c, rank, dev, 1 - rank, 1 - dev, via)))
            out.append(L("Connected all rings, use ring PXN 0 GDR 1"))
        if rank == 0:
            size = {7: 4, 9: 2, 6: 2, 4: 8}.get(dtype, 4) * count
            out.append(L(algo_228(op, size, "RING", "LL" if size <= 65536 else "SIMPLE")))
    return out


def world_log(calls_by_rank: dict[int, list[tuple]], nranks: int | None = None,
              opcount_step: int = 0) -> str:
    """Minimal interleaved text: one world comm, then each rank's COLL lines (for divergence)."""
    nranks = nranks or len(calls_by_rank)
    lines = []
    for r in sorted(calls_by_rank):
        lines.append(info("node", 100 + r, 100 + r, r, init_228(
            "ncclCommInitRankConfig", "0x%x" % (0xA000 + r), r, nranks, r, 0x1000 * (r + 1), 0x77)))
    for r, calls in sorted(calls_by_rank.items()):
        for i, (op, count, dtype, redop, root) in enumerate(calls):
            lines.append(info("node", 100 + r, 100 + r, r, coll(op, i * opcount_step, count, dtype,
                                                                redop, root, "0x%x" % (0xA000 + r), nranks)))
    return "\n".join(lines) + "\n"


TORCH_CALLS = [("AllReduce", 1, 7, 0, 0), ("AllReduce", 1024, 7, 0, 0), ("AllReduce", 1024, 7, 0, 0),
               ("Broadcast", 256, 9, 0, 0), ("AllGather", 512, 7, 0, 0),
               ("ReduceScatter", 256, 7, 0, 0), ("AllReduce", 4194304, 9, 0, 0)]


def two_files_228() -> dict[str, list[str]]:
    """Two processes (NCCL_DEBUG_FILE=...%h.%p): the world comm, a new_group split of it, and a
    2-rank comm torch makes for a send/recv pair; a Send/Recv on the world comm."""
    files = {}
    for rank, pid in ((0, 1001), (1, 1002)):
        L = lambda msg, tid=pid: info("gpu-a", pid, tid, rank, msg)  # noqa: E731
        world = "0x55d0c8a0e1f0" if rank == 0 else "0x5612f7c3d2a0"
        sub, pair = "0x55d0c9%06x" % (0x100 + rank), "0x55d0ca%06x" % (0x200 + rank)
        bus = (0x18000, 0x2A000)[rank]
        out = torch_228_rank(rank, pid, TORCH_CALLS)
        out += [L(split_228(sub, rank, 2, rank, bus, world, 1, 0, rank)),
                L("Channel %02d/%02d :    0   1" % (0, 2)) if rank == 0 else None,
                L("Ring 00 : %d -> %d -> %d" % (1 - rank, rank, 1 - rank)),
                L("2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p "
                  "channels per peer"),
                L(split_228(sub, rank, 2, rank, bus, world, 1, 0, rank, "Init COMPLETE")),
                L(timings("ncclCommSplit", rank, 2, 0.05)),
                L(coll("AllReduce", 0, 64, 7, 2, 0, sub, 2)),
                L(coll("AllReduce", 0, 64, 7, 2, 0, sub, 2)),
                L(coll("Send" if rank == 0 else "Recv", 0, 128, 7, 0, 1 - rank, world, 2)),
                L(init_228("ncclCommInitRankConfig", pair, rank, 2, rank, bus, 0x9C41D07E55AA0002)),
                L(init_228("ncclCommInitRankConfig", pair, rank, 2, rank, bus, 0x9C41D07E55AA0002,
                           "Init COMPLETE")),
                L(coll("Send" if rank == 0 else "Recv", 0, 32, 7, 0, 1 - rank, pair, 2))]
        files["synthetic_gpu-a.%d.log" % pid] = [x for x in out if x]
    return files


def interleaved_218() -> list[str]:
    """Two processes on an older NCCL, one stream: old init lines, busId brackets, P2P/IPC,
    the wide tuning table, numeric TUNING lines, increasing opCounts."""
    per = {}
    for rank, pid in ((0, 2001), (1, 2002)):
        L = lambda msg: info("oldbox", pid, pid, rank, msg)  # noqa: E731
        ptr, bus, peer_bus = ("0x1c2d3e0", 0x1000, 0x2000) if rank == 0 else ("0x2c3d4e0", 0x2000, 0x1000)
        out = [L("NCCL version 2.18.5+cuda12.2"), L("NCCL_P2P_LEVEL set by environment to NVL"),
               L("Using network Socket"), L(init_218(ptr, rank, 2, rank, bus))]
        if rank == 0:
            out += [L("Channel 00/02 :    0   1"), L("Channel 01/02 :    0   1")]
        out += [L("Ring %02d : %d -> %d -> %d" % (c, 1 - rank, rank, 1 - rank)) for c in range(2)]
        out.append(L("Trees [0] %s [1] %s" % (("1/-1/-1->0->-1",) * 2 if rank == 0 else ("-1/-1/-1->1->0",) * 2)))
        if rank == 0:
            out += [L(line) for line in tuning_table_wide()]
        out += [L("Channel %02d/0 : %d[%x] -> %d[%x] via P2P/IPC/read" % (c, rank, bus, 1 - rank, peer_bus))
                for c in range(2)]
        out += [L("Connected all rings"), L("Connected all trees"),
                L("2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"),
                L(init_218(ptr, rank, 2, rank, bus, 0x3F2A11D0C0FFEE01, "Init COMPLETE"))]
        for i, count in enumerate((1, 262144, 262144)):
            out.append(L(coll("AllReduce", i, count, 7, 0, 0, ptr, 2)))
            if rank == 0:
                out.append(L(algo_218(4 * count, 1, 2 if count > 1 else 0, 10.5)))
        per[rank] = out
    merged = []  # the two processes wrote to one console: alternate in chunks of three lines
    for i in range(0, max(map(len, per.values())), 3):
        merged += per[0][i:i + 3] + per[1][i:i + 3]
    return merged


def torchrun_shm_hang() -> list[str]:
    """torchrun console output (prefixes, timestamps, Python lines) with NCCL_P2P_DISABLE=1;
    rank 1 never reaches the last all_reduce."""
    calls = [("AllReduce", 1, 7, 0, 0), ("AllReduce", 1024, 7, 0, 0), ("AllReduce", 1024, 7, 0, 0)]
    r0 = torch_228_rank(0, 3001, calls, p2p_disabled=True, host="node7")
    r1 = torch_228_rank(1, 3002, calls[:2], p2p_disabled=True, host="node7")
    out = ["W0101 12:00:00.000000 3000 torch/distributed/run.py:793] Setting OMP_NUM_THREADS"]
    for i in range(max(len(r0), len(r1))):
        if i < len(r0):
            out.append("[default0]:" + r0[i])
        if i < len(r1):
            out.append("[default1]:[2025-01-01 12:00:01] " + r1[i] if i % 5 == 0 else "[default1]:" + r1[i])
        if i == 12:
            out.append("[default0]:step 0 loss 2.3026")
    out += ["[default1]:" + warn("node7", 3002, 3002, 1, "Watchdog caught collective operation timeout"),
            "[default0]:[rank0]:[E101 12:10:01.000000 3001 ProcessGroupNCCL.cpp:632] [Rank 0] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE)"]
    return out


def net_two_nodes() -> list[str]:
    """Two hosts, one GPU each, over InfiniBand: NET/IB send and receive lines."""
    out = []
    for rank, host, pid in ((0, "node1", 4001), (1, "node2", 4002)):
        L = lambda msg: info(host, pid, pid, 0, msg)  # noqa: E731
        ptr = "0x7f01%04x" % rank
        out += [L("NCCL version 2.28.9+cuda12.9"), L("NCCL_IB_HCA set by environment to mlx5_0"),
                L("Using network IB"), L(init_228("ncclCommInitRankConfig", ptr, rank, 2, 0, 0x18000, 0xABCDEF))]
        for c in range(2):
            out.append(L("Channel %02d/0 : %d[0] -> %d[0] [send] via NET/IB/0/GDRDMA" % (c, rank, 1 - rank)))
            out.append(L("Channel %02d/0 : %d[0] -> %d[0] [receive] via NET/IB/0/GDRDMA" % (c, 1 - rank, rank)))
        out += [L("2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 1 p2p channels per peer"),
                L(init_228("ncclCommInitRankConfig", ptr, rank, 2, 0, 0x18000, 0xABCDEF, "Init COMPLETE")),
                L(coll("AllReduce", 0, 4096, 7, 0, 0, ptr, 2))]
    return out


def write_fixtures() -> None:
    FIXTURES.mkdir(exist_ok=True)
    d = FIXTURES / "synthetic_228_two_files"
    d.mkdir(parents=True, exist_ok=True)
    for name, lines in two_files_228().items():
        (d / name).write_text("\n".join(lines) + "\n")
    (d / "README.md").write_text("Synthetic NCCL 2.28 logs, one per process; see ../README.md.\n")
    for name, lines in (("synthetic_218_interleaved.log", interleaved_218()),
                        ("synthetic_torchrun_shm_hang.log", torchrun_shm_hang()),
                        ("synthetic_net_two_nodes.log", net_two_nodes())):
        (FIXTURES / name).write_text("\n".join(lines) + "\n")
    (FIXTURES / "synthetic_not_nccl.log").write_text(
        "epoch 1 loss 2.30\nepoch 2 loss 1.95\nTraceback (most recent call last):\n"
        "RuntimeError: something else went wrong\n")


if __name__ == "__main__":
    write_fixtures()
