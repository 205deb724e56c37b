"""Every recorded real NCCL log in data/*nccl-log*/ parses, and shows what we know of the run
(see each capture's README: NCCL 2.28.9, torch 2.11, 2 GPUs, one file per process)."""

from pathlib import Path

import pytest

import dtlab.nccl_log as nl

DATA = Path(__file__).resolve().parents[2] / "data"
RUNS = sorted(d for cap in DATA.glob("*nccl-log*") if cap.is_dir()
              for d in cap.iterdir() if d.is_dir() and any(d.glob("*.log")))

pytestmark = pytest.mark.skipif(not RUNS, reason="no recorded NCCL logs in data/*nccl-log*/")


def run(name):
    found = [d for d in RUNS if d.name == name]
    if not found:
        pytest.skip(f"no recorded run {name!r} in data/")
    return nl.parse(found[0]).to_dict()


@pytest.mark.parametrize("folder", RUNS, ids=[f"{d.parent.name}/{d.name}" for d in RUNS])
def test_every_recorded_run(folder):
    d = nl.parse(folder).to_dict()
    assert (d["nccl_version"], d["version_mismatch"], d["world_size"]) == ("2.28.9", False, 2)
    assert [p["rank"] for p in d["processes"]] == [0, 1]
    assert len(d["ranks"]) == 2 and d["ranks"][0]["comm_id"] == d["ranks"][1]["comm_id"]
    assert d["ranks"][0]["n_channels"] == d["ranks"][1]["n_channels"] > 0
    assert all(r["transports"] for r in d["ranks"])
    assert d["env"]["NCCL_NVLS_ENABLE"] == "0"  # the capture keeps NVLink multicast off
    assert d["network"] == "Socket"
    assert all(d["collectives"][r] for r in (0, 1))
    # ranks line up by position; opCounts, where they are not all 0, must agree with that
    opcounts = [c["opcount"] for cs in d["collectives"].values() for c in cs]
    if any(opcounts):
        assert d["alignment"]["opcount"] == {"used": True, "agrees": True}
    else:
        assert d["alignment"]["opcount"]["used"] is False
    assert d["tuning"], "rank 0 prints the tuning table with NCCL_DEBUG_SUBSYS=TUNING"
    assert all(r["init_time_s"] > 0 for r in d["ranks"])


def kinds(d, conn=0):
    return {t["kind"] for r in d["ranks"] for t in r["transports"] if t["conn_index"] in (conn, None)}


def test_default_run_uses_p2p_over_nvlink_and_logs_opcount_0():
    d = run("default")
    assert kinds(d) == {"P2P/CUMEM"}
    assert {c["opcount"] for cs in d["collectives"].values() for c in cs} == {0}
    assert d["ranks"][0]["n_channels"] == 24
    assert d["divergence"] is None
    ops0 = [c["op"] for c in d["collectives"][0]]
    assert "Send" in ops0 and "Recv" in [c["op"] for c in d["collectives"][1]]
    assert all(c.get("algorithm") for c in d["collectives"][0] if not c.get("p2p"))


def test_p2p_disabled_falls_back_to_shared_memory():
    d = run("p2p_disabled")
    assert d["env"]["NCCL_P2P_DISABLE"] == "1"
    assert kinds(d) == {"SHM"}
    assert d["divergence"] is None


def test_p2p_and_shm_disabled_goes_through_the_network():
    d = run("net_socket")
    assert (d["env"]["NCCL_P2P_DISABLE"], d["env"]["NCCL_SHM_DISABLE"]) == ("1", "1")
    assert kinds(d) == {"NET/Socket"}
    # measured: with a network transport the same torch calls log opCount 0, 1, 2, ...
    assert [c["opcount"] for c in d["collectives"][1]] == list(range(len(d["collectives"][1])))
    assert d["alignment"]["opcount"] == {"used": True, "agrees": True}


def test_forced_tree_ll_and_the_error_it_caused():
    d = run("tree_ll")
    assert (d["env"]["NCCL_ALGO"], d["env"]["NCCL_PROTO"]) == ("Tree", "LL")
    chosen = {(c["algorithm"], c["protocol"]) for c in d["collectives"][0] if c.get("algorithm")}
    assert chosen == {("Tree", "LL")}
    assert any("no algorithm/protocol available" in w["msg"] for w in d["warnings"])
    assert {e["name"] for e in d["errors"]} == {"ncclInvalidUsage"}
    assert [Path(s).name for s in d["skipped_sources"]] == ["dtlab-error.txt"]


def test_count_mismatch_is_found_at_the_third_call():
    d = run("count_mismatch")
    div = d["divergence"]
    assert (div["position"], div["reason"], div["ranks"]) == (3, "count", [0, 1])
    assert (div["calls"][0]["count"], div["calls"][1]["count"]) == (16777216, 16777217)


def test_two_simulated_nodes_talk_through_sockets():
    """data/h200x2-multinode: dtlab multinode simulate, one GPU per node, P2P and SHM off."""
    d = nl.parse(DATA / "h200x2-multinode").to_dict()
    assert (d["nccl_version"], d["world_size"], d["network"]) == ("2.28.9", 2, "Socket")
    assert (d["env"]["NCCL_P2P_DISABLE"], d["env"]["NCCL_SHM_DISABLE"]) == ("1", "1")
    assert kinds(d) == {"NET/Socket"}
    assert [p["rank"] for p in d["processes"]] == [0, 1]
