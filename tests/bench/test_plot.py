"""busbw-vs-size plots, headless (Agg), from the real samples."""

import os

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from dtlab.bench import plot, to_frame  # noqa: E402

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def test_lines_ticks_and_link_limit(tmp_path):
    frames = [to_frame(os.path.join(FIX, n)) for n in ("nt_all_reduce.txt", "nt_broadcast.txt")]
    ax = plot(frames, link_limit_gbps=450, link_label="NVLink4 x18: 450 GB/s/dir")
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels == ["all_reduce, nccl-tests, 2 ranks", "broadcast, nccl-tests, 2 ranks",
                      "NVLink4 x18: 450 GB/s/dir"]
    ar = ax.get_lines()[0]
    assert list(ar.get_xdata())[-1] == 1 << 30 and list(ar.get_ydata())[-1] == 327.37
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert {"8", "1K", "1M", "1G"} <= set(ticks) and len(ticks) <= 14
    assert ax.get_xscale() == "log" and ax.get_lines()[2].get_ydata()[0] == 450
    out = tmp_path / "busbw.png"
    ax.figure.savefig(out)
    assert out.stat().st_size > 10_000


def test_both_columns_and_in_place_only_ops():
    df = to_frame(os.path.join(FIX, "nt_all_reduce.txt"))
    ax = plot(df, column="both")
    assert [ln.get_label() for ln in ax.get_lines()] == [
        "all_reduce, nccl-tests, 2 ranks (out-of-place)", "all_reduce, nccl-tests, 2 ranks (in-place)"]
    ip_only = df.assign(oop_busbw=float("nan"))  # like torch's all_reduce: in-place column only
    assert plot(ip_only).get_lines()[0].get_label().endswith("(in-place)")


def test_nothing_to_plot_is_a_clear_error():
    empty = to_frame(os.path.join(FIX, "nt_all_reduce.txt")).iloc[0:0]
    with pytest.raises(ValueError, match="nothing to plot"):
        plot(empty)
    with pytest.raises(ValueError, match="column="):
        plot(pd.DataFrame(), column="max")
