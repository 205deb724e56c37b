"""The section-02 helpers of dtlab.bench on this machine: the p2p matrix code on synthetic rows
(named as such), the ceiling parsers on recorded evidence, timing_pitfalls and bucketing on gloo
ranks, and the refusals of --graph / --p2p without CUDA. Run: pytest tests/bench/test_bandwidth_tools.py"""

import os

import matplotlib
import pytest
import torch

import dtlab.bench as bench
from dtlab.cli import main

matplotlib.use("Agg")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOGS = os.path.join(ROOT, "data", "h200x2-nccl-logs")
NO_CUDA = not torch.cuda.is_available()


def synthetic_rows(n=4, slow=((1, 2),)):
    """A synthetic p2p result: 300 GB/s everywhere, 40 GB/s on the `slow` ordered pairs."""
    return [{"src": i, "dst": j, "peer_access": True, "uni_GBps": 40.0 if (i, j) in slow else 300.0,
             "bi_GBps": 560.0, "latency_us": 2.0, "size": 1 << 28}
            for i in range(n) for j in range(n) if i != j]


def test_matrix_slow_pairs_and_heatmap_on_synthetic_rows(tmp_path):
    m = bench.to_matrix(synthetic_rows())
    assert m[0][0] is None and m[1][2] == 40.0 and m[2][1] == 300.0 and len(m) == 4
    assert bench.slow_pairs(synthetic_rows()) == [[1, 2]]
    assert bench.slow_pairs(synthetic_rows(slow=((0, 3), (3, 0)))) == [[0, 3], [3, 0]]
    assert bench.slow_pairs(synthetic_rows(slow=())) == []
    m[2][3] = float("nan")  # not measured: ignored
    assert bench.slow_pairs(m) == [[1, 2]]
    ax = bench.plot_p2p(synthetic_rows(), "uni_GBps", title="synthetic")
    ax.figure.savefig(tmp_path / "p2p.png")
    assert (tmp_path / "p2p.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no 'x' column"):
        bench.to_matrix(synthetic_rows(), "x")


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal without CUDA")
def test_without_cuda_graph_and_p2p_refuse_in_one_line(capsys):
    with pytest.raises(ValueError, match="needs CUDA GPUs"):
        bench.sweep("all_reduce", 8, 64, nprocs=2, backend="gloo", graph=True)
    with pytest.raises(ValueError, match="at least 2 CUDA GPUs"):
        bench.p2p_matrix()
    for argv in (["bench", "--graph", "-e", "1K"], ["bench", "--p2p"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("dtlab bench: ") and err.count("\n") == 1, err


def test_graph_replays_default_to_nccl_tests_g100_and_bad_counts_are_refused():
    from dtlab.bench.engine import GRAPH_LAUNCHES, make_config

    assert GRAPH_LAUNCHES == 100  # what BENCHMARKS.md's nccl-tests runs use (-G 100)
    for given, replays in ((False, 0), (True, GRAPH_LAUNCHES), (1, 1), (7, 7)):
        assert make_config("all_reduce", 8, 64, graph=given).graph == replays
    for bad in (0, -1, 2.5, "100", 10**9):
        with pytest.raises(ValueError, match="graph="):
            make_config("all_reduce", 8, 64, graph=bad)


def test_ceiling_from_recorded_evidence(tmp_path):
    nvl = os.path.join(LOGS, "nvidia-smi-nvlink.txt")
    log = os.path.join(LOGS, "default", "vm.1071.log")
    rates = bench.nvlink_rates(nvl)
    assert sorted(rates) == [0, 1] and len(rates[0]) == 18 and rates[0][0] == 26.562  # signalling
    assert bench.data_rate(26.562) == 25.0 and bench.data_rate(53.1) == 53.1  # datasheet; unknown
    topo = bench.nccl_topology(log)
    assert topo["system_max_bw"] == 370.8
    ring = next(g for g in topo["graphs"] if g["name"] == "ring")
    assert ring["channels"] == 12 and ring["total_intra"] == 360.0
    lines = bench.ceiling_lines(nvl, log)
    assert [round(b, 1) for b, _ in lines] == [450.0, 370.8, 360.0]
    assert "datasheet" in lines[0][1] and "26.562 raw" in lines[0][1]
    nt = bench.to_frame(os.path.join(ROOT, "data", "h200x2-nccl-tests", "nt_all_reduce.txt"))
    bench.plot_ceiling(nt, nvl, log).figure.savefig(tmp_path / "ceiling.png")
    with pytest.raises(ValueError, match="maxBw"):
        bench.nccl_topology("no topology here\n")
    with pytest.raises(ValueError, match="nvidia-smi nvlink"):
        bench.nvlink_rates("GPU? nothing\n")


@pytest.mark.usefixtures("no_orphans")
def test_timing_pitfalls_on_gloo():
    df = bench.timing_pitfalls("all_reduce", "64K", nprocs=2, backend="gloo", iters=6, late_ms=150)
    assert list(dict.fromkeys(df["method"])) == list(bench.pitfalls.METHODS)
    assert len(df) == 10 and (df["time_us"] > 0).all()
    clock = df[df["method"] == "one rank's clock"].set_index("rank")["time_us"]
    # rank 0 waited ~150 ms / 6 calls = 25 ms a call for the late rank 1 inside its own loop;
    # the lag is large beside a busy machine's noise (30 ms once showed as 1.1 ms under load)
    assert clock[0] - clock[1] > 10_000, clock
    dtlab_rows = df[df["method"] == "dtlab"]["time_us"]
    assert dtlab_rows.nunique() == 1  # the MAX over ranks: one figure
    with pytest.raises(ValueError, match="all_reduce, broadcast or sendrecv"):
        bench.timing_pitfalls("all_gather")


@pytest.mark.usefixtures("no_orphans")
def test_bucketing_on_gloo_and_its_prediction():
    df = bench.bucketing("4M", ["4M", "256K", "16K"], nprocs=2, backend="gloo", iters=2, warmup=1)
    assert list(df["n_buckets"]) == [1, 16, 256] and (df["time_us"] > 0).all()
    assert df["time_us"].iloc[2] > df["time_us"].iloc[0]  # 256 fixed costs instead of one
    f = bench.fit(os.path.join(ROOT, "data", "h200x2-nccl-tests", "nt_all_reduce.txt"))
    one, many = bench.bucket_time_us(f, "1G", "1G"), bench.bucket_time_us(f, "1G", "256K")
    assert many == pytest.approx(4096 * f.predict(256 << 10)) and many > 2 * one
    with pytest.raises(ValueError, match="divid"):
        bench.bucketing("1M", ["3K"])
