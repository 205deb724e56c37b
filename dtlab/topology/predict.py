"""From a topology to predictions you can check: transport and bandwidth class per GPU pair, the
NIC each GPU should use, a ring's slowest hop -- and the reconciliation with a measured matrix.

The rules are NCCL's (``src/graph/paths.cc``, ``ncclTopoCheckP2p`` / ``ncclTopoCheckGdr``):

* two GPUs joined by NVLink talk **P2P over NVLink**;
* otherwise P2P over PCIe only up to ``NCCL_P2P_LEVEL``, by default PXB ("don't use P2P across
  CPU host bridges and further apart"; AMD x86 hosts with at most 2 GPUs allow up to SYS);
  beyond that the bytes go **SHM**, through a buffer in host memory;
* GPUs on different hosts talk **NET**; a NIC is used with GPUDirect RDMA (the NIC reads the
  GPU's memory) when the GPU-NIC path is at most PXB (``NCCL_NET_GDR_LEVEL``), else through host
  memory.

Bandwidth classes are nominal, one direction: NVLink 2, 3 and 4 (V100, A100, H100/H200) carry
25 GB/s per link (NVIDIA's 300 / 600 / 900 GB/s total over 6 / 12 / 18 links, both ways);
NVLink 1 (P100) 20, NVLink 5 (B200) 50. ``nvidia-smi nvlink -s`` on our H200 reports
26.562 GB/s per link (``data/h200x2-nccl-logs/nvidia-smi-nvlink.txt``), 17/16 of the
datasheet's data rate; NVIDIA does not document what the extra counts, so the datasheet's
figure is the one used (:func:`dtlab.bench.ceiling.data_rate`). PCIe is its link's
rate (:func:`dtlab.topology.pcie_gbps`: Gen4 x16 31.5 GB/s, Gen5 x16 63.0), when the source says.

>>> from dtlab.topology import load
>>> t = load("data/topologies/asus-esc8000a-e12-4xrtx6000ada-topo.txt")
>>> [(r["a"], r["b"], r["transport"]) for r in predict_pairs(t)][:2]
[('GPU0', 'GPU1', 'SHM'), ('GPU0', 'GPU2', 'SHM')]
"""

from __future__ import annotations

import re
from typing import Any

from .matrix import LINK_RANK, link_kind, link_order

NVLINK_GBPS = {60: 20.0, 70: 25.0, 80: 25.0, 90: 25.0, 100: 50.0}  # per link, one direction, by SM
NVLINK_GBPS_DEFAULT = 25.0  # NVLink 2-4, when the source does not name the GPU generation
CLASSES = ["nvlink", "pcie", "host", "net"]  # best to worst


def _gpu_pairs(topo: dict) -> list[tuple[str, str]]:
    g = topo["gpus"]
    return [(g[i], g[j]) for i in range(len(g)) for j in range(i + 1, len(g))]


def path_between(topo: dict, a: str, b: str) -> str:
    """The matrix's path kind between two devices (either order); ValueError if it has none."""
    kind = topo["links"].get((a, b)) or topo["links"].get((b, a))
    if kind is None:
        raise ValueError(f"the topology has no path between {a} and {b}")
    return kind


def predict_pairs(topo: dict, *, p2p_level: str = "PXB", nvlink_gbps: float | None = None,
                  pcie_gbps: float | None = None) -> list[dict]:
    """One row per GPU pair: ``a, b, kind`` (the path), ``transport`` (P2P/NVLink, P2P/PCIe,
    SHM), ``cls`` (nvlink, pcie, host), ``gbps`` (nominal one-direction bound, or None when
    the source does not give the PCIe rate) and ``why``.

    ``p2p_level`` is NCCL_P2P_LEVEL (PIX, PXB, PHB, NODE or SYS; "LOC" = NCCL_P2P_DISABLE=1);
    left at PXB, an NCCL XML naming an AMD CPU with at most 2 GPUs gets SYS, as NCCL does
    (``nvidia-smi topo -m`` does not name the CPU: pass ``p2p_level`` yourself there);
    ``nvlink_gbps`` per link and ``pcie_gbps`` per link override what the topology says.
    """
    if p2p_level not in ("LOC", *LINK_RANK[1:]):
        raise ValueError(f"p2p_level={p2p_level!r}: one of LOC, PIX, PXB, PHB, NODE, SYS")
    vendors = {(c.get("vendor") or "").lower() for c in topo.get("cpus", [])}
    if p2p_level == "PXB" and vendors & {"authenticamd", "amd"} and len(topo["gpus"]) <= 2:
        p2p_level = "SYS"  # NCCL: "Allow P2P between pairs of GPU devices on AMD systems"
    info = topo.get("gpu_info", {})
    rows = []
    for a, b in _gpu_pairs(topo):
        kind = path_between(topo, a, b)
        pcie = pcie_gbps or _min(info.get(a, {}).get("pcie_gbps"), info.get(b, {}).get("pcie_gbps"))
        if link_kind(kind) == "NV" and p2p_level != "LOC":
            sm = info.get(a, {}).get("sm")
            per = nvlink_gbps or NVLINK_GBPS.get(sm, NVLINK_GBPS_DEFAULT)
            n = int(kind[2:])
            rows.append(dict(a=a, b=b, kind=kind, transport="P2P/NVLink", cls="nvlink",
                             gbps=n * per, why=f"{n} NVLink(s) x {per:g} GB/s"))
        elif p2p_level != "LOC" and LINK_RANK.index(link_kind(kind)) <= LINK_RANK.index(p2p_level):
            rows.append(dict(a=a, b=b, kind=kind, transport="P2P/PCIe", cls="pcie", gbps=pcie,
                             why=f"{kind} is within NCCL_P2P_LEVEL={p2p_level}: GPU to GPU over PCIe"))
        else:
            why = ("NCCL_P2P_DISABLE" if p2p_level == "LOC" else
                   f"{kind} is beyond NCCL_P2P_LEVEL={p2p_level}") + \
                  ": through host memory, bounded by each GPU's PCIe link" + \
                  (" and the CPU interconnect" if link_kind(kind) == "SYS" else "")
            rows.append(dict(a=a, b=b, kind=kind, transport="SHM", cls="host", gbps=pcie, why=why))
    return rows


def _min(*values):
    known = [v for v in values if v is not None]
    return min(known) if known else None


def slowest_pairs(topo: dict) -> dict:
    """The worst GPU-GPU path in the topology and every pair that has it:
    ``{"kind": "SYS", "pairs": [["GPU0", "GPU4"], ...]}`` (pairs in GPU order)."""
    pairs = _gpu_pairs(topo)
    if not pairs:
        return {"kind": None, "pairs": []}
    worst = max((path_between(topo, a, b) for a, b in pairs), key=link_order)
    return {"kind": worst, "pairs": [[a, b] for a, b in pairs if path_between(topo, a, b) == worst]}


def nearest_nic(topo: dict, gpu: str, nics: list[str] | None = None) -> tuple[str, str] | None:
    """``(nic, path kind)`` of the NIC of ``nics`` (default: all) with the best PCIe path to
    ``gpu`` (PIX < PXB < PHB < NODE < SYS), ties broken by the NIC's order; None if none has one."""
    best = None
    for n in topo["nics"] if nics is None else nics:
        kind = topo["links"].get((gpu, n)) or topo["links"].get((n, gpu))
        if kind and (best is None or link_order(kind) < link_order(best[1])):
            best = (n, kind)
    return best


def gdr_path(kind: str) -> bool:
    """NCCL lets a NIC reach the GPU's memory directly (GPUDirect RDMA) over a path of at most
    PXB (its default NCCL_NET_GDR_LEVEL)."""
    return LINK_RANK.index(link_kind(kind)) <= LINK_RANK.index("PXB")


def nearest_nics(topo: dict) -> dict[str, dict]:
    """Each GPU's nearest NIC (:func:`nearest_nic`). ``{gpu: {nic, name, kind, gdr}}`` with
    ``gdr`` from :func:`gdr_path`; None values when the topology has no NIC."""
    out = {}
    for g in topo["gpus"]:
        best = nearest_nic(topo, g)
        if best is None:
            out[g] = {"nic": None, "name": None, "kind": None, "gdr": None}
        else:
            out[g] = {"nic": best[0], "name": topo["nic_names"].get(best[0], best[0]),
                      "kind": best[1], "gdr": gdr_path(best[1])}
    return out


def ring_bottleneck(topo: dict, order: list[str]) -> dict:
    """The slowest hop of a ring visiting ``order`` (and back to the start): the first hop with
    the worst path. ``{"hop": [a, b], "kind": ..., "hops": [[a, b, kind], ...]}``."""
    if len(order) < 2:
        raise ValueError("a ring needs at least 2 GPUs")
    hops = [[order[i], order[(i + 1) % len(order)]] for i in range(len(order))]
    kinds = [path_between(topo, a, b) for a, b in hops]
    worst = max(kinds, key=link_order)
    i = kinds.index(worst)
    return {"hop": hops[i], "kind": worst, "hops": [h + [k] for h, k in zip(hops, kinds)]}


def _pair_key(x: Any) -> str:
    return x if isinstance(x, str) else f"GPU{int(x)}"


def measured_pairs(measured: Any) -> dict[tuple[str, str], float]:
    """A measured P2P matrix as {("GPU0", "GPU1"): GB/s}: a dict keyed by (i, j) (ints or GPU
    names), or a pandas DataFrame -- square (index = source, columns = destination) or long with
    two id columns and one of GBps / gbps / bw / busbw / algbw. Diagonal entries are dropped."""
    if hasattr(measured, "columns"):  # pandas, without importing it here
        cols = [c for c in measured.columns if str(c).lower() in ("gbps", "bw", "busbw", "algbw", "bandwidth")]
        ids = [c for c in measured.columns if str(c).lower() in ("src", "dst", "a", "b", "i", "j", "from", "to")]
        if cols and len(ids) == 2:
            measured = {(r[ids[0]], r[ids[1]]): float(r[cols[0]]) for _, r in measured.iterrows()}
        else:
            measured = {(i, j): float(measured.loc[i, j]) for i in measured.index
                        for j in measured.columns if measured.loc[i, j] == measured.loc[i, j]}
    out = {}
    for (i, j), v in dict(measured).items():
        a, b = _pair_key(i), _pair_key(j)
        if a != b and v is not None:
            out[(a, b)] = float(v)
    return out


def reconcile(topo: dict, measured: Any, *, tolerance: float = 0.7, **predict_kw) -> list[dict]:
    """Predicted vs measured, one row per measured direction: ``a, b, kind, transport, cls,
    predicted_gbps, measured_gbps, ratio, verdict``.

    The reference is the predicted bound when the topology gives one, else the best measured
    pair of the same class (pairs that should be alike). ``verdict``: "slower" below
    ``tolerance`` x reference -- a pair to look at -- ; "faster than its class" when a pair
    predicted to go through host memory (or a slower class) measures at least as fast as the
    best pair of a better class; else "as predicted".
    """
    pred = {(r["a"], r["b"]): r for r in predict_pairs(topo, **predict_kw)}
    pred.update({(b, a): r for (a, b), r in list(pred.items())})
    got = measured_pairs(measured)
    unknown = [p for p in got if p not in pred]
    if unknown:
        raise ValueError(f"measured pairs not in the topology: {unknown[:3]} (GPUs: {topo['gpus']})")
    best = {}
    for p, v in got.items():
        cls = pred[p]["cls"]
        best[cls] = max(best.get(cls, 0.0), v)
    rows = []
    for (a, b), v in sorted(got.items(), key=lambda kv: (topo["gpus"].index(kv[0][0]),
                                                         topo["gpus"].index(kv[0][1]))):
        r = pred[(a, b)]
        ref = r["gbps"] or best[r["cls"]]
        better = [best[c] for c in CLASSES[:CLASSES.index(r["cls"])] if c in best]
        if v < tolerance * ref:
            verdict = "slower"
        elif better and v >= min(better):
            verdict = "faster than its class"
        else:
            verdict = "as predicted"
        rows.append(dict(a=a, b=b, kind=r["kind"], transport=r["transport"], cls=r["cls"],
                         predicted_gbps=r["gbps"], measured_gbps=v, ratio=v / ref if ref else None,
                         verdict=verdict))
    return rows


_MATRIX_TITLE = re.compile(r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth")


def parse_p2p_bandwidth_test(text: str, which: str = "Unidirectional P2P=Enabled") -> dict:
    """One bandwidth matrix of CUDA's ``p2pBandwidthLatencyTest`` (cuda-samples) as
    {("GPU0", "GPU1"): GB/s}, diagonal dropped; ``which`` picks the matrix by its title's start.

    >>> m = parse_p2p_bandwidth_test(open("data/topologies/asus-esc8000a-e12-4xrtx6000ada-p2p.txt").read())
    >>> m[("GPU0", "GPU2")]
    26.32
    """
    lines = text.splitlines()
    for k, ln in enumerate(lines):
        if _MATRIX_TITLE.match(ln.strip()) and ln.strip().startswith(which):
            cols = lines[k + 1].split()[1:]  # "D\D 0 1 2 3"
            out = {}
            for row in lines[k + 2:]:
                cells = row.split()
                if not cells or not cells[0].isdigit() or len(cells) != len(cols) + 1:
                    break
                for c, v in zip(cols, cells[1:]):
                    if c != cells[0]:
                        out[(f"GPU{cells[0]}", f"GPU{c}")] = float(v)
            if out:
                return out
    raise ValueError(f"no {which!r} bandwidth matrix of p2pBandwidthLatencyTest in the text")
