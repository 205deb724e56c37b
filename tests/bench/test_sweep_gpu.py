"""dtlab.bench.sweep on 2 GPUs (NCCL, CUDA-event timing). Skipped without CUDA; run on a GPU
machine with ``pytest -m gpu tests/bench``."""

import pytest

from dtlab.bench import OPS, busbw, sweep
from dtlab.bench.timing import FAULTS_VAR

from conftest import needs_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_orphans")]


def test_every_op_on_nccl_is_correct_and_reaches_real_bandwidth():
    needs_gpus()
    res = sweep("all", 8, "64M", nprocs=2, backend="nccl", iters=5, warmup=2, timeout=240)
    df = res.frame
    assert list(dict.fromkeys(df["op"])) == list(OPS) and set(df["backend"]) == {"nccl"}
    for op, part in df.groupby("op"):
        for g in ("oop", "ip"):
            checked = part[f"{g}_wrong"].dropna()
            assert (checked == 0).all(), (op, g)
        big = part[part["size"] == part["size"].max()].iloc[0]
        col = "oop" if big["oop_time_us"] == big["oop_time_us"] else "ip"
        # 64 MiB between two GPUs of one host: PCIe gen4 alone gives > 10 GB/s; 1 GB/s would
        # mean broken timing (e.g. events on the wrong stream) or a host-staged path
        assert big[f"{col}_busbw"] > 1.0, (op, big[f"{col}_busbw"])
        assert big[f"{col}_busbw"] == pytest.approx(
            busbw(op, int(big["size"]), big[f"{col}_time_us"] * 1e-6, 2))
        small = part.iloc[0]
        assert 0.5 < small[f"{col}_time_us"] < 10_000, (op, small[f"{col}_time_us"])
    assert res.header["nccl_version"]


def test_wrong_count_catches_corruption_on_gpu(monkeypatch):
    needs_gpus()
    monkeypatch.setenv(FAULTS_VAR, '{"corrupt": 5}')
    df = sweep(["all_reduce", "reduce_scatter", "sendrecv"], "1M", "1M", nprocs=2,
               backend="nccl", iters=2, warmup=1, progress=False, timeout=120).frame
    assert list(df["oop_wrong"].dropna()) == [5, 5] and list(df["ip_wrong"].dropna()) == [5, 5]
