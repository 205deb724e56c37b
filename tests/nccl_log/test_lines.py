"""Pass 1: one recogniser per line shape, on the shapes of NCCL 2.18-era and 2.2x releases."""

import pytest

from dtlab.nccl_log import lines
from dtlab.nccl_log.model import Transport


# ---- the prefix (src/debug.cc) ----

@pytest.mark.parametrize("line", [
    "gpu-a:1001:1031 [0] NCCL INFO Using network Socket",
    "[rank0]:gpu-a:1001:1031 [0] NCCL INFO Using network Socket",
    "[default0]:gpu-a:1001:1031 [0] NCCL INFO Using network Socket",
    "[2025-01-01 12:00:01] gpu-a:1001:1031 [0] NCCL INFO Using network Socket",
    "[default1]:[2025-01-01 12:00:01] gpu-a:1001:1031 [0] NCCL INFO Using network Socket   ",
])
def test_prefix_found_behind_launcher_prefixes_and_timestamps(line):
    r = lines.split_line(line, "f", 3)
    assert (r.host, r.pid, r.tid, r.dev, r.level, r.msg) == (
        "gpu-a", 1001, 1031, 0, "INFO", "Using network Socket")
    assert (r.source, r.lineno) == ("f", 3)


def test_warn_prefix_with_file_and_function():
    r = lines.split_line("node7:3002:3002 [1] enqueue.cc:1234 (ncclEnqueueCheck) NCCL WARN "
                         "Cuda failure 'out of memory'")
    assert (r.level, r.dev, r.msg) == ("WARN", 1, "Cuda failure 'out of memory'")


@pytest.mark.parametrize("line", ["epoch 1 loss 2.30", "", "W0101 12:00:00 3000 run.py:793] x",
                                  "host:12:34 NCCL CALL ncclAllReduce(...)"])
def test_non_nccl_lines_are_not_records(line):
    assert lines.split_line(line) is None


def test_version_with_and_without_prefix():
    assert lines.classify("NCCL version 2.28.9+cuda12.9") == (
        "version", {"version": "2.28.9", "cuda": "12.9"})
    assert lines.classify("NCCL version 2.21.5") == ("version", {"version": "2.21.5", "cuda": None})
    assert lines.bare_version("NCCL version 2.18.5+cuda12.2") == {"version": "2.18.5", "cuda": "12.2"}
    assert lines.bare_version("[default0]:NCCL version 2.18.5+cuda12.2")["version"] == "2.18.5"
    # torch's error text names the version too; that line is not NCCL's
    assert lines.bare_version("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3780, invalid "
                              "usage, NCCL version 2.28.9") is None


def test_error_trace_lines():
    assert lines.classify("enqueue.cc:1948 -> 5") == (
        "error_trace", {"where": "enqueue.cc:1948", "code": 5, "name": "ncclInvalidUsage"})
    assert lines.error_trace("transport/net_socket.cc:482 -> 2")["name"] == "ncclSystemError"


# ---- init lines (src/init.cc), by era ----

def test_init_228_start_and_complete():
    kind, f = lines.classify("ncclCommInitRankConfig comm 0x55d0c8a0e1f0 rank 1 nranks 2 cudaDev 1 "
                             "nvmlDev 1 busId 2a000 commId 0x5ae2ff3c1d2b9e01 - Init START")
    assert kind == "init"
    assert f == {"func": "ncclCommInitRankConfig", "ptr": "0x55d0c8a0e1f0", "rank": 1, "nranks": 2,
                 "phase": "Init START", "cuda_dev": 1, "nvml_dev": 1, "bus_id": "2a000",
                 "comm_id": "0x5ae2ff3c1d2b9e01"}
    assert lines.init("ncclCommInitRankConfig comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
                      "busId 18000 commId 0x1 - Init COMPLETE")["phase"] == "Init COMPLETE"


def test_init_split_221_plus_has_no_space_before_dash():
    f = lines.init("ncclCommSplit comm 0x55d0c9000100 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId "
                   "18000 parent 0x55d0c8a0e1f0 splitCount 1 color 0 key 0- Init START")
    assert (f["parent"], f["split_count"], f["color"], f["phase"]) == (
        "0x55d0c8a0e1f0", 1, 0, "Init START")
    assert "comm_id" not in f


def test_init_split_219_with_commid():
    f = lines.init("ncclCommSplit comm 0xb rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 parent "
                   "0xa color 3 key 1 commId 0x0 - Init COMPLETE")
    assert (f["parent"], f["color"], f["comm_id"], f.get("split_count")) == ("0xa", 3, "0x0", None)


def test_init_218_era_without_api_name_nor_commid_at_start():
    f = lines.init("comm 0x1c2d3e0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START")
    assert (f["func"], f["rank"], f["bus_id"], f.get("comm_id"), f.get("nvml_dev")) == (
        None, 0, "1000", None, None)
    f = lines.init("comm 0x1c2d3e0 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x3f2a - Init COMPLETE")
    assert f["comm_id"] == "0x3f2a"


def test_init_newest_rank_tag_and_destroy():
    f = lines.init("[Rank 3] ncclCommInitRankConfig comm 0xa rank 3 nranks 8 cudaDev 3 nvmlDev 3 "
                   "busId 5d000 commId 0x9 - Init START")
    assert (f["rank"], f["nranks"], f["func"]) == (3, 8, "ncclCommInitRankConfig")
    f = lines.init("comm 0xa rank 3 nranks 8 cudaDev 3 busId 5d000 commId 0x9 - Destroy COMPLETE")
    assert f["phase"] == "Destroy COMPLETE"


def test_init_timings_both_forms():
    f = lines.init_timings("Init timings - ncclCommInitRankConfig: rank 0 nranks 2 total 0.52 "
                           "(kernels 0.18, alloc 0.02, bootstrap 0.01, allgathers 0.00, topo 0.08, "
                           "graphs 0.00, connections 0.19, rest 0.04)")
    assert (f["func"], f["total_s"], f["parts_s"]["connections"]) == ("ncclCommInitRankConfig", 0.52, 0.19)
    f = lines.init_timings("Init timings: rank 1 nranks 2 total 1.10 (kernels 0.50, bootstrap 0.10, "
                           "allgathers 0.00, topo 0.20, graphs 0.01, connections 0.25, rest 0.04)")
    assert (f["func"], f["rank"], len(f["parts_s"])) == (None, 1, 7)


def test_comm_info_and_channel_counts():
    f = lines.comm_info("comm 0xa rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0")
    assert (f["ptr"], f["n_nodes"], f["local_rank"]) == ("0xa", 1, 1)
    assert lines.channel_counts("24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p "
                                "channels, 32 p2p channels per peer") == {
        "coll": 24, "collnet": 24, "nvls": 16, "p2p": 32, "p2p_per_peer": 32}
    assert lines.channel_counts("2 coll channels, 2 p2p channels, 2 p2p channels per peer") == {
        "coll": 2, "p2p": 2, "p2p_per_peer": 2}


# ---- graph lines ----

def test_ring_order_from_rank0_including_cut_lines():
    assert lines.classify("Channel 03/24 :    0   1") == (
        "ring_order", {"channel": 3, "n_channels": 24, "ranks": [0, 1]})
    assert lines.ring_order("Channel 00/02 :    0   1   2   3 ...")["ranks"] == [0, 1, 2, 3]


def test_ring_neighbours_and_trees():
    assert lines.classify("Ring 05 : 1 -> 0 -> 1") == (
        "ring_neighbours", {"channel": 5, "prev": 1, "rank": 0, "next": 1})
    f = lines.trees("Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1")
    assert f["trees"] == [{"channel": 0, "down": [1], "rank": 0, "up": -1},
                          {"channel": 1, "down": [], "rank": 0, "up": 1}]


# ---- transports (src/transport/*.cc) ----

@pytest.mark.parametrize("msg,via,kind,conn,direction", [
    ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "P2P/CUMEM/read", "P2P/CUMEM", 0, "send"),
    ("Channel 01/1 : 1[1] -> 0[0] via P2P/CUMEM/CE", "P2P/CUMEM/CE", "P2P/CUMEM", 1, "send"),
    ("Channel 00/0 : 0[1000] -> 1[2000] via P2P/IPC/read", "P2P/IPC/read", "P2P/IPC", 0, "send"),
    ("Channel 02/0 : 0[0] -> 1[1] via P2P/direct pointer/read", "P2P/direct pointer/read",
     "P2P/direct", 0, "send"),
    ("Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", "SHM/direct/direct", "SHM", None, "send"),
    ("Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA", "NET/IB/0/GDRDMA", "NET/IB", 0, "send"),
    ("Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/0", "NET/Socket/0", "NET/Socket", 0,
     "receive"),
    ("Channel 03/0 : 2[2] -> 9[1] [send] via NET/IB/1(3)/GDRDMA/Shared", "NET/IB/1(3)/GDRDMA/Shared",
     "NET/IB", 0, "send"),
])
def test_transport_shapes(msg, via, kind, conn, direction):
    k, f = lines.classify(msg)
    assert k == "transport"
    assert (f["via"], f["conn_index"], f["direction"]) == (via, conn, direction)
    t = Transport(f["channel"], f["conn_index"], f["src_rank"], f["dst_rank"], f["via"], f["direction"])
    assert t.kind == kind


def test_network_and_env():
    assert lines.classify("Using network IB") == ("network", {"network": "IB"})
    assert lines.env("NCCL_P2P_DISABLE set by environment to 1.") == {"name": "NCCL_P2P_DISABLE", "value": "1"}
    assert lines.env("NCCL_SOCKET_IFNAME set by environment to ^lo,docker")["value"] == "^lo,docker"
    assert lines.env("NCCL_LAUNCH_MODE set by environment to PARALLEL")["value"] == "PARALLEL"


# ---- COLL and per-call TUNING (src/enqueue.cc) ----

def test_coll_line_fields_opcount_is_hex():
    f = lines.coll("AllReduce: opCount 1e sendbuff 0x7f3a4c000000 recvbuff 0x7f3a4c000000 count 1024 "
                   "datatype 7 op 0 root 0 comm 0x55d0c8a0e1f0 [nranks=2] stream 0x55d0c8b31a40")
    assert f == {"op": "AllReduce", "opcount": 30, "count": 1024, "datatype": 7, "redop": 0,
                 "root": 0, "comm": "0x55d0c8a0e1f0", "nranks": 2, "stream": "0x55d0c8b31a40"}
    f = lines.coll("Recv: opCount 0 sendbuff (nil) recvbuff 0x7f00 count 32 datatype 9 op 0 root 0 "
                   "comm 0xa [nranks=2] stream 0x1")
    assert (f["op"], f["datatype"], f["root"]) == ("Recv", 9, 0)


def test_algo_line_228_names_and_218_indices():
    assert lines.classify("AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}") == (
        "algo", {"op": "AllReduce", "bytes": 4194304, "algorithm": "Ring", "protocol": "Simple",
                 "channels": [0, 23]})
    f = lines.algo("1048576 Bytes -> Algo 0 proto 1 time 38.503998")
    assert (f["op"], f["algorithm"], f["protocol"]) == (None, "Tree", "LL128")
    assert lines.algo("AllGather: 64 Bytes -> Algo NVLS_TREE proto LL channel{Lo..Hi}={0..0}")[
        "algorithm"] == "NVLSTree"


@pytest.mark.parametrize("msg", ["Bootstrap: Using eth0:10.0.0.5<0>", "cudaDriverVersion 12080",
                                 "Connected all rings, use ring PXN 0 GDR 1", "CC Off, workFifoBytes 1048576"])
def test_unknown_messages_are_skipped(msg):
    assert lines.classify(msg) is None
