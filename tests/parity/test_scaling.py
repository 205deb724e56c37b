"""dtlab.parity.scaling on gloo: the throughput frame, the profiler's compute / communication
split, bucket_cap_mb vs all-reduce count, the plot, and bad input (one ValueError, nothing
launched). World sizes 1 and 2 only; the small MLP; ~10 s on 2 CPU cores.

    .venv/bin/python -m pytest tests/parity/test_scaling.py -q --durations=0
"""

import matplotlib
import pytest

from dtlab.parity import scaling
from conftest import assert_no_descendants

matplotlib.use("Agg")
FAST = {"model": "mlp-small", "backend": "gloo", "warmup": 2, "per_rank_batch": 16}


@pytest.fixture(scope="module")
def thr():
    df = scaling.throughput([2], steps=4, **FAST)     # world size 1 is added: the baseline
    assert_no_descendants()
    return df


@pytest.fixture(scope="module")
def bkt():
    return scaling.buckets([0.005, 0.02, 25], nprocs=2, steps=3, **FAST)


def test_throughput_frame(thr):
    assert list(thr.columns) == ["nranks", "backend", "global_batch", "step_ms", "samples_per_s",
                                 "allreduce_calls", "efficiency", "threads_per_rank"]
    assert list(thr.nranks) == [1, 2] and set(thr.backend) == {"gloo"}
    assert list(thr.global_batch) == [16, 32]                  # weak scaling: per-rank batch fixed
    assert thr.efficiency.iloc[0] == 1.0
    assert (thr.samples_per_s > 0).all() and (thr.efficiency > 0).all()
    row = thr.iloc[1]
    assert row.samples_per_s == pytest.approx(2 * 16 / (row.step_ms / 1e3))
    assert (thr.allreduce_calls >= 1).all()                    # DDP all-reduces even at n=1


def test_fewer_allreduces_as_buckets_grow(bkt):
    calls = list(bkt.allreduce_calls)
    assert calls == sorted(calls, reverse=True) and calls[0] > calls[-1] and calls[-1] == 1
    assert (bkt.step_ms > 0).all() and list(bkt.bucket_cap_mb) == [0.005, 0.02, 25]


def test_profile_split_fields():
    out = scaling.profile_split(2, steps=2, **FAST)
    for k in ("compute_ms", "comm_ms", "overlap_ms", "exposed_comm_ms", "step_ms"):
        assert out[k] >= 0, k
    assert out["device"] == "cpu" and out["comm_events"] >= 2      # gloo:all_reduce + enqueue
    assert out["compute_ms"] > 0 and out["comm_ms"] > 0
    assert out["overlap_ms"] <= out["comm_ms"]


def test_split_arithmetic():
    ev = [("aten::mm", 1, 0, 10), ("aten::add", 1, 2, 4),        # nested: counts once
          ("c10d::allreduce_", 1, 10, 11), ("aten::copy_", 1, 10, 11),  # inside comm: not compute
          ("gloo:all_reduce", 2, 5, 15), ("aten::mm", 1, 12, 20)]
    out = scaling.split(ev, steps=1)
    assert out["compute_ms"] == pytest.approx(18 / 1000)
    assert out["comm_ms"] == pytest.approx(10 / 1000)               # union of [5,15] and [10,11]
    assert out["overlap_ms"] == pytest.approx(8 / 1000)             # [5,10] + [12,15]
    assert scaling.split([], steps=1)["comm_ms"] == 0


def test_plot(thr, bkt):
    fig = scaling.plot(thr, bkt)
    assert len(fig.axes) == 3                                      # efficiency; buckets + twin
    assert fig.axes[0].get_ylabel() == "scaling efficiency"
    fig = scaling.plot(prof={"compute_ms": 3.0, "comm_ms": 2.0, "overlap_ms": 0.5, "nranks": 2})
    fig.canvas.draw()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "compute", "all-reduce, overlapped", "all-reduce, exposed"]
    assert [b.get_width() for b in ax.patches] == [3.0, 0.5, 1.5]


@pytest.mark.parametrize("call, says", [
    (lambda: scaling.throughput([0, 2]), "nranks_list"),
    (lambda: scaling.throughput(2), "nranks_list"),
    (lambda: scaling.throughput([2], model="resnet"), "model="),
    (lambda: scaling.throughput([2], steps=0), "steps="),
    (lambda: scaling.throughput([2], per_rank_batch=-1), "per_rank_batch"),
    (lambda: scaling.throughput([2], backend="mpi"), "backend="),
    (lambda: scaling.buckets([0, 25]), "bucket_cap_mb"),
    (lambda: scaling.buckets([]), "caps is empty"),
    (lambda: scaling.plot(), "plot needs"),
])
def test_bad_input_is_one_value_error(call, says):
    with pytest.raises(ValueError, match=says):
        call()


def test_cli_scaling_refuses_a_bug(capsys):
    from dtlab import cli

    assert cli.main(["parity", "--scaling", "--bug", "sum_loss"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtlab parity: ") and "--scaling" in err and err.count("\n") == 1


def test_report_has_every_part_and_its_provenance(monkeypatch, thr, bkt):
    """report() assembles the parts (each measured by the tests above) without launching again."""
    from dtlab.parity import unused

    monkeypatch.setattr(scaling, "throughput", lambda *a, **k: thr)
    monkeypatch.setattr(scaling, "buckets", lambda *a, **k: bkt)
    monkeypatch.setattr(scaling, "profile_split", lambda n, **k: {"nranks": n, "overlap_ms": 1.0,
                                                                   "comm_ms": 4.0})
    monkeypatch.setattr(unused, "cost", lambda n, **k: {"nranks": n, "ratio": {}})
    rep = scaling.report([1, 2], backend="gloo", model="mlp-small", command="pytest")
    assert set(rep) == {"model", "throughput", "profile", "buckets", "find_unused", "provenance"}
    assert rep["model"] == scaling.model_size("mlp-small") and rep["model"]["params"] == 17290
    assert [r["nranks"] for r in rep["throughput"]] == [1, 2]
    assert "efficiency" in rep["throughput"][0]
    assert rep["profile"]["nranks"] == rep["find_unused"]["nranks"] == 2
    assert rep["provenance"]["command"] == "pytest" and rep["provenance"]["torch"]
    json_ok = __import__("json").dumps(rep, default=str)
    assert "bucket_cap_mb" in json_ok


def test_overlap_fraction_is_overlap_over_comm(monkeypatch):
    import dtlab.runtime.launch as launch

    class Fake:
        values = [{"events": [("gloo:all_reduce", 2, 0, 10), ("aten::mm", 1, 5, 20)],
                   "wall_s": 0.04, "device": "cpu"}]

    monkeypatch.setattr(launch, "run", lambda *a, **k: Fake)
    out = scaling.profile_split(2, steps=2, model="mlp-small", backend="gloo")
    assert out["overlap_fraction"] == pytest.approx(out["overlap_ms"] / out["comm_ms"]) == 0.5
    assert out["exposed_comm_ms"] == pytest.approx(out["comm_ms"] - out["overlap_ms"])


@pytest.mark.parametrize("model", list(scaling.MODELS))
def test_model_size_counts_what_build_builds(model):
    net = scaling.build(model)
    assert sum(p.numel() for p in net.parameters()) == scaling.model_size(model)["params"]
    assert scaling.model_size(model)["grad_mib"] == round(4 * scaling.model_size(model)["params"]
                                                          / 2**20, 4)


def test_report_keep_going_records_a_failed_part(monkeypatch, thr, bkt):
    from dtlab.parity import unused

    def broken(*a, **k):
        raise RuntimeError("Traceback ...\nRuntimeError: NCCL error: unhandled system error")

    monkeypatch.setattr(scaling, "throughput", lambda *a, **k: thr)
    monkeypatch.setattr(scaling, "buckets", lambda *a, **k: bkt)
    monkeypatch.setattr(scaling, "profile_split", broken)
    monkeypatch.setattr(unused, "cost", lambda n, **k: {"nranks": n})
    with pytest.raises(RuntimeError, match="NCCL error"):
        scaling.report([1, 2], backend="gloo", model="mlp-small")
    rep = scaling.report([1, 2], backend="gloo", model="mlp-small", keep_going=True)
    assert rep["profile"] == {"error": "RuntimeError: NCCL error: unhandled system error"}
    assert rep["find_unused"] == {"nranks": 2} and len(rep["buckets"]) == 3
