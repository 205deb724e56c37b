"""CUDA-graph sweeps, the p2p matrix and bucketing on real GPUs. Skipped without CUDA; run on a
2-GPU machine with ``pytest -m gpu tests/bench/test_graph_p2p_gpu.py``."""

import pytest
import torch

import dtlab.bench as bench

from conftest import needs_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_orphans")]


def test_graph_sweep_is_correct_and_not_slower_than_eager():
    needs_gpus()
    kw = dict(nprocs=2, backend="nccl", iters=20, warmup=5, progress=False, timeout=180)
    eager = bench.sweep(["all_reduce", "sendrecv"], 8, "64K", **kw).frame
    graphed = bench.sweep(["all_reduce", "sendrecv"], 8, "64K", graph=True, **kw)
    assert graphed.header["graph"] == bench.engine.GRAPH_LAUNCHES  # as nccl-tests -G 100
    graph = graphed.frame
    for op in ("all_reduce", "sendrecv"):
        g, e = graph[graph["op"] == op], eager[eager["op"] == op]
        col = "ip" if op == "all_reduce" else "oop"
        assert (g[f"{col}_wrong"].dropna() == 0).all()
        # the replay drops torch's per-call host cost: never slower than eager by more than noise
        assert g[f"{col}_time_us"].median() < 1.1 * e[f"{col}_time_us"].median(), (op, g, e)


def test_p2p_matrix_and_bucketing_on_two_gpus():
    needs_gpus()
    df = bench.p2p_matrix(size="64M", iters=5)
    assert len(df) == torch.cuda.device_count() * (torch.cuda.device_count() - 1)
    assert (df["uni_GBps"] > 1).all() and (df["bi_GBps"] > df["uni_GBps"] * 0.9).all()
    assert (df["latency_us"] > 0).all()
    b = bench.bucketing("256M", ["256M", "4M", "256K"], nprocs=2, backend="nccl", iters=2)
    assert b["time_us"].iloc[2] > b["time_us"].iloc[0]
