"""dtlab check --level full: the affinity and ring verdicts held to recorded `nvidia-smi topo -m`
outputs (our 2x H200, data/h200x2-topology; public ones, data/topologies, with their provenance),
healthy and with a constructed fault; a duplicate GPU named from NCCL's own wording; the full
level on this CPU machine (the GPU rows SKIP and say why); and `python -m dtlab.check` under
torchrun running the cross-node part."""

import json
import os
import subprocess
import sys

import pytest
from conftest import assert_no_descendants

from dtlab.check import FAIL, PASS, SKIP, WARN
from dtlab.check import checks as C
from dtlab.check import full as F
from dtlab.check.__main__ import under_torchrun
from dtlab.check.failures import name_failure
from dtlab.topology import load

H200 = "data/h200x2-topology/nvidia-smi-topo.txt"        # 2x H200 NV18, one NUMA node, CPUs 0-31
HGX = "data/topologies/hgx-8xh100-sglang-30401-topo.txt"  # 8x H100, GPU0-3 NUMA 0, GPU4-7 NUMA 1
DGX1 = "data/topologies/dgx1-8xv100-pytorch-ddp-readme-topo.txt"  # hybrid cube-mesh, no NUMA column
ASUS = "data/topologies/asus-esc8000a-e12-4xrtx6000ada-topo.txt"  # PCIe only, 2 NUMA nodes
NODE0, NODE1 = F.cpu_list("0-47,96-143"), F.cpu_list("48-95,144-191")  # HGX's two nodes' CPUs


def test_healthy_recorded_machines_pass():
    t = load(H200)
    assert F.affinity_verdict(t, t["gpus"], [F.cpu_list("0-31")] * 2, {})[0] == PASS
    t = load(HGX)  # each rank pinned to its GPU's node (torchrun --numa-binding): PASS
    verdict, said, warns = F.affinity_verdict(t, t["gpus"], [NODE0] * 4 + [NODE1] * 4, {})
    assert verdict == PASS and not warns
    assert "GPU4: nearest NIC mlx5_4 (PIX, GPUDirect RDMA)" in said
    # unpinned (the default) is no fault: said, not warned
    assert F.affinity_verdict(t, t["gpus"], [NODE0 | NODE1] * 8, {})[0] == PASS


def test_a_rank_on_the_wrong_numa_node_warns_and_is_named():
    t = load(HGX)
    verdict, _, warns = F.affinity_verdict(t, t["gpus"], [NODE0] * 4 + [NODE1, NODE0, NODE1, NODE1], {})
    assert verdict == WARN and len(warns) == 1 and warns[0].startswith("rank 5 on GPU5 runs on CPUs 0-47,96-143")
    t = load(ASUS)  # GPU2 is on NUMA node 1 (CPUs 32-63): a rank on 0-31 is on the wrong one
    verdict, _, warns = F.affinity_verdict(t, t["gpus"][:3], [F.cpu_list("0-31")] * 3, {})
    assert verdict == WARN and "rank 2 on GPU2" in warns[0] and "NUMA node 1" in warns[0]


def test_a_nic_across_the_smp_interconnect_while_a_closer_one_exists_warns():
    """NCCL_IB_HCA=mlx5_0 on an 8-GPU box: GPU4-7 would reach their only allowed NIC over SYS,
    though each has its own on its PCIe switch."""
    for path, closer in ((HGX, "mlx5_4 is PIX"), (DGX1, "mlx5_2 is PIX")):
        t = load(path)
        verdict, _, warns = F.affinity_verdict(t, t["gpus"], [None] * 8, {"NCCL_IB_HCA": "mlx5_0"})
        assert verdict == WARN and len(warns) == 4 and warns[0].startswith("GPU4: nearest NIC mlx5_0 (SYS")
        assert closer in warns[0]
        assert F.affinity_verdict(t, t["gpus"], [None] * 8, {"NCCL_IB_HCA": "^mlx5_0"})[0] == PASS
    assert F.allowed_nics(load(HGX), {"NCCL_IB_HCA": "=mlx5_1,mlx5_2:1"}) == ["NIC1", "NIC2"]


def test_what_the_matrix_does_not_say_is_unsure_not_guessed():
    t = load(DGX1)  # CPU Affinity printed, no NUMA column
    verdict, said, _ = F.affinity_verdict(t, ["GPU0", "GPU4"], [None, None], {})
    assert verdict == PASS and all("not known (unsure)" in s for s in said[:2])
    t = load(H200)
    for g in t["gpus"]:
        t["affinity"][g]["CPU Affinity"] = "N/A"
    assert "no CPU affinity" in F.affinity_verdict(t, ["GPU0"], [{0}], {})[1][0]
    # then the NUMA node's CPUs, from the kernel's node list, decide
    assert F.affinity_verdict(t, ["GPU0"], [{40}], {}, node_cpus={0: set(range(32)),
                                                                    1: set(range(32, 64))})[0] == WARN


@pytest.mark.parametrize("busbw, verdict", [
    (327.5, PASS),   # dtlab check, clean: data/h200x2-check/check_clean.txt
    (27.2, WARN),    # NCCL_P2P_DISABLE=1: data/h200x2-check/check_p2p_off.txt -- not the links
    (None, SKIP),    # no measurement to hold the ring to
])
def test_the_ring_over_the_h200_pair(busbw, verdict):
    got, x = F.ring_verdict(load(H200), ["GPU0", "GPU1"], busbw, C.PASS_FRACTION)
    assert got == verdict and x["kind"] == "NV18" and x["gbps"] == 450.0


def test_the_ring_finds_the_slowest_hop_and_says_when_unsure():
    t = load(DGX1)  # NCCL's DGX-1 rings run on the NV2 links: one exists through all 8 GPUs
    order, how = F.ring_order(t, t["gpus"])
    verdict, x = F.ring_verdict(t, t["gpus"], 130.0, C.PASS_FRACTION)
    assert order[0] == "GPU0" and sorted(order) == t["gpus"] and x["kind"] == "NV2"
    assert verdict == PASS and "unsure" in x["note"]  # more than one ring's 50 GB/s: channels
    t = load(ASUS)  # PCIe only: the ring must cross the SMP interconnect, through host memory
    verdict, x = F.ring_verdict(t, t["gpus"], 20.0, C.PASS_FRACTION)
    assert (verdict, x["kind"], x["transport"]) == (SKIP, "SYS", "SHM") and "no rate" in x["note"]
    assert F.ring_verdict(t, t["gpus"], 20.0, C.PASS_FRACTION, pcie_gbps=31.5)[0] == PASS


# NCCL's wording (src/init.cc: "Duplicate GPU detected : rank %d and rank %d both on CUDA device
# %lx"), inside the message torch raises for ncclInvalidUsage; constructed, not recorded
DUPLICATE = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, "
             "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
             "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
             "Last error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 60")


def test_a_duplicate_gpu_is_named_not_a_generic_failure():
    class RankError(RuntimeError):  # as dtlab.RankError: the rank's traceback in .failures
        failures = {1: "Traceback ...\ntorch.distributed.DistBackendError: " + DUPLICATE}

    row = C.could_not_run("collectives", 0.0, RankError("rank 1 failed (root cause)"))
    assert row.verdict == FAIL and row.measured.startswith(
        "could not run: duplicate GPU: ranks 1 and 0 both on the GPU at PCI 0000:00:06.0")
    assert "CUDA_VISIBLE_DEVICES" in row.todo
    assert "hidden" in name_failure("RuntimeError: CUDA error: invalid device ordinal")[0]
    assert name_failure("NCCL error: unhandled system error") is None
    assert C.could_not_run("x", 0.0, RuntimeError("boom\nmore")).measured == \
        "could not run: RuntimeError: boom"


def test_the_duplicate_gpu_report_shows_what_each_rank_was_shown():
    from dtlab.multinode.check import render
    from dtlab.multinode.world import check_world

    gpu = {"name": "NVIDIA H200", "uuid": "GPU-a", "bus_id": "0000:00:06.0"}
    table = [dict(rank=r, world_size=2, node=0, local_rank=r, local_world_size=2, host="h",
                  nic="lo", address="127.0.0.1", device="cuda:0", gpu=gpu) for r in range(2)]
    table[1].update(cuda_visible_devices="0", device_note="LOCAL_RANK 1 but 1 GPU(s) visible "
                    "(CUDA_VISIBLE_DEVICES=0): took cuda:0")
    text = render({**check_world(table), "ranks": table, "pairs": []})
    assert "duplicate gpus: [[0, 1]]" in text
    assert "rank 0 CUDA_VISIBLE_DEVICES=(unset); rank 1 CUDA_VISIBLE_DEVICES=0 (LOCAL_RANK 1" in text


def test_the_full_level_on_this_machine(monkeypatch):
    """The levels' rows in order; on the CPU the three full rows SKIP, each saying why (the
    quick and standard rows are tested in test_check.py: stubbed here to keep this short)."""
    for fn, row in (("collectives", "collectives"), ("failure_path", "failure"), ("parity", "parity")):
        monkeypatch.setattr(C, fn, lambda nprocs, backend, n=row: C.row(n, 0.0, PASS, "stub"))
    rep = C.run("full")
    rows = {r.check: r for r in rep.rows}
    assert list(rows) == ["software", "gpus", "collectives", "bandwidth", "failure", "p2p",
                          "latency", "parity", "affinity", "ring", "multinode"]
    assert rows["affinity"].verdict == SKIP and "no GPU" in rows["affinity"].measured
    assert rows["ring"].verdict == SKIP and "no GPU ring" in rows["ring"].measured
    assert rows["multinode"].verdict == SKIP and "-m dtlab.check" in rows["multinode"].todo


@pytest.mark.slow
def test_python_m_dtlab_check_under_torchrun_is_the_cross_node_part(tmp_path):
    assert under_torchrun({"TORCHELASTIC_RUN_ID": "x", "RANK": "0"})
    assert not under_torchrun({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "DTLAB_BACKEND": "gloo"})
    out = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    p = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "dtlab.check",
                        "--iters", "5", "--bytes", "4096", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["ranks_present"] == 2 and [m["kind"] for m in rep["pairs"]] == ["within"]
    assert_no_descendants()
