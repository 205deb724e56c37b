"""parse() end to end on the synthetic fixtures: inputs, facts, JSON shape, errors."""

import json
from pathlib import Path

import pytest
from nccl_synth import info, init_228

import dtlab.nccl_log as nl

FIX = Path(__file__).parent / "fixtures"
TWO = FIX / "synthetic_228_two_files"


def test_directory_of_per_process_files_skips_non_logs():
    log = nl.parse(TWO)
    assert [Path(s).name for s in log.sources] == ["synthetic_gpu-a.1001.log", "synthetic_gpu-a.1002.log"]
    assert [Path(s).name for s in log.skipped_sources] == ["README.md"]
    assert (log.nccl_version, log.cuda_version, log.world_size) == ("2.28.9", "12.9", 2)
    assert [(p["pid"], p["rank"]) for p in log.processes] == [(1001, 0), (1002, 1)]


def test_same_answer_from_a_list_of_files_and_from_text():
    files = sorted(TWO.glob("synthetic_*.log"))
    a = nl.parse(TWO).to_dict()
    b = nl.parse([str(f) for f in files]).to_dict()
    c = nl.parse("".join(f.read_text() for f in files)).to_dict()
    for d in (b, c):
        for key in ("ranks", "collectives", "env", "network", "tuning", "divergence", "world"):
            assert d[key] == a[key], key


def test_facts_of_the_228_fixture():
    d = nl.parse(TWO).to_dict()
    r0, r1 = d["ranks"]
    assert (r0["rank"], r0["cuda_dev"], r0["bus_id"], r1["bus_id"]) == (0, 0, "18000", "2a000")
    assert r0["comm_id"] == r1["comm_id"] == "0x5ae2ff3c1d2b9e01"
    assert r0["n_channels"] == r1["n_channels"] == 4
    assert r0["transports"] == [{"peer": 1, "via": "P2P/CUMEM/read", "kind": "P2P/CUMEM",
                                 "direction": "send", "conn_index": 0, "channels": [0, 1, 2, 3]}]
    assert r0["init_time_s"] == 0.52 and r0["init_timings_s"]["connections"] == 0.19
    assert r1["trees"][0] == {"channel": 0, "down": [], "rank": 1, "up": 0}
    assert d["env"] == {"NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert d["network"] == "Socket"
    assert len(d["tuning"]) == 5 * 7 * 3
    calls0 = d["collectives"][0]
    assert [c["op"] for c in calls0] == ["AllReduce"] * 3 + ["Broadcast", "AllGather",
                                                            "ReduceScatter", "AllReduce", "Send"]
    assert calls0[3] == {"op": "Broadcast", "count": 256, "datatype": 9, "datatype_name": "ncclBfloat16",
                         "dtype": "bfloat16", "redop": 0, "redop_name": "ncclSum", "root": 0, "opcount": 0, "bytes": 512,
                         "algorithm": "Ring", "protocol": "LL"}
    assert calls0[-1]["p2p"] is True
    assert "algorithm" not in d["collectives"][1][0]  # only rank 0 logs the per-call choice
    assert d["divergence"] is None
    assert d["alignment"]["opcount"]["used"] is False  # opCount 0 on every call
    kinds = [(c["key"].split(":")[0], c["nranks"], c["n_calls"]) for c in d["communicators"]]
    assert kinds == [("id", 2, {0: 8, 1: 8}), ("split", 2, {0: 2, 1: 2}), ("id", 2, {0: 1, 1: 1})]
    json.dumps(d)  # serialisable as is


def test_other_communicator_by_parameter():
    split = nl.parse(TWO).communicators[1].key
    d = nl.parse(TWO, comm=split).to_dict()
    assert d["communicator"]["kind"] == "split"
    assert [c["redop_name"] for c in d["collectives"][0]] == ["ncclMax", "ncclMax"]
    assert d["ranks"][0]["n_channels"] == 2


def test_older_nccl_interleaved():
    log = nl.parse(FIX / "synthetic_218_interleaved.log")
    d = log.to_dict()
    assert (d["nccl_version"], d["world_size"], d["network"]) == ("2.18.5", 2, "Socket")
    assert d["world"] == "id:0x3f2a11d0c0ffee01"
    assert [r["transport_kinds"] for r in d["ranks"]] == [["P2P/IPC"], ["P2P/IPC"]]
    assert [c["opcount"] for c in d["collectives"][1]] == [0, 1, 2]
    assert [(c["algorithm"], c["protocol"]) for c in d["collectives"][0]] == [
        ("Ring", "LL"), ("Ring", "Simple"), ("Ring", "Simple")]
    assert len(d["tuning"]) == 5 * 6 * 3
    assert d["alignment"]["opcount"] == {"used": True, "agrees": True}
    assert d["ranks"][0]["init_time_s"] is None  # this era printed no init timings


def test_torchrun_console_with_p2p_disabled_and_a_hang():
    log = nl.parse(FIX / "synthetic_torchrun_shm_hang.log")
    d = log.to_dict()
    assert [(p["pid"], p["rank"]) for p in d["processes"]] == [(3001, 0), (3002, 1)]
    assert d["env"]["NCCL_P2P_DISABLE"] == "1"
    assert {k for r in d["ranks"] for k in r["transport_kinds"]} == {"SHM"}
    div = d["divergence"]
    assert div["reason"] == "fewer_calls" and div["fewer"] == [1]
    assert div["ranks"] == [0, 1] and div["confident"] is False  # 2 ranks: no majority
    assert d["warnings"][0]["msg"] == "Watchdog caught collective operation timeout"


def test_two_nodes_over_infiniband():
    d = nl.parse(FIX / "synthetic_net_two_nodes.log").to_dict()
    assert d["network"] == "IB"
    assert [p["host"] for p in d["processes"]] == ["node1", "node2"]
    assert [(t["kind"], t["direction"]) for t in d["ranks"][0]["transports"]] == [
        ("NET/IB", "receive"), ("NET/IB", "send")]


def test_version_and_env_mismatch_between_processes():
    text = "\n".join([
        info("h", 1, 1, 0, "NCCL version 2.28.9+cuda12.9"), info("h", 2, 2, 1, "NCCL version 2.27.3+cuda12.9"),
        info("h", 1, 1, 0, "NCCL_P2P_DISABLE set by environment to 1."),
        info("h", 1, 1, 0, init_228("ncclCommInitRankConfig", "0xa", 0, 2, 0, 0x1000, 0x5)),
        info("h", 2, 2, 1, init_228("ncclCommInitRankConfig", "0xb", 1, 2, 1, 0x2000, 0x5))]) + "\n"
    d = nl.parse(text).to_dict()
    assert d["version_mismatch"] is True and d["versions"] == {"h:1": "2.28.9", "h:2": "2.27.3"}
    assert d["env_mismatch"] == {"NCCL_P2P_DISABLE": {"h:1": "1", "h:2": None}}


def test_not_an_nccl_log_names_the_file(tmp_path):
    with pytest.raises(nl.NotAnNcclLog, match="synthetic_not_nccl.log"):
        nl.parse(FIX / "synthetic_not_nccl.log")
    with pytest.raises(nl.NotAnNcclLog, match="synthetic_not_nccl.log"):
        nl.parse([TWO / "synthetic_gpu-a.1001.log", FIX / "synthetic_not_nccl.log"])
    (tmp_path / "notes.txt").write_text("nothing here\n")
    with pytest.raises(nl.NotAnNcclLog, match="notes.txt"):
        nl.parse(tmp_path)
    assert issubclass(nl.NotAnNcclLog, ValueError)


def test_missing_path():
    with pytest.raises(FileNotFoundError):
        nl.parse(FIX / "no_such_file.log")
