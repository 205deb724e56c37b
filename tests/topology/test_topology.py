"""dtlab.topology on every recorded topology (facts read off each file by hand), the predictions,
reconciliation with a measured matrix, and `dtlab topo`'s output and bad input."""

import json
import os

import pytest

from dtlab import topology as T
from dtlab.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "data")


def load(name):
    return T.load(os.path.join(DATA, name))


def test_every_recorded_topology_parses():
    names = [f"topologies/{f}" for f in os.listdir(os.path.join(DATA, "topologies"))
             if f.endswith((".txt", ".xml")) and not f.endswith("-p2p.txt")]
    names += ["h200x2-nccl-logs/nvidia-smi-topo.txt", "h200x2-tuning/topo.txt"]
    assert len(names) >= 7
    for name in names:
        t = load(name)
        assert t["gpus"], name
        for a in t["gpus"]:  # every GPU pair has a path, both ways alike
            for b in t["gpus"]:
                if a != b:
                    assert t["links"][(a, b)] == t["links"][(b, a)], (name, a, b)
        json.dumps(T.to_json(t))  # plain data


def test_our_h200s():
    for name in ("h200x2-nccl-logs/nvidia-smi-topo.txt", "h200x2-tuning/topo.txt"):
        t = load(name)
        assert t["gpus"] == ["GPU0", "GPU1"] and t["nics"] == []
        assert t["links"][("GPU0", "GPU1")] == "NV18"
        assert t["numa"] == {"GPU0": 0, "GPU1": 0}
        assert t["affinity"]["GPU1"]["CPU Affinity"] == "0-31"
        assert t["affinity"]["GPU0"]["GPU NUMA ID"] == "N/A"
        (row,) = T.predict_pairs(t)
        assert row["transport"] == "P2P/NVLink" and row["gbps"] == 18 * 25.0


def test_hgx_h100_sglang():
    t = load("topologies/hgx-8xh100-sglang-30401-topo.txt")
    assert len(t["gpus"]) == 8 and len(t["nics"]) == 8
    assert t["links"][("GPU3", "GPU6")] == "NV18"
    assert t["links"][("GPU5", "NIC5")] == "PIX" and t["links"][("GPU5", "NIC1")] == "SYS"
    assert t["links"][("NIC0", "NIC3")] == "NODE"
    assert t["nic_names"]["NIC6"] == "mlx5_6"
    assert t["numa"]["GPU3"] == 0 and t["numa"]["GPU4"] == 1
    assert t["affinity"]["GPU4"]["CPU Affinity"] == "48-95,144-191"
    near = T.nearest_nics(t)
    assert [near[g]["name"] for g in t["gpus"]] == [f"mlx5_{i}" for i in range(8)]
    assert near["GPU7"] == {"nic": "NIC7", "name": "mlx5_7", "kind": "PIX", "gdr": True}
    assert T.slowest_pairs(t) == {"kind": "NV18", "pairs": [[a, b] for i, a in enumerate(t["gpus"])
                                                            for b in t["gpus"][i + 1:]]}


def test_dgx1_v100_old_format():
    t = load("topologies/dgx1-8xv100-pytorch-ddp-readme-topo.txt")
    assert len(t["gpus"]) == 8 and t["nics"] == ["mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1"]
    assert t["links"][("GPU0", "GPU3")] == "NV2" and t["links"][("GPU0", "GPU1")] == "NV1"
    assert t["links"][("GPU0", "GPU5")] == "SYS" and t["links"][("GPU4", "mlx5_3")] == "PHB"
    assert t["numa"]["GPU0"] is None  # this matrix has no NUMA column
    assert T.nearest_nics(t)["GPU6"]["name"] == "mlx5_3"
    worst = T.slowest_pairs(t)
    assert worst["kind"] == "SYS" and ["GPU0", "GPU5"] in worst["pairs"] and len(worst["pairs"]) == 12
    ring = T.ring_bottleneck(t, [f"GPU{i}" for i in range(8)])
    assert ring["hop"] == ["GPU3", "GPU4"] and ring["kind"] == "SYS"
    # a ring through the hybrid cube-mesh's double links only: every hop NV2, the first named
    ring = T.ring_bottleneck(t, ["GPU0", "GPU3", "GPU2", "GPU1", "GPU5", "GPU6", "GPU7", "GPU4"])
    assert ring["kind"] == "NV2" and ring["hop"] == ["GPU0", "GPU3"]
    assert {k for _, _, k in ring["hops"]} == {"NV2"}
    assert T.ring_bottleneck(t, ["GPU0", "GPU1", "GPU3", "GPU2"])["hop"] == ["GPU0", "GPU1"]
    rows = {(r["a"], r["b"]): r for r in T.predict_pairs(t)}
    assert rows[("GPU1", "GPU5")]["gbps"] == 50.0 and rows[("GPU0", "GPU5")]["transport"] == "SHM"


def test_asus_pcie_box_and_its_measured_p2p():
    t = load("topologies/asus-esc8000a-e12-4xrtx6000ada-topo.txt")
    assert t["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"] and len(t["nics"]) == 4
    assert t["links"][("GPU0", "GPU1")] == "NODE" and t["links"][("GPU1", "GPU2")] == "SYS"
    assert t["links"][("NIC2", "NIC3")] == "PIX"
    assert t["numa"] == {"GPU0": 0, "GPU1": 0, "GPU2": 1, "GPU3": 1}
    near = T.nearest_nics(t)
    assert near["GPU3"]["name"] == "mlx5_2" and near["GPU3"]["kind"] == "NODE" and not near["GPU3"]["gdr"]
    assert {r["transport"] for r in T.predict_pairs(t)} == {"SHM"}
    assert {r["transport"] for r in T.predict_pairs(t, p2p_level="SYS")} == {"P2P/PCIe"}
    with open(os.path.join(DATA, "topologies/asus-esc8000a-e12-4xrtx6000ada-p2p.txt")) as f:
        text = f.read()
    p2p = T.parse_p2p_bandwidth_test(text)
    assert len(p2p) == 12 and p2p[("GPU1", "GPU0")] == 26.32 and p2p[("GPU3", "GPU0")] == 26.33
    off = T.parse_p2p_bandwidth_test(text, "Unidirectional P2P=Disabled")
    assert off[("GPU0", "GPU1")] == 22.23
    assert T.parse_p2p_bandwidth_test(text, "Bidirectional P2P=Enabled")[("GPU2", "GPU3")] == 52.12
    # measured as P2P, all pairs alike: with P2P allowed, every pair is as predicted; by NCCL's
    # default (SHM beyond PXB) none is slower, and none can be "faster than its class" (one class)
    rows = T.reconcile(t, p2p, p2p_level="SYS", pcie_gbps=31.5)  # Gen4 x16
    assert {r["verdict"] for r in rows} == {"as predicted"} and len(rows) == 12
    assert all(0.8 < r["ratio"] < 0.85 for r in rows)  # 26.3 of 31.5 GB/s


def test_simai_a100_nccl_xml():
    t = load("topologies/simai-8xa100-4cx6-nccl-topo.xml")
    assert len(t["gpus"]) == 8 and len(t["nics"]) == 5
    assert t["links"][("GPU2", "GPU6")] == "NV12"  # 2 links to each of 6 NVSwitches
    assert t["links"][("GPU5", "NIC3")] == "PXB" and t["links"][("GPU0", "NIC0")] == "PHB"
    assert t["links"][("GPU0", "NIC4")] == "SYS"
    assert t["nic_names"]["NIC0"] == "mlx5_bond_0" and t["nets"]["NIC2"]["speed_gbps"] == 25.0
    assert t["numa"]["GPU3"] == 0 and t["numa"]["GPU4"] == 1
    assert t["cpus"][1]["vendor"] == "GenuineIntel" and t["cpus"][1]["numaid"] == 1
    info = t["gpu_info"]["GPU1"]
    assert info["busid"] == "0000:19:00.0" and info["sm"] == 80 and info["pcie_gen"] == 4
    assert round(info["pcie_gbps"], 1) == 31.5 and info["pcie_width"] == 16
    assert sum(link["count"] for link in t["nvlinks"] if link["gpu"] == "GPU7") == 12
    near = T.nearest_nics(t)
    assert near["GPU0"]["name"] == near["GPU1"]["name"] == "mlx5_bond_1"
    assert near["GPU6"]["name"] == "mlx5_bond_4" and near["GPU6"]["gdr"]


def test_azure_ndv5_pci_only():
    t = load("topologies/azure-ndv5-nccl-topo.xml")
    assert len(t["gpus"]) == 8 and len(t["nics"]) == 8
    assert t["gpu_info"]["GPU3"]["busid"] == "0008:00:00.0"  # GPUs numbered in bus-id order
    assert t["links"][("GPU3", "NIC3")] == "PIX" and t["links"][("GPU0", "GPU1")] == "PHB"
    assert t["links"][("GPU0", "GPU4")] == "SYS"
    assert t["numa"]["GPU4"] == 1 and t["nic_names"]["NIC5"] == "0106:00:00.0"
    assert not t["nvlinks"]  # the file has none: NCCL adds them from NVML at run time


def test_matrix_strips_ansi_and_refuses_junk():
    t = T.parse_topo_matrix("\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tPXB\t0-7\n"
                            "GPU1\tPXB\t X \t0-7\n")
    assert t["links"] == {("GPU0", "GPU1"): "PXB", ("GPU1", "GPU0"): "PXB"}
    with pytest.raises(ValueError, match="not a link kind"):
        T.parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n")
    with pytest.raises(ValueError, match="nvidia-smi topo"):
        T.parse_topo_matrix("hello\nworld\n")
    with pytest.raises(ValueError, match="NCCL topology XML"):
        T.parse("<system><cpu numaid='0'></cpu></system>")
    with pytest.raises(ValueError, match="root element"):
        T.parse("<topology/>")
    deep = "<system><cpu numaid='0'>" + "<pci busid='0'>" * 5000 + "</pci>" * 5000 + "</cpu></system>"
    with pytest.raises(ValueError, match="nested deeper"):  # was a RecursionError
        T.parse(deep)


def test_reconcile_flags_the_slow_pair():
    t = load("topologies/hgx-8xh100-sglang-30401-topo.txt")
    measured = {(i, j): 370.0 for i in range(8) for j in range(8) if i != j}
    measured[(2, 5)] = 120.0  # one direction of one pair degraded
    rows = T.reconcile(t, measured)
    slow = [(r["a"], r["b"]) for r in rows if r["verdict"] == "slower"]
    assert slow == [("GPU2", "GPU5")] and len(rows) == 56
    import pandas as pd

    df = pd.DataFrame([[None, 300.0], [310.0, None]], index=[0, 1], columns=[0, 1])
    rows = T.reconcile(load("h200x2-nccl-logs/nvidia-smi-topo.txt"), df)
    assert [(r["a"], r["b"], r["measured_gbps"]) for r in rows] == [("GPU0", "GPU1", 300.0),
                                                                    ("GPU1", "GPU0", 310.0)]
    with pytest.raises(ValueError, match="not in the topology"):
        T.reconcile(load("h200x2-nccl-logs/nvidia-smi-topo.txt"), {(0, 5): 1.0})


def test_cli_text_json_and_bad_input(capsys, tmp_path):
    path = os.path.join(DATA, "topologies/simai-8xa100-4cx6-nccl-topo.xml")
    assert main(["topo", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"a": "GPU0", "b": "GPU1", "kind": "NV12"} in out["links"]
    assert {"devices", "links", "affinity"} <= set(out) and out["nearest_nic"]["GPU4"]["name"] == "mlx5_bond_3"
    assert main(["topo", os.path.join(DATA, "h200x2-tuning/topo.txt")]) == 0
    text = capsys.readouterr().out
    assert "GPU0: NUMA node 0" in text and "GPU0-GPU1: NV18" in text
    bad = tmp_path / "bad.txt"
    bad.write_text("not a topology\n")
    for argv in (["topo", str(tmp_path / "missing.txt")], ["topo", str(bad)], ["topo", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("dtlab topo: ") and err.count("\n") == 1, err
