"""busbw against message size: the picture every NCCL tuning discussion starts from.

Small messages are latency-bound (busbw near 0), large ones approach the link: the curve's
plateau is what to compare with the hardware, drawn as a horizontal line when you know it.

>>> import dtlab.bench as bench
>>> ax = bench.plot([bench.to_frame("data/h200x2-nccl-tests/nt_all_reduce.txt")],
...                 link_limit_gbps=450, link_label="NVLink4 x18: 450 GB/s/dir")  # doctest: +SKIP
>>> ax.figure.savefig("busbw.png")                                                   # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .formulas import format_size

if TYPE_CHECKING:
    import matplotlib.axes
    import pandas


def _series(df: "pandas.DataFrame", column: str):
    """(label, sizes, busbw) per op/setting. ``column``: 'auto' (out-of-place where measured,
    else in-place), 'oop', 'ip' or 'both'."""
    keys = [k for k in ("tool", "backend", "op", "nranks") if k in df.columns]
    groups = df.groupby(keys, sort=False, dropna=False) if keys else [((), df)]
    for key, part in groups:
        meta = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        who = "nccl-tests" if meta.get("tool") == "nccl-tests" else f"torch {meta.get('backend', '')}"
        name = f"{meta.get('op', '')}, {who}, {meta.get('nranks', '?')} ranks"
        part = part[part["size"] > 0].sort_values("size")
        cols = ["oop", "ip"] if column == "both" else [column]
        if column == "auto":
            cols = ["oop"] if part["oop_busbw"].notna().any() else ["ip"]
        for g in cols:
            y = part[f"{g}_busbw"]
            if y.notna().any():
                suffix = " (in-place)" if g == "ip" else (" (out-of-place)" if column == "both" else "")
                yield name + suffix, part["size"].to_numpy(), y.to_numpy(), g


def plot(data, link_limit_gbps: float | None = None, ax: "matplotlib.axes.Axes | None" = None,
         link_label: str | None = None, column: str = "auto",
         title: str | None = None) -> "matplotlib.axes.Axes":
    """Plot busbw (GB/s) against size (log2 axis, 1K/1M/1G labels), one line per op/setting.

    ``data``: a :func:`dtlab.bench.sweep`'s result, a DataFrame (:func:`dtlab.bench.to_frame`),
    or a list of them. ``link_limit_gbps`` draws the link's speed, labelled ``link_label``. Works
    headless (Agg); returns the Axes (``ax.figure.savefig(path)`` to write a file).
    """
    if column not in ("auto", "oop", "ip", "both"):
        raise ValueError(f"column={column!r} must be 'auto', 'oop', 'ip' or 'both'.")
    frames = data if isinstance(data, (list, tuple)) else [data]
    from .engine import to_frame

    frames = [to_frame(f) for f in frames]
    if not frames or all(f.empty for f in frames):
        raise ValueError("nothing to plot: the data has no rows (did every op fail or get "
                         "skipped? see the sweep's .unsupported / .skipped).")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 4.5))
    lo, hi = math.inf, 0
    for df in frames:
        for label, x, y, g in _series(df, column):
            ax.plot(x, y, marker=".", linestyle="--" if g == "ip" and column == "both" else "-",
                    label=label)
            lo, hi = min(lo, int(x.min())), max(hi, int(x.max()))
    if link_limit_gbps is not None:
        label = link_label or f"link limit: {link_limit_gbps:g} GB/s"
        ax.axhline(link_limit_gbps, color="0.35", linestyle=":", linewidth=1.5, label=label)
        ax.annotate(label, xy=(0.01, link_limit_gbps), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize="small", color="0.35")
    ax.set_xscale("log", base=2)
    if hi:
        lo_e, hi_e = int(math.log2(max(lo, 1))), math.ceil(math.log2(hi))
        # steps that divide 10 keep 1K / 1M / 1G among the labels; at most ~12 of them
        step = next(s for s in (1, 2, 5, 10, 20) if (hi_e - lo_e) / s <= 11)
        ticks = [2 ** e for e in range(lo_e, hi_e + 1) if e % step == 0 or e == lo_e]
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_size(t) for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel("message size (bytes, nccl-tests' size column)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return ax
