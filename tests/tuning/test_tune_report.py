"""best / table / plot / combine / progress on synthetic frames (named as such: made up here, in
the shape dtlab.tuning.sweep returns)."""

import io
import math

import matplotlib
import pandas as pd
import pytest

import dtlab.tuning as tuning
from dtlab.tuning.progress import Progress

matplotlib.use("Agg")


def synthetic_frame():
    """default / PROTO=LL / ALGO=Tree (wrong at 1M) / MAX_NCHANNELS=1 (failed), 2 sizes: a
    TuneResult, as dtlab.tuning.sweep returns."""
    rows = []
    times = {"default": (20.0, 40.0), "PROTO=LL": (16.0, 50.0), "ALGO=Tree": (25.0, 10.0)}
    for label, (t_small, t_big) in times.items():
        for size, t, wrong in ((1024, t_small, 0), (1 << 20, t_big, 3 if label == "ALGO=Tree"
                                                     else 0)):
            rows.append({"setting": label, "op": "all_reduce", "size": size, "count": size // 4,
                         "type": "float", "time_us": t, "algbw": size / t / 1e3,
                         "busbw": size / t / 1e3, "wrong": wrong, "algorithm": "Ring",
                         "protocol": "LL" if size == 1024 else "Simple", "channels": 2,
                         "comm_channels": 24, "transport": "P2P/CUMEM", "inplace": True,
                         "nranks": 2, "backend": "nccl", "status": "ok", "error": None,
                         "nccl_error": None})
    rows.append({"setting": "MAX_NCHANNELS=1", "op": "all_reduce", "status": "failed",
                 "error": "rank 0: boom", "nccl_error": None, "backend": "nccl", "nranks": 2})
    df = pd.DataFrame(rows, columns=tuning.columns([]))
    for c in ("size", "count", "wrong", "channels", "comm_channels", "nranks"):
        df[c] = df[c].astype("Int64")
    return tuning.TuneResult(df, settings={"default": {"NCCL_NVLS_ENABLE": "0"},
                                           "PROTO=LL": {"NCCL_PROTO": "LL",
                                                        "NCCL_NVLS_ENABLE": "0"}},
                             failed={"MAX_NCHANNELS=1": "rank 0: boom"}, notes=["synthetic"])


def test_best_picks_the_fastest_clean_setting_with_its_margin():
    b = tuning.best(synthetic_frame())
    assert list(b["size"]) == [1024, 1 << 20]
    small, big = b.iloc[0], b.iloc[1]
    assert small["best"] == "PROTO=LL" and small["speedup"] == pytest.approx(20 / 16)
    assert small["margin_pct"] == pytest.approx(25.0) and small["protocol"] == "LL"
    # ALGO=Tree is fastest at 1M but got 3 wrong elements: it cannot be "best"
    assert big["best"] == "default" and big["margin_pct"] == pytest.approx(0.0)
    assert tuning.best(synthetic_frame(), size="1M")["best"].tolist() == ["default"]
    with pytest.raises(ValueError, match="size 2048: no setting finished there"):
        tuning.best(synthetic_frame(), size=2048)


def test_best_without_a_default_has_no_margin():
    df = synthetic_frame().frame
    df = df[df["setting"] != "default"]  # a bare DataFrame: nothing beside it
    b = tuning.best(df)
    assert b["best"].tolist() == ["PROTO=LL", "PROTO=LL"] and b["margin_pct"].isna().all()


def test_table_shows_nccl_columns_failures_and_best():
    text = tuning.table(synthetic_frame())
    assert text.startswith("# note: synthetic")
    assert "== MAX_NCHANNELS=1  FAILED: rank 0: boom" in text
    assert any(line.split()[:1] == ["1K"] and "Ring" in line and "P2P/CUMEM" in line
               for line in text.splitlines())
    assert "PROTO=LL" in text.split("best setting per size")[1] and "+25.0%" in text
    wide = tuning.table(synthetic_frame(), wide=True)
    assert "busbw (GB/s) by size and setting" in wide and "MAX_NCHANNELS=1" not in \
        wide.split("best setting")[0].split("\n", 2)[2]


def test_plot_one_line_per_setting_and_failed_ones_in_the_legend(tmp_path):
    ax = tuning.plot(synthetic_frame(), link_limit_gbps=450, link_label="NVLink4 x18")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["default", "PROTO=LL", "ALGO=Tree"]
    assert "NVLink4 x18" in labels and any(s.startswith("MAX_NCHANNELS=1: failed") for s in labels)
    ax.figure.savefig(tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 5000
    failed_only = synthetic_frame().frame
    failed_only = failed_only[failed_only["status"] == "failed"]
    with pytest.raises(ValueError, match="nothing to plot"):
        tuning.plot(failed_only)


def test_combine_and_json():
    a, b = synthetic_frame(), synthetic_frame().frame
    b = b[b["setting"] == "PROTO=LL"].assign(setting="net", NCCL_P2P_DISABLE="1")
    b = tuning.TuneResult(b, settings={"net": {"NCCL_P2P_DISABLE": "1"}}, failed={},
                          notes=["synthetic", "other"])
    both = tuning.combine(a, b)
    assert isinstance(both, tuning.TuneResult)
    assert len(both.frame) == len(a.frame) + 2
    assert list(both.settings) == ["default", "PROTO=LL", "net"]
    assert both.notes == ["synthetic", "other"] and both.failed == a.failed
    assert list(both.frame.columns) == tuning.columns(["NCCL_P2P_DISABLE"])
    assert both.frame["NCCL_P2P_DISABLE"].tolist()[-2:] == ["1", "1"]
    got = tuning.to_json(both)
    assert got == both.to_dict() and both.render() == tuning.table(both)
    assert got["settings"] == both.settings and got["failed"] == a.failed
    assert got["rows"][-1]["setting"] == "net" and got["rows"][6]["size"] is None
    assert got["failed"] == {"MAX_NCHANNELS=1": "rank 0: boom"}
    assert all(not (isinstance(v, float) and math.isnan(v))
               for r in got["rows"] for v in r.values())


def test_notebook_progress_updates_one_display(monkeypatch):
    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(obj)

    import IPython.display

    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, display_id=False: shown.append(obj) or Handle())
    p = Progress(2, "all_reduce 1K..4K", notebook=True)
    p.start(0, "default")
    p.done(0, "default", "ok, peak busbw 1.00 GB/s at 4K")
    p.start(1, "PROTO=LL")
    last = shown[-1]
    assert "<progress value='1' max='2'" in last["text/html"]
    assert "running: PROTO=LL" in last["text/plain"] and "1/2 settings" in last["text/plain"]
    assert "[1/2] default | ok" in last["text/plain"] and "ETA" in last["text/plain"]


def test_terminal_progress_is_one_line_per_setting():
    out = io.StringIO()
    p = Progress(3, "x", stream=out, notebook=False)
    for i, label in enumerate(["a", "b", "c"]):
        p.start(i, label)
        p.done(i, label, "ok")
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[3].startswith("[3/3] c | ok") and "ETA done" in lines[3]
