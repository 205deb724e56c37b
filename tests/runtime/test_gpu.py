"""dtlab.run on real GPUs with NCCL. Skipped without CUDA; run on a 2-GPU machine:

    PYTHONPATH=. python -m pytest -m gpu tests/runtime -q
"""

import subprocess

import pytest
import torch

import dtlab
from rank_fns import raise_on

from conftest import needs_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_orphans")]


def on_my_gpu():
    import torch.distributed as dist

    t = torch.full((1 << 20,), float(dist.get_rank() + 1), device=dtlab.device())
    dist.all_reduce(t)
    return {"device": str(t.device), "current": torch.cuda.current_device(),
            "backend": dist.get_backend(), "sum": t[0].item(), "tensor": t[:4]}


def test_nccl_one_gpu_per_rank_even_after_the_parent_touched_cuda():
    needs_gpus(2)
    torch.zeros(1, device="cuda")  # the parent (a notebook kernel, say) already has a CUDA context
    n = torch.cuda.device_count()
    res = dtlab.run(on_my_gpu)
    assert res.backend == "nccl" and len(res) == n
    for r, v in enumerate(res.values):
        assert v["device"] == f"cuda:{r}" and v["current"] == r and v["backend"] == "nccl"
        assert v["sum"] == n * (n + 1) / 2
        assert v["tensor"].device.type == "cpu"  # CUDA tensors come back on the CPU


def test_nccl_debug_lines_are_captured_at_fd_level():
    needs_gpus(2)
    res = dtlab.run(on_my_gpu, nprocs=2, env={"NCCL_DEBUG": "INFO"})
    for r in (0, 1):
        assert "NCCL INFO" in res[r].stdout + res[r].stderr


def test_nprocs_beyond_gpus_with_nccl_is_refused():
    needs_gpus(1)
    with pytest.raises(dtlab.LaunchError, match="needs"):
        dtlab.run(on_my_gpu, nprocs=torch.cuda.device_count() + 1, backend="nccl")


def gpu_pids():
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return {int(x) for x in p.stdout.split() if x.strip().isdigit()}


def test_failure_on_nccl_stops_the_waiting_rank_and_frees_the_gpus():
    needs_gpus(2)
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(raise_on, 1, nprocs=2, timeout=120)
    assert ei.value.root_rank == 1
    pids = {r.pid for r in ei.value.results}
    assert not (pids & gpu_pids())


def hang_synced():
    import torch.distributed as dist

    t = torch.ones(1, device=dtlab.device())
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.recv(t, src=0)
    return t.item()  # NCCL calls return at once; the host waits here for the GPU


def test_nccl_hang_names_each_ranks_line():
    needs_gpus(2)
    with pytest.raises(dtlab.HangError) as ei:
        dtlab.run(hang_synced, nprocs=2, timeout=20)
    e = ei.value
    assert set(e.stacks) == {0, 1}
    assert "test_gpu.py" in str(e)
    pids = {r.pid for r in e.results}
    assert not (pids & gpu_pids())


def test_pool_on_nccl_keeps_state_and_survives_a_hang():
    needs_gpus(2)
    with dtlab.Pool(nprocs=2) as pool:
        assert pool.backend == "nccl"
        pool.exec("x = torch.full((4,), float(rank + 1), device=device)\ndist.all_reduce(x)")
        pulled = pool.pull("x")
        assert pulled[1].device.type == "cpu" and pulled[1].tolist() == [3.0] * 4
        with pytest.raises(dtlab.HangError) as ei:
            pool.exec("t = torch.ones(1, device=device)\nif rank == 0:\n    dist.all_reduce(t)\n"
                      "t.item()", timeout=15)
        assert ei.value.diagnosis is not None
        assert pool.restarts == 1
        assert pool.exec("torch.cuda.current_device()").values == [0, 1]


def test_nccl_pool_listens_on_loopback_only():
    """The store, NCCL's bootstrap (NCCL_SOCKET_IFNAME=lo by default on one host) and anything
    else the parent or a rank opens: no listener beyond loopback."""
    import psutil

    needs_gpus(2)
    with dtlab.Pool(nprocs=2, backend="nccl") as pool:
        pool.exec("t = torch.ones(1, device=device); dist.all_reduce(t)")
        pids = [psutil.Process().pid] + [s["pid"] for s in pool.status()]
        listening = [(pid, c.laddr) for pid in pids
                     for c in psutil.Process(pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
    assert listening
    assert all(a.ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for _, a in listening), listening
