"""GPU-to-GPU copies: the bandwidth and latency matrix of every pair, without NCCL.

Contract: :func:`p2p_matrix` runs in *this* process (no ranks: one process sees every GPU, as
CUDA's ``p2pBandwidthLatencyTest`` sample does) and returns a DataFrame with one row per ordered
pair ``src != dst``::

    src dst peer_access uni_GBps bi_GBps latency_us size

* ``uni_GBps`` -- ``iters`` back-to-back ``dst_tensor.copy_(src_tensor)`` of ``size`` bytes,
  timed with CUDA events on the source device's current stream (where torch issues a
  cross-device copy, after making it wait for the destination's stream);
* ``bi_GBps`` -- both directions at once (i -> j on i's stream, j -> i on j's stream, started
  together through an event), total bytes moved / elapsed;
* ``latency_us`` -- per copy of ``lat_bytes`` bytes (8 by default), ``iters`` in a row;
* ``peer_access`` -- ``torch.cuda.can_device_access_peer``: False means the copy is staged
  through host memory by the driver, a "slow pair" by construction.

The copy engines move the data, not NCCL's kernels, so this is the link's raw copy rate: on
NVLink it exceeds the busbw NCCL reaches. :func:`slow_pairs` names the pairs below a fraction
of the median; :func:`to_matrix` / :func:`plot_p2p` turn the rows into a square matrix and a
heatmap. Without CUDA (or with one GPU) :func:`p2p_matrix` raises ValueError; the matrix code is
tested on synthetic rows and works on any recorded matrix (``pandas.read_csv``).

>>> import dtlab.bench as bench
>>> df = bench.p2p_matrix(size="256M")          # doctest: +SKIP
>>> bench.slow_pairs(df, "uni_GBps")            # doctest: +SKIP
>>> bench.plot_p2p(df, "bi_GBps")               # doctest: +SKIP

Terminal: ``dtlab bench --p2p [-e 256M] [--json]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..limits import MAX_ITERS, whole
from .formulas import parse_size

if TYPE_CHECKING:
    import matplotlib.axes
    import pandas

P2P_COLUMNS = ["src", "dst", "peer_access", "uni_GBps", "bi_GBps", "latency_us", "size"]


def check_p2p_possible() -> int:
    """The number of GPUs, or ValueError (one line) when there are fewer than 2."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        raise ValueError(f"p2p copies need at least 2 CUDA GPUs in this process; found {n}. "
                         f"(On CPU, read a recorded matrix with pandas.read_csv and use "
                         f"to_matrix / slow_pairs / plot_p2p.)")
    return n


def p2p_matrix(size="256M", iters: int = 20, warmup: int = 3, lat_bytes: int = 8,
               devices: list[int] | None = None) -> "pandas.DataFrame":
    """Copy-engine bandwidth and latency between every ordered pair of GPUs (module docstring)."""
    import pandas as pd
    import torch

    nbytes = parse_size(size, "size")
    whole("iters", iters, 1, MAX_ITERS)
    whole("warmup", warmup, 0, MAX_ITERS)
    whole("lat_bytes", lat_bytes, 1, 1 << 20, "the latency copy: a few bytes")
    n = check_p2p_possible()
    devs = list(range(n)) if devices is None else list(devices)
    if len(set(devs)) < 2 or any(not 0 <= d < n for d in devs):
        raise ValueError(f"devices={devices!r}: name at least 2 of the GPUs 0..{n - 1}.")
    bufs = {d: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devs}
    bufs2 = {d: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devs}
    tiny = {d: torch.empty(max(lat_bytes, 1), dtype=torch.uint8, device=f"cuda:{d}") for d in devs}
    rows = []
    for i in devs:
        for j in devs:
            if i == j:
                continue
            uni = _timed(lambda: bufs2[j].copy_(bufs[i]), i, iters, warmup)
            lat = _timed(lambda: tiny[j].copy_(tiny[i]), i, iters, warmup)
            bi = _bidirectional(bufs, bufs2, i, j, iters, warmup)
            rows.append({"src": i, "dst": j,
                         "peer_access": bool(torch.cuda.can_device_access_peer(i, j)),
                         "uni_GBps": nbytes / uni / 1e9, "bi_GBps": 2 * nbytes / bi / 1e9,
                         "latency_us": lat * 1e6, "size": nbytes})
    del bufs, bufs2, tiny
    torch.cuda.synchronize()
    return pd.DataFrame(rows, columns=P2P_COLUMNS)


def _timed(copy, dev: int, iters: int, warmup: int) -> float:
    """Seconds per copy, CUDA events on ``dev``'s current stream (where torch issues the copy)."""
    import torch

    with torch.cuda.device(dev):
        for _ in range(warmup):
            copy()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            copy()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters


def _bidirectional(a, b, i: int, j: int, iters: int, warmup: int) -> float:
    """Seconds per round of one i -> j and one j -> i copy running at the same time.

    torch orders a cross-device copy against the *current* streams of both devices (a two-way
    barrier, aten/src/ATen/native/cuda/Copy.cu), so two copies on the default streams would run
    one after the other. Each direction gets its own copy stream on its source and an idle
    stream as the destination's current one: the barriers then never link the two directions."""
    import torch

    ci, cj = torch.cuda.Stream(i), torch.cuda.Stream(j)    # copy streams
    qi, qj = torch.cuda.Stream(i), torch.cuda.Stream(j)    # idle "current" streams of the peers

    def round_trip():
        with torch.cuda.stream(ci), torch.cuda.stream(qj):
            b[j].copy_(a[i])
        with torch.cuda.stream(cj), torch.cuda.stream(qi):
            b[i].copy_(a[j])

    for _ in range(warmup):
        round_trip()
    torch.cuda.synchronize(i)
    torch.cuda.synchronize(j)
    with torch.cuda.device(i):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(ci)
    cj.wait_event(start)  # j's copies start when i's do
    for _ in range(iters):
        round_trip()
    with torch.cuda.device(j):
        done_j = torch.cuda.Event()
        done_j.record(cj)
    ci.wait_event(done_j)  # the end event fires when both directions are done
    end.record(ci)
    end.synchronize()
    torch.cuda.synchronize(j)
    return start.elapsed_time(end) / 1e3 / iters


def to_matrix(rows, value: str = "uni_GBps") -> list[list[float | None]]:
    """Rows (DataFrame or list of dicts with src, dst, ``value``) -> a square list of lists,
    ``m[src][dst]``, None on the diagonal and where a pair was not measured."""
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    if df.empty or value not in df:
        raise ValueError(f"no {value!r} column in the p2p rows (columns: {list(df.columns)}).")
    n = int(max(df["src"].max(), df["dst"].max())) + 1
    m: list[list[float | None]] = [[None] * n for _ in range(n)]
    for r in df.itertuples(index=False):
        m[int(r.src)][int(r.dst)] = float(getattr(r, value))
    return m


def _square(data, value: str) -> list:
    """A square matrix (list of lists) as given, or one made from p2p rows."""
    if isinstance(data, list) and data and all(isinstance(r, (list, tuple)) for r in data):
        if any(len(r) != len(data) for r in data):
            raise ValueError(f"the matrix is not square: {len(data)} rows of lengths "
                             f"{sorted({len(r) for r in data})}.")
        return [list(r) for r in data]
    return to_matrix(data, value)


def slow_pairs(data, value: str = "uni_GBps", fraction: float = 0.75) -> list[list[int]]:
    """Ordered pairs ``[src, dst]`` whose ``value`` is below ``fraction`` x the median of every
    measured off-diagonal entry (a bandwidth: lower is slower). ``data``: p2p rows or a square
    matrix (None / NaN = not measured). The median, not the mean or the max: one broken link
    must not move the yardstick.

    >>> slow_pairs([[None, 300, 300], [300, None, 40], [300, 300, None]], fraction=0.5)
    [[1, 2]]
    """
    import math
    import statistics

    m = _square(data, value)
    vals = [v for i, row in enumerate(m) for j, v in enumerate(row)
            if i != j and v is not None and not math.isnan(v)]
    if not vals:
        raise ValueError("the matrix has no measured off-diagonal entry.")
    cut = fraction * statistics.median(vals)
    return [[i, j] for i, row in enumerate(m) for j, v in enumerate(row)
            if i != j and v is not None and not math.isnan(v) and v < cut]


def plot_p2p(data, value: str = "uni_GBps", ax: "matplotlib.axes.Axes | None" = None,
             title: str | None = None) -> "matplotlib.axes.Axes":
    """Heatmap of ``value`` (rows: source GPU, columns: destination), numbers in the cells."""
    import numpy as np

    m = _square(data, value)
    arr = np.array([[np.nan if v is None else v for v in row] for row in m], dtype=float)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(1.2 + 0.8 * len(m), 0.8 + 0.7 * len(m)))
    im = ax.imshow(arr, cmap="viridis")
    for (i, j), v in np.ndenumerate(arr):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.0f}" if v >= 10 else f"{v:.2g}", ha="center", va="center",
                    color="w" if v < np.nanmax(arr) * 0.6 else "k", fontsize="small")
    ax.set_xticks(range(len(m)))
    ax.set_yticks(range(len(m)))
    ax.set_xlabel("destination GPU")
    ax.set_ylabel("source GPU")
    ax.figure.colorbar(im, ax=ax, label=value)
    ax.set_title(title or value)
    return ax
