"""Reading a tuning sweep: :class:`TuneResult` (what :func:`dtlab.tuning.sweep` returns), the
best setting per size, a text table, a plot, JSON -- of a result, or of a bare DataFrame (a
recorded CSV: no notes, settings or failures beside it).

>>> import pandas as pd
>>> df = pd.DataFrame({"setting": ["default", "PROTO=LL"], "op": "all_reduce",
...                    "size": [1024, 1024], "time_us": [20.0, 16.0], "busbw": [0.1, 0.128],
...                    "wrong": [0, 0], "status": "ok"})
>>> b = best(df)
>>> b.loc[0, "best"], round(float(b.loc[0, "margin_pct"]), 1)
('PROTO=LL', 25.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..vocab import format_size, parse_size
from .settings import FORCED

if TYPE_CHECKING:
    import matplotlib.axes
    import pandas

@dataclass(frozen=True)
class TuneResult:
    """One tuning sweep (or several, :func:`dtlab.tuning.combine`):

    * ``frame`` -- one row per (setting, size), :func:`dtlab.tuning.columns`;
    * ``settings`` -- {label: the NCCL variables that setting's ranks started with};
    * ``failed`` -- {label: NCCL's words, else the error's first line} for settings that did
      not finish; ``errors`` -- {label: the whole error text, every rank's traceback};
    * ``notes`` -- what to know when reading the numbers (no NCCL log on gloo, ...);
    * ``nccl`` -- {label: transport, channels, NCCL's env and version, from its log};
    * ``log_dirs`` -- {label: the folder of its NCCL logs, None where they were removed};
    * ``header`` -- the first finished setting's nccl-tests-style header (devices, versions);
    * ``forced`` -- the variables every setting runs with (NCCL_NVLS_ENABLE=0).
    """

    frame: "pandas.DataFrame"
    settings: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    nccl: dict = field(default_factory=dict)
    log_dirs: dict = field(default_factory=dict)
    header: dict = field(default_factory=dict)
    forced: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """What ``dtlab tune --json`` prints (:func:`dtlab.tuning.to_json`)."""
        return to_json(self)

    def render(self) -> str:
        """What ``dtlab tune`` prints (:func:`dtlab.tuning.table`)."""
        return table(self)


def split(data: Any) -> tuple["pandas.DataFrame", TuneResult | None]:
    """(its frame, the result) for a sweep's result; (the frame, None) for a bare DataFrame (a
    recorded CSV: no settings, notes or failures beside it)."""
    if isinstance(data, TuneResult):
        return data.frame, data
    return data, None


BEST_COLUMNS = ["op", "size", "best", "busbw", "time_us", "default_busbw", "default_time_us",
                "speedup", "margin_pct", "algorithm", "protocol", "channels", "transport"]


def default_label(data: "TuneResult | pandas.DataFrame") -> str:
    """The label of the setting that sets no NCCL variable (NCCL's own choices); "default" for
    a bare DataFrame."""
    _, res = split(data)
    for label, env in (res.settings if res else {}).items():
        if not {k: v for k, v in env.items() if k not in FORCED}:
            return label
    return "default"


def _sizes(size) -> set[int] | None:
    """``size`` as :func:`best` takes it (1048576, "1M", a list) -> a set of bytes."""
    if size is None:
        return None
    items = size if isinstance(size, (list, tuple, set)) else [size]
    return {parse_size(s, "size") for s in items}


def _get(row, key):
    v = row.get(key) if hasattr(row, "get") else None
    return None if v is None or (not isinstance(v, str) and _isna(v)) else v


def _isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def best(data: "TuneResult | pandas.DataFrame", size: Any = None) -> "pandas.DataFrame":
    """The fastest setting at each size (or at ``size``: 1048576, "1M", or a list), among rows
    that finished with ``#wrong`` 0, and its margin over NCCL's default at that size:
    ``speedup`` = default's time / best's time, ``margin_pct`` = (speedup - 1) x 100 (NaN when
    the default did not run). Times, not busbw, are compared: the same thing at one size, and
    exact where small busbw values round to 0.00.

    >>> best(df, size="1M")                                          # doctest: +SKIP
    """
    import pandas as pd

    df, _ = split(data)
    wanted = _sizes(size)
    ok = df[(df["status"] == "ok") & df["time_us"].notna()]
    if "wrong" in ok:
        ok = ok[ok["wrong"].fillna(0) == 0]
    base = default_label(data)
    rows = []
    for (op, sz), part in ok.groupby(["op", "size"], sort=True):
        if wanted is not None and int(sz) not in wanted:
            continue
        top = part.loc[part["time_us"].idxmin()]
        ref = part[part["setting"] == base]
        ref_t = float(ref["time_us"].iloc[0]) if len(ref) else math.nan
        speedup = ref_t / float(top["time_us"])
        rows.append({"op": op, "size": int(sz), "best": top["setting"], "busbw": top["busbw"],
                     "time_us": top["time_us"],
                     "default_busbw": float(ref["busbw"].iloc[0]) if len(ref) else math.nan,
                     "default_time_us": ref_t, "speedup": speedup,
                     "margin_pct": (speedup - 1) * 100,
                     **{k: _get(top, k) for k in ("algorithm", "protocol", "channels",
                                                  "transport")}})
    out = pd.DataFrame(rows, columns=BEST_COLUMNS)
    if wanted is not None:
        missing = sorted(wanted - set(out["size"]))
        if missing:
            have = sorted(set(int(s) for s in ok["size"]))
            raise ValueError(f"size {missing[0]}: no setting finished there with #wrong 0; "
                             f"sizes measured: {have or 'none (every setting failed?)'}.")
    return out


# --- text --------------------------------------------------------------------------------------

def _cell(v, fmt: str = "", width: int = 0) -> str:
    if v is None or (not isinstance(v, str) and _isna(v)):
        return "-".rjust(width)
    return format(v, fmt).rjust(width) if fmt else str(v).rjust(width)


def _block(label: str, part: "pandas.DataFrame", many_ops: bool) -> list[str]:
    first = part.iloc[0]
    if first["status"] != "ok":
        out = [f"== {label}  {str(first['status']).upper()}: {first['error']}"]
        if _get(first, "nccl_error"):
            out.append(f"   NCCL: {first['nccl_error']}")
        return out
    ops = f"  [{', '.join(dict.fromkeys(part['op']))}]" if many_ops else ""
    out = [f"== {label}{ops}",
           f"  {'size':>6s}  {'time_us':>10s}  {'algbw':>7s}  {'busbw':>7s}  {'#wrong':>6s}  "
           f"{'algorithm':<13s}  {'protocol':<8s}  {'ch':>3s}  {'comm ch':>7s}  transport"]
    for _, r in part.iterrows():
        out.append(f"  {format_size(int(r['size'])):>6s}  {_cell(r['time_us'], '.2f', 10)}  "
                   f"{_cell(r['algbw'], '.2f', 7)}  {_cell(r['busbw'], '.2f', 7)}  "
                   f"{_cell(r.get('wrong'), '', 6)}  {_cell(_get(r, 'algorithm')):<13s}  "
                   f"{_cell(_get(r, 'protocol')):<8s}  {_cell(_get(r, 'channels'), '', 3)}  "
                   f"{_cell(_get(r, 'comm_channels'), '', 7)}  {_cell(_get(r, 'transport'))}")
    return out


def best_text(data: "TuneResult | pandas.DataFrame") -> str:
    """The best setting per size as text (see :func:`best`)."""
    b = best(data)
    if b.empty:
        return "best setting per size: none (no setting finished with #wrong 0)"
    out = [f"best setting per size (fastest with #wrong 0; margin = {default_label(data)}'s time "
           f"/ best's time - 1)",
           f"  {'size':>6s}  {'best':<28s}  {'busbw':>7s}  {'default':>7s}  {'margin':>8s}  "
           f"{'algorithm/protocol':<20s}  {'ch':>3s}  transport"]
    many_ops = b["op"].nunique() > 1
    for _, r in b.iterrows():
        algo = f"{r['algorithm']}/{r['protocol']}" if _get(r, "algorithm") else "-"
        margin = "-" if _isna(r["margin_pct"]) else f"{r['margin_pct']:+.1f}%"
        size = (f"{r['op']} " if many_ops else "") + format_size(int(r["size"]))
        out.append(f"  {size:>6s}  {r['best']:<28s}  {_cell(r['busbw'], '.2f', 7)}  "
                   f"{_cell(r['default_busbw'], '.2f', 7)}  {margin:>8s}  {algo:<20s}  "
                   f"{_cell(_get(r, 'channels'), '', 3)}  {_cell(_get(r, 'transport'))}")
    return "\n".join(out)


def wide_text(data: "TuneResult | pandas.DataFrame") -> str:
    """busbw (GB/s) as a matrix: one line per size, one column per setting that finished."""
    df, _ = split(data)
    ok = df[df["status"] == "ok"]
    labels = list(dict.fromkeys(ok["setting"]))
    width = {s: max(8, len(s)) for s in labels}
    out = ["busbw (GB/s) by size and setting",
           f"{'size':>6s}" + "".join(f"  {s:>{width[s]}s}" for s in labels)]
    for (op, size), part in ok.groupby(["op", "size"], sort=True):
        by = dict(zip(part["setting"], part["busbw"]))
        out.append(f"{format_size(int(size)):>6s}" +
                   "".join(f"  {_cell(by.get(s), '.2f', width[s])}" for s in labels))
    return "\n".join(out)


def table(data: "TuneResult | pandas.DataFrame", wide: bool = False) -> str:
    """The sweep as text: notes, then per setting its rows with NCCL's algorithm, protocol,
    channels and transport beside each (``wide=True``: a busbw matrix instead), then the best
    setting per size with its margin over the default.

    >>> print(table(df))                                              # doctest: +SKIP
    """
    df, res = split(data)
    out = [f"# note: {n}" for n in (res.notes if res else [])]
    if wide:
        out.append(wide_text(df))
    else:
        many_ops = df["op"].nunique() > 1
        for label in dict.fromkeys(df["setting"]):
            out += _block(label, df[df["setting"] == label], many_ops)
    out += ["", best_text(data)]
    return "\n".join(out)


# --- plot --------------------------------------------------------------------------------------

def plot(data: "TuneResult | pandas.DataFrame", link_limit_gbps: float | None = None,
         link_label: str | None = None, ax: "matplotlib.axes.Axes | None" = None,
         title: str | None = None) -> "matplotlib.axes.Axes":
    """busbw vs size, one line per setting (dtlab.bench.plot's axes: log2 sizes labelled
    1K/1M/1G, the link's speed as a dotted line when given); failed settings are listed in the
    legend. Returns the Axes (``ax.figure.savefig("tune.png")``).

    >>> plot(df, link_limit_gbps=450, link_label="NVLink4 x18")       # doctest: +SKIP
    """
    import pandas as pd

    from ..bench.plot import plot as bench_plot

    df, res = split(data)
    ok = df[(df["status"] == "ok") & df["busbw"].notna()]
    if ok.empty:
        raise ValueError("nothing to plot: no setting finished (see the sweep's .failed).")
    many_ops = ok["op"].nunique() > 1
    frames, names = [], []
    for label in dict.fromkeys(ok["setting"]):
        part = ok[ok["setting"] == label]
        inplace = part["inplace"].fillna(True).astype(bool) if "inplace" in part else True
        frames.append(pd.DataFrame({
            "tool": "dtlab", "backend": part["backend"], "op": part["op"],
            "nranks": part["nranks"], "size": part["size"].astype("int64"),
            "oop_busbw": part["busbw"].where(~inplace), "ip_busbw": part["busbw"].where(inplace)}))
        names += [f"{label} ({op})" if many_ops else label for op in dict.fromkeys(part["op"])]
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(9, 5))
    before = len(ax.lines)
    # dtlab.bench.plot names lines by op/backend; rename them by setting, in the order drawn
    bench_plot(frames, link_limit_gbps=link_limit_gbps, ax=ax, link_label=link_label,
               title=title)
    for i, (line, name) in enumerate(zip(ax.lines[before:before + len(names)], names)):
        line.set_label(name)
        if i >= 10:  # the colour cycle repeats after 10: tell those lines apart by style
            line.set_linestyle("--")
    for label, err in (res.failed if res else {}).items():
        ax.plot([], [], " ", label=f"{label}: failed ({str(err)[:50]})")
    ax.legend(fontsize="small", ncol=2 if len(names) > 6 else 1)
    return ax


# --- JSON --------------------------------------------------------------------------------------

def _plain(v):
    if v is None or (not isinstance(v, (str, dict, list)) and _isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def to_json(data: "TuneResult | pandas.DataFrame") -> dict:
    """Everything ``dtlab tune --json`` prints: rows, best per size, notes, settings, failures,
    NCCL's account per setting (null for a bare DataFrame). NaN and <NA> become null."""
    df, res = split(data)
    rows = [{k: _plain(v) for k, v in r.items()} for r in df.to_dict(orient="records")]
    b = [{k: _plain(v) for k, v in r.items()} for r in best(data).to_dict(orient="records")]
    keep = ("notes", "settings", "failed", "nccl", "log_dirs", "forced")
    return {**{k: getattr(res, k) if res else None for k in keep}, "default": default_label(data),
            "rows": rows, "best": b}
