"""The ceiling: what the links could carry, what NCCL thinks they carry, what a sweep reached.

Contract, three small passes over recorded evidence and one plot:

* :func:`nvlink_rates` -- ``nvidia-smi nvlink -s`` text -> ``{gpu: [GB/s per link]}``, as
  nvidia-smi prints them (26.562 GB/s on an H100/H200 NVLink4 link: 17/16 of the datasheet's
  data rate, for a reason NVIDIA does not document); :func:`data_rate` turns one into the
  datasheet's rate per direction (25 GB/s);
* :func:`nccl_topology` -- an ``NCCL_DEBUG=INFO`` log (``NCCL_DEBUG_SUBSYS`` with GRAPH) ->
  NCCL's own figures: ``system_max_bw`` (``=== System : maxBw X totalBw Y ===``, GB/s, its
  model of the best GPU-to-GPU path) and one entry per searched graph (``Pattern P, ...,
  nChannels C, bw A/B``: ``bw`` is GB/s *per channel*, intra-node / inter-node; pattern 4 is
  the ring, 1-3 trees; src/include/graph.h ``NCCL_TOPO_PATTERN_*``);
* :func:`ceiling_lines` -- those as labelled horizontal lines; :func:`plot_ceiling` draws them
  over measured busbw (:func:`dtlab.bench.plot`).

Why one direction: nccl-tests' doc/PERFORMANCE.md scales busbw so that it "should reflect the
speed of the hardware bottleneck"; it names no direction, but the traffic does -- an all-reduce
ring sends and receives at once, each direction of each rank's link carrying ``2(n-1)/n x S``,
so busbw is held to one direction's rate. NVIDIA's "900 GB/s" for H100/H200 NVLink4 is 18 links
x 50 GB/s with both directions added (the H100 and H200 datasheets), so 25 GB/s per link per
direction, 450 GB/s per GPU each way: the figure busbw can approach. nvidia-smi's 26.562 GB/s
per link is 17/16 of that (18 x 26.562 = 478 GB/s); NVIDIA documents only the datasheet's
figure, so that is the ceiling used here. The ratio is that of a line rate to a data rate
under an encoding or FEC overhead, but no NVIDIA document we found says so: treat it as
unexplained.

>>> from dtlab.bench.ceiling import data_rate, nvlink_rates, nccl_topology
>>> rates = nvlink_rates("data/h200x2-nccl-logs/nvidia-smi-nvlink.txt")[0]
>>> len(rates), rates[0], sum(data_rate(r) for r in rates)
(18, 26.562, 450.0)
>>> nccl_topology("data/h200x2-nccl-logs/default/vm.1071.log")["system_max_bw"]
370.8
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..paths import text_or_file

if TYPE_CHECKING:
    import matplotlib.axes

_GPU = re.compile(r"^GPU\s+(\d+):")
_LINK = re.compile(r"^\s*Link\s+(\d+):\s*([\d.]+)\s*GB/s")
_SYSTEM = re.compile(r"=== System : maxBw ([\d.]+) totalBw ([\d.]+) ===")
_PATTERN = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), "
                      r"type (\S+?)/(\S+?),")
# nvidia-smi's per-link figure -> the data rate NVIDIA's datasheets give, per link and
# direction: NVLink4 (H100/H200 SXM: 900 GB/s over 18 links, both directions added)
SHOWN_TO_DATA_GBPS = {26.562: 25.0}
PATTERNS = {1: "balanced tree", 2: "split tree", 3: "tree", 4: "ring", 5: "nvls",
            6: "collnet direct"}


def _text(text_or_path) -> str:
    return text_or_file(text_or_path, "pass a file of nvidia-smi or NCCL output, or its text")[0]


def nvlink_rates(text_or_path) -> dict[int, list[float]]:
    """``nvidia-smi nvlink -s`` -> ``{gpu index: [per-direction GB/s of each active link]}``
    (inactive links, printed ``<inactive>``, are left out)."""
    out: dict[int, list[float]] = {}
    gpu = None
    for line in _text(text_or_path).splitlines():
        if m := _GPU.match(line):
            gpu = int(m.group(1))
            out[gpu] = []
        elif (m := _LINK.match(line)) and gpu is not None:
            out[gpu].append(float(m.group(2)))
    if not out:
        raise ValueError("not nvidia-smi nvlink -s output: no 'GPU N:' line.")
    return out


def data_rate(shown_gbps: float) -> float:
    """One link's data rate per direction (GB/s) from the figure ``nvidia-smi nvlink -s`` prints
    for it; a figure dtlab has no datasheet for is returned as it is."""
    return SHOWN_TO_DATA_GBPS.get(round(shown_gbps, 3), shown_gbps)


def nccl_topology(text_or_path) -> dict:
    """NCCL's bandwidth model from one rank's INFO log: ``{"system_max_bw", "system_total_bw",
    "graphs": [{"pattern", "name", "channels", "bw_intra", "bw_inter", "type_intra",
    "total_intra"}]}`` (GB/s; ``total_intra`` = channels x bw_intra). The first of each
    pattern only: every communicator prints its own search."""
    text = _text(text_or_path)
    m = _SYSTEM.search(text)
    if not m:
        raise ValueError("no '=== System : maxBw ... ===' line: run with NCCL_DEBUG=INFO and "
                         "NCCL_DEBUG_SUBSYS including GRAPH (or INIT,GRAPH).")
    graphs, seen = [], set()
    for g in _PATTERN.finditer(text):
        p = int(g.group(1))
        if p in seen:
            continue
        seen.add(p)
        ch, intra = int(g.group(3)), float(g.group(4))
        graphs.append({"pattern": p, "name": PATTERNS.get(p, f"pattern {p}"), "channels": ch,
                       "bw_intra": intra, "bw_inter": float(g.group(5)),
                       "type_intra": g.group(6), "total_intra": ch * intra})
    return {"system_max_bw": float(m.group(1)), "system_total_bw": float(m.group(2)),
            "graphs": graphs}


def ceiling_lines(nvlink=None, nccl_log=None, gpu: int = 0) -> list[tuple[float, str]]:
    """``[(GB/s, label)]`` from the recorded evidence given: the links' per-direction data rate,
    NCCL's system bandwidth and its ring graph's channels x per-channel bandwidth."""
    lines = []
    if nvlink is not None:
        links = nvlink_rates(nvlink)[gpu]
        if links:
            data = [data_rate(r) for r in links]
            known = data != links
            lines.append((sum(data), f"NVLink: {len(links)} x {data[0]:g} GB/s = {sum(data):.1f} GB/s "
                                     + ("per direction (datasheet; nvidia-smi shows "
                                        f"{links[0]:g} raw)" if known else
                                        "per direction (as nvidia-smi reports it)")))
    if nccl_log is not None:
        topo = nccl_topology(nccl_log)
        lines.append((topo["system_max_bw"], f"NCCL topology maxBw {topo['system_max_bw']:g} GB/s"))
        ring = next((g for g in topo["graphs"] if g["pattern"] == 4), None)
        if ring:
            lines.append((ring["total_intra"], f"NCCL ring graph: {ring['channels']} channels x "
                                               f"{ring['bw_intra']:g} GB/s"))
    return lines


def plot_ceiling(data, nvlink=None, nccl_log=None, ax: "matplotlib.axes.Axes | None" = None,
                 title: str | None = None) -> "matplotlib.axes.Axes":
    """Measured busbw (``data``: what :func:`dtlab.bench.plot` takes) under the ceilings."""
    from .plot import plot

    ax = plot(data, ax=ax, title=title)
    styles = [":", "--", "-."]
    for k, (bw, label) in enumerate(ceiling_lines(nvlink, nccl_log)):
        ax.axhline(bw, color=f"{0.2 + 0.2 * k:.1f}", linestyle=styles[k % 3], linewidth=1.5,
                   label=label)
    ax.set_ylim(bottom=0, top=max([ax.get_ylim()[1]] + [b * 1.08 for b, _ in
                                                         ceiling_lines(nvlink, nccl_log)]))
    ax.legend(fontsize="small", loc="upper left")
    return ax
