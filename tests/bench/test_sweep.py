"""dtlab.bench.sweep on 2 gloo ranks: every op, the N/A columns, the #wrong check (and that it can
fail), unsupported ops, the pool path, and ``dtlab bench``. Small sizes: each launch takes a few
seconds on 2 CPU cores."""

import json
import math

import pandas as pd
import pytest
import torch

import dtlab
from dtlab.bench import (FRAME_COLUMNS, OPS, busbw, coll_shape, parse_nccl_tests_all,
                         render_text, sweep, sweep_sizes, to_reports)
from dtlab.bench.timing import FAULTS_VAR, is_unsupported, pattern, summed
from dtlab.cli import main

FAST = dict(nprocs=2, backend="gloo", iters=3, warmup=1, timeout=60)
OOP_NA = {"all_reduce", "broadcast", "reduce"}        # torch API is in-place only
IP_UNCHECKED = {"all_to_all", "sendrecv"}               # nccl-tests prints N/A there too


@pytest.fixture(scope="module")
def every_op():
    """One launch for all seven ops, 8 B .. 4 KiB (module-scoped: the slow part, run once; it
    checks for left-behind processes itself, as the no_orphans fixture does per test)."""
    from conftest import assert_no_descendants

    res = sweep("all", 8, "4K", **FAST)
    assert_no_descendants()
    return res


def test_every_op_runs_and_checks_clean(every_op):
    df = every_op.frame
    assert list(df.columns) == FRAME_COLUMNS
    assert list(dict.fromkeys(df["op"])) == list(OPS)
    assert set(df["backend"]) == {"gloo"} and set(df["nranks"]) == {2}
    for op, part in df.groupby("op"):
        oop_ok = op not in OOP_NA
        assert part["oop_time_us"].notna().all() == oop_ok, op
        assert part["oop_time_us"].isna().all() != oop_ok, op
        assert part["ip_time_us"].notna().all(), op
        if oop_ok:
            assert (part["oop_wrong"] == 0).all(), op
        if op in IP_UNCHECKED:
            assert part["ip_wrong"].isna().all(), op
        else:
            assert (part["ip_wrong"] == 0).all(), op


def test_sizes_counts_and_bandwidths_follow_nccl_tests(every_op):
    df = every_op.frame
    for op, part in df.groupby("op"):
        want = [coll_shape(op, s, 2, 4) for s in sweep_sizes(8, "4K")]
        want = [w for w in want if w.size]
        assert list(part["size"]) == [w.size for w in want], op
        assert list(part["count"]) == [w.count for w in want], op
        for _, r in part.iterrows():
            for g in ("oop", "ip"):
                t = r[f"{g}_time_us"]
                if not math.isnan(t):
                    assert r[f"{g}_busbw"] == pytest.approx(busbw(op, r["size"], t * 1e-6, 2))
    skipped = every_op.skipped
    assert ("all_gather", 8) in skipped and ("all_gather", 16) in skipped  # 0 B after rounding
    assert not any(op == "all_reduce" for op, _ in skipped)
    assert df.loc[df["op"] == "broadcast", "root"].eq(0).all()
    assert df.loc[df["op"] == "all_gather", "redop"].eq("none").all()


def test_text_json_and_csv_outputs(every_op, tmp_path):
    text = render_text(every_op)
    reps = parse_nccl_tests_all(text)
    assert [r["header"]["op"] for r in reps] == list(OPS)
    assert all(r["trailer"]["out_of_bounds_ok"] for r in reps)
    for printed, exact in zip(reps, to_reports(every_op)):
        assert len(printed["rows"]) == len(exact["rows"]) > 0
        for a, b in zip(printed["rows"], exact["rows"]):
            assert (a["size"], a["count"], a["ip"]["wrong"]) == (b["size"], b["count"], b["ip"]["wrong"])
            assert a["ip"]["time_us"] == pytest.approx(b["ip"]["time_us"], abs=0.5)
    assert json.loads(json.dumps(to_reports(every_op)))[0]["rows"][0]["oop"]["time_us"] is None
    path = tmp_path / "sweep.csv"
    every_op.frame.to_csv(path, index=False)
    back = pd.read_csv(path)
    assert list(back.columns) == FRAME_COLUMNS and len(back) == len(every_op.frame)


def test_the_result_is_a_report_and_goes_where_a_frame_goes(every_op):
    """to_dict()/render() are what `dtlab bench --json` / `dtlab bench` print; the functions
    that read a sweep take the result or its bare frame (no header then: nothing rides on
    DataFrame.attrs)."""
    import matplotlib

    from dtlab import bench
    from dtlab.reporting import Report

    matplotlib.use("Agg")
    assert isinstance(every_op, Report) and every_op.render() == render_text(every_op)
    assert every_op.to_dict() == to_reports(every_op)
    assert every_op.to_dict()[0]["header"]["backend"] == "gloo" == every_op.header["backend"]
    assert bench.to_frame(every_op) is every_op.frame and not every_op.frame.attrs
    assert to_reports(every_op.frame)[0]["header"]["tool"] == "dtlab bench"
    assert len(bench.plot(every_op).lines) == len(bench.plot(every_op.frame).lines) > 0
    frame = every_op.frame[every_op.frame["op"] == "all_reduce"].copy()
    for g in ("oop", "ip"):  # times that grow with size, as on a quiet machine: fit() needs it
        frame[f"{g}_time_us"] = frame[f"{g}_time_us"].where(frame[f"{g}_time_us"].isna(),
                                                              5 + frame["size"] / 1e4)
    ar = type(every_op)(frame)
    assert bench.fit(ar).alpha_us == bench.fit(ar.frame).alpha_us


def test_faults_come_only_from_their_variable(monkeypatch):
    import inspect

    import dtlab.tuning
    from dtlab.bench.timing import faults

    for fn in (sweep, dtlab.tuning.sweep):
        assert not [p for p in inspect.signature(fn).parameters if p.startswith("_")]
    monkeypatch.delenv(FAULTS_VAR, raising=False)
    assert faults() == {}
    monkeypatch.setenv(FAULTS_VAR, '{"corrupt": 2}')
    assert faults() == {"corrupt": 2}
    monkeypatch.setenv(FAULTS_VAR, "[1]")
    with pytest.raises(ValueError, match=FAULTS_VAR):
        faults()


@pytest.mark.usefixtures("no_orphans")
def test_wrong_count_catches_a_corrupted_result(monkeypatch):
    monkeypatch.setenv(FAULTS_VAR, json.dumps({"corrupt": 3}))
    res = sweep(["all_reduce", "all_gather", "reduce", "alltoall"], 64, 128, progress=False,
                **FAST)
    df = res.frame
    assert "all_to_all" in set(df["op"]) and "alltoall" not in set(df["op"])  # torch's name out
    for _, r in df.iterrows():
        for g in ("oop", "ip"):
            if pd.notna(r[f"{g}_time_us"]) and not (g == "ip" and r["op"] in IP_UNCHECKED):
                assert r[f"{g}_wrong"] == 3, (r["op"], g)
    assert "FAILED" in render_text(res) and "FAILED" in res.render()


@pytest.mark.usefixtures("no_orphans")
def test_unsupported_op_is_reported_not_fatal(capsys, monkeypatch):
    monkeypatch.setenv(FAULTS_VAR, json.dumps({"unsupported": ["reduce_scatter"]}))
    res = sweep(["reduce_scatter", "broadcast"], 64, 128, **FAST)
    df = res.frame
    assert set(df["op"]) == {"broadcast"} and (df["ip_wrong"] == 0).all()
    why = res.unsupported["reduce_scatter"]
    assert set(why) == {"oop", "ip"} and "does not support" in why["oop"]
    assert "reduce_scatter: out-of-place unsupported on gloo" in capsys.readouterr().out
    assert "unsupported on gloo" in render_text(res)
    assert "unsupported on gloo" in res.to_dict()[-1]["header"]["warnings"][0]


@pytest.mark.usefixtures("no_orphans")
def test_pool_path_calls_pool_run():
    class RecordingPool:  # the dtlab.Pool contract: run(fn, *args, timeout=) -> Results
        calls = []

        def run(self, fn, *args, timeout=None):
            self.calls.append((fn.__name__, timeout))
            return dtlab.run(fn, *args, nprocs=2, backend="gloo", timeout=timeout)

    pool = RecordingPool()
    df = sweep("sendrecv", 64, 64, pool=pool, progress=False, iters=2, warmup=0,
               timeout=45).frame
    assert pool.calls == [("run_sweep", 45)]
    assert list(df["size"]) == [64] and df["oop_wrong"].iloc[0] == 0


@pytest.mark.usefixtures("no_orphans")
def test_cli_bench_json_csv_plot(tmp_path, capsys):
    csv, png = tmp_path / "b.csv", tmp_path / "b.png"
    rc = main(["bench", "--op", "broadcast,reduce_scatter", "-b", "64", "-e", "256", "-n", "2",
               "-w", "0", "--nprocs", "2", "--backend", "gloo", "--json", "--csv", str(csv),
               "--plot", str(png)])
    assert rc == 0
    reps = json.loads(capsys.readouterr().out)
    assert [r["header"]["op"] for r in reps] == ["broadcast", "reduce_scatter"]
    assert [r["size"] for r in reps[1]["rows"]] == [64, 128, 256]
    assert reps[0]["header"]["tool"] == "dtlab bench" and reps[0]["header"]["backend"] == "gloo"
    assert len(pd.read_csv(csv)) == 6 and png.stat().st_size > 5000


@pytest.mark.parametrize("kwargs, words", [
    (dict(op="allreduce2"), "is not one of: all_reduce"),
    (dict(min_bytes="1Q"), "not a size"),
    (dict(min_bytes="1M", max_bytes="1K"), "swap"),
    (dict(factor=1), "factor"),
    (dict(iters=0), "iters"),
    (dict(dtype="complex64"), "dtype"),
    (dict(nprocs=1), "at least 2 ranks"),
])
def test_bad_arguments_fail_before_any_rank_starts(kwargs, words, no_orphans):
    with pytest.raises(ValueError, match=words):
        sweep(**kwargs)


def test_fill_patterns_sum_exactly():
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        n = 8
        total = sum(pattern(r, 5, 100, 3, torch.int64, "cpu") for r in range(n))
        assert torch.equal(summed(n, 5, 100, 3, dtype, "cpu"), total.to(dtype))
        assert int(pattern(0, 0, 1000, 0, dtype, "cpu").min()) >= 1
    assert not torch.equal(pattern(0, 0, 64, 0, torch.float32, "cpu"),
                           pattern(1, 0, 64, 0, torch.float32, "cpu"))


def test_unsupported_errors_are_told_apart_from_failures():
    assert is_unsupported(RuntimeError("Backend gloo does not support reduce_scatter"))
    assert is_unsupported(NotImplementedError("alltoall"))
    assert is_unsupported(RuntimeError("ProcessGroupGloo::allgather_into_tensor_coalesced: "
                                       "unsupported"))
    assert not is_unsupported(RuntimeError("Connection reset by peer"))
    assert not is_unsupported(ValueError("tensor sizes differ"))


def test_env_cannot_reach_a_pools_running_ranks():
    with pytest.raises(ValueError, match="fresh ranks"):
        sweep("all_reduce", 8, 64, pool=object(), env={"NCCL_PROTO": "Simple"}, progress=False)


@pytest.mark.usefixtures("no_orphans")
def test_sweep_bookkeeping_uses_no_collective():
    """Device names travel through the store: a setting that breaks some NCCL collective
    (NCCL_ALGO=Tree has no AllGather) cannot fail the sweep before it measures anything."""
    from dtlab.bench.engine import make_config

    def rank_fn(cfg):
        import torch.distributed as dist

        from dtlab.bench.timing import run_sweep

        def refuse(*a, **k):
            raise AssertionError("the sweep used an object collective for bookkeeping")

        dist.all_gather_object = dist.broadcast_object_list = refuse
        return run_sweep(cfg)

    cfg = make_config("all_reduce", 64, 64, iters=1, warmup=0, progress=False)
    out = dtlab.run(rank_fn, cfg, nprocs=2, backend="gloo", timeout=60).values[0]
    assert [d["rank"] for d in out["devices"]] == [0, 1] and out["rows"][0]["ip"]["wrong"] == 0
