"""Pass 5 (nodes) and the network line shapes, on public multi-node logs and dtlab's own
simulated two-node run: data/public-nccl-multinode (excerpts, provenance in its README) and
data/h200x2-multinode."""

from pathlib import Path

import pytest

import dtlab.nccl_log as nl
from dtlab.nccl_log import net
from dtlab.nccl_log.report import summary

DATA = Path(__file__).resolve().parents[2] / "data"
PUBLIC = DATA / "public-nccl-multinode"


def nodes_of(name):
    return nl.parse(PUBLIC / name).nodes


# ---- line shapes (quoted from the files under data/) ----

@pytest.mark.parametrize("msg, ifs", [
    ("Bootstrap : Using xgbe4:nodea_ip<0>", ["xgbe4:nodea_ip"]),
    ("Bootstrap : Using ib0:10.0.35.1<0>", ["ib0:10.0.35.1"]),
    ("Bootstrap: Using enp3s0f0:10.2.64.94<0>", ["enp3s0f0:10.2.64.94"]),  # 2.25+
    ("Bootstrap : Using [0]ib8:192.168.1.8<0> [1]ib9:192.168.1.9<0>",
     ["ib8:192.168.1.8", "ib9:192.168.1.9"]),
])
def test_bootstrap_interfaces(msg, ifs):
    assert net.classify_net(msg) == ("bootstrap", {"interfaces": ifs})


def test_net_device_lists():
    assert net.net_devices("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.1.2<0>") \
        == {"net": "IB", "devices": ["mlx5_0:1/IB", "mlx5_1:1/IB"], "oob": "eth0:10.0.1.2"}
    assert net.net_devices("NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.1.9<0>")["devices"] \
        == ["mlx5_0:1/RoCE"]
    assert net.net_devices("NET/Socket : Using [0]lo:127.0.0.1<0>")["devices"] == ["lo:127.0.0.1"]
    assert net.net_devices("NET/IB : No device found.") == {"net": "IB", "devices": [], "oob": None}
    assert net.net_devices("NET/IB : Using interface ib0 for sideband communication") is None


def test_gdr_lines_new_and_old():
    assert net.gdr("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)") == {
        "enabled": False, "hca": 0, "name": "mlx5_0", "gpu": None, "why": "no module"}
    old = net.gdr("GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4)")
    assert (old["enabled"], old["gpu"], old["why"]) == (False, "42000", "distance 6 > 4")


@pytest.mark.parametrize("via, expect", [
    ("NET/IB/0/GDRDMA", ("IB", "IB", 0, True)),
    ("NET/IB/3", ("IB", "IB", 3, False)),
    ("NET/IBext_v8/0/GDRDMA", ("IBext_v8", "IB", 0, True)),
    ("NET/Socket/0", ("Socket", "Socket", 0, False)),
    ("NET/IB/1/GDRDMA/Shared", ("IB", "IB", 1, True)),
])
def test_net_via(via, expect):
    v = net.net_via(via)
    assert (v["net"], v["family"], v["dev"], v["gdrdma"]) == expect


# ---- four clusters ----

def test_roce_with_gdrdma_a800_nccl_210():
    n = nodes_of("nccl-tests-133-a800-roce-gdrdma")
    assert (n["n_nodes"], n["n_nodes_from"]) == (2, "hosts seen")  # 2.10 prints no nNodes line
    assert n["hosts"]["nodea"]["bootstrap"] == ["xgbe4:nodea_ip"]
    assert n["hosts"]["nodeb"]["nets"][0]["devices"] == ["mlx5_6:1/RoCE"]
    assert {r: n["rank_host"][r] for r in (4, 5, 12, 13)} == {
        4: "nodea", 5: "nodea", 12: "nodeb", 13: "nodeb"}
    cross = n["cross_node"]
    assert (cross["nets"], cross["nics"], cross["gdrdma"]) == (["NET/IB"], [0], True)
    assert [(p["src"], p["dst"]) for p in cross["pairs"]] == [(5, 12), (13, 4)]
    assert n["within_node"] == ["P2P/direct"]
    ring = n["rings"][0]  # 0 7 6 5 | 12 11 10 9 8 15 14 13 | 4 3 2 1: leaves nodea twice
    assert ring["crossings"] == [[5, 12], [13, 4]]


def test_ib_without_gdrdma_says_why():
    n = nodes_of("nccl-899-ib-no-gdr")
    assert n["rank_host"] == {0: "6a5a91752e39", 1: "21346d5cefce"}
    assert n["cross_node"]["nets"] == ["NET/IB"] and n["cross_node"]["gdrdma"] is False
    whys = {g["why"] for h in n["hosts"].values() for g in h["gdr"]}
    assert whys == {"no module"}  # nvidia-peermem not loaded
    assert n["hosts"]["6a5a91752e39"]["nets"][0]["oob"] == "eth0:10.0.1.2"


def test_socket_across_nodes_shm_inside():
    n = nodes_of("nccl-1232-socket")
    assert n["rank_host"] == {0: "node0", 1: "node2", 2: "node0"}
    assert n["cross_node"]["nets"] == ["NET/Socket"] and n["cross_node"]["gdrdma"] is False
    assert n["within_node"] == ["SHM"]
    assert n["hosts"]["node2"]["bootstrap"] == ["enp10s0:10.10.7.109"]


def test_h100_ib_plugin_with_gdrdma_and_nnodes():
    n = nodes_of("nccl-tests-252-h100-ib-gdrdma")
    assert (n["n_nodes"], n["n_nodes_from"]) == (2, "nNodes line")
    assert n["rank_host"] == {r: "kolyoz1" if r < 4 else "kolyoz2" for r in range(8)}  # table
    assert n["cross_node"]["nets"] == ["NET/IBext_v8"] and n["cross_node"]["gdrdma"] is True
    assert n["within_node"] == ["P2P/CUMEM"]


def test_simulated_nodes_on_one_host():
    """dtlab multinode simulate on 2x H200: nNodes 2, one host name, the ring goes over sockets."""
    n = nl.parse(DATA / "h200x2-multinode").nodes
    assert (n["n_nodes"], list(n["hosts"])) == (2, ["vm"])
    assert n["cross_node"]["nets"] == ["NET/Socket"] and n["cross_node"]["gdrdma"] is False
    assert all(link["crosses_nodes"] is None for link in n["links"])  # host names can't tell
    assert n["rings"][0]["crossings"] == [[0, 1], [1, 0]]
    assert "host hash" in n["notes"][0]


def test_summary_and_json_carry_the_nodes():
    log = nl.parse(PUBLIC / "nccl-899-ib-no-gdr")
    text = summary(log)
    assert "across nodes: NET/IB NIC [0], no GPUDirect RDMA" in text
    assert "GPUDirect RDMA off for mlx5_0 (no module)" in text
    assert log.to_dict()["nodes"]["n_nodes"] == 2


def test_single_node_log_adds_no_node_lines():
    log = nl.parse("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                   "h:1:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n")
    assert log.nodes["n_nodes"] == 1 and log.nodes["cross_node"]["nets"] == []
    assert "nodes:" not in summary(log)
