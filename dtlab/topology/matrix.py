"""Reading ``nvidia-smi topo -m``: the matrix of paths between GPUs and NICs, and their affinity.

What each cell means is NVIDIA's legend, printed under every matrix (NVML's
``nvmlGpuTopologyLevel_t`` names the same levels), best first:

====  ==========================================================================
NV#   a bonded set of # NVLinks (H100/H200 SXM: NV18, 18 NVLink4 links)
PIX   at most a single PCIe bridge (older drivers: "a single PCIe switch")
PXB   multiple PCIe bridges, without the PCIe host bridge
PHB   PCIe and a PCIe host bridge (typically the CPU)
NODE  PCIe and the interconnect between host bridges within one NUMA node
SYS   PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric);
      drivers before ~2018 printed SOC for it
====  ==========================================================================

Newer drivers name NICs NIC0, NIC1, ... in the matrix and map them to device names under
"NIC Legend:" (``NIC0: mlx5_0``); older ones put the device name (``mlx5_0``) in the matrix.
Run ``nvidia-smi topo -m`` on a GPU machine, or ``dtlab topo FILE`` on a saved copy.

>>> m = parse_topo_matrix(open("data/h200x2-nccl-logs/nvidia-smi-topo.txt").read())
>>> m["gpus"], m["links"][("GPU0", "GPU1")], m["numa"]["GPU0"]
(['GPU0', 'GPU1'], 'NV18', 0)
"""

from __future__ import annotations

import re

# Best to worst; SOC is what drivers before SYS printed for the same level.
LINK_RANK = ["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]
_KIND = re.compile(r"NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_DEVICE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\S+|(?:ib|eth|en|hsn|rdma|bnxt|efa|irdma)\S*")
_CELLS = re.compile(r"\t+| {2,}")


def link_kind(value: str) -> str:
    """'NV18' -> 'NV'; 'SOC' -> 'SYS'; the coarse kind used to rank paths."""
    return "NV" if value.startswith("NV") else "SYS" if value == "SOC" else value


def link_order(value: str) -> tuple[int, int]:
    """Sort key, best path first: more NVLinks beat fewer, any NVLink beats PCIe.

    >>> sorted(["SYS", "NV2", "PIX", "NV12", "NODE"], key=link_order)
    ['NV12', 'NV2', 'PIX', 'NODE', 'SYS']
    """
    kind = link_kind(value)
    return (LINK_RANK.index(kind), -int(value[2:]) if kind == "NV" else 0)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def parse_topo_matrix(text: str) -> dict:
    """The matrix as plain data; ValueError if ``text`` holds no matrix or a cell is no link kind.

    Returns ``{"source", "devices", "gpus", "nics", "nic_names", "links", "affinity", "numa"}``:
    ``links`` maps ``(row, column)`` to the cell (``("GPU0", "NIC0"): "PIX"``), both directions as
    printed; ``nic_names`` maps the matrix's NIC names to device names (``NIC0 -> mlx5_0``; an
    old-style ``mlx5_0`` maps to itself); ``affinity`` holds the free-text columns (CPU Affinity,
    NUMA Affinity, GPU NUMA ID) per row; ``numa`` is each GPU's NUMA node (``NUMA Affinity``, else
    ``GPU NUMA ID``; None when the matrix does not say).
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header row
    header: list[str] | None = None
    devices: list[str] = []
    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    nic_names: dict[str, str] = {}
    in_legend = done = False
    for ln in text.splitlines():
        if in_legend:
            m = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", ln)
            if m:
                nic_names[m.group(1)] = m.group(2)
            continue
        if ln.strip() == "NIC Legend:":
            in_legend = True
            continue
        cells = [c.strip() for c in _CELLS.split(ln.strip())]
        if header is None:
            if cells and _DEVICE.fullmatch(cells[0]) and "X" not in cells:
                header = cells  # device names, then free-text columns (CPU Affinity, ...)
            continue
        if done or (devices and (not ln.strip() or ln.lstrip().startswith("Legend"))):
            done = True  # the matrix ended: the legend follows, then the NIC legend
            continue
        if not cells or cells[0] not in header or cells[0] in devices:
            continue
        row = cells[0]
        devices.append(row)
        for col, val in zip(header, cells[1:]):
            if _DEVICE.fullmatch(col):
                if val == "X":
                    continue
                if not _KIND.fullmatch(val):
                    raise ValueError(f"nvidia-smi topo -m: row {row}, column {col}: {val!r} is "
                                     f"not a link kind (NV#, PIX, PXB, PHB, NODE, SYS)")
                links[(row, col)] = "SYS" if val == "SOC" else val
            elif val:
                affinity.setdefault(row, {})[col] = val
    if header is None or not devices:
        raise ValueError("not an `nvidia-smi topo -m` matrix: no header row of GPU columns "
                         "followed by device rows")
    gpus = [d for d in devices if d.startswith("GPU")]
    nics = [d for d in devices if not d.startswith("GPU")]
    for nic in nics:
        nic_names.setdefault(nic, nic)
    numa = {}
    for g in gpus:
        cols = affinity.get(g, {})
        node = _int(cols.get("NUMA Affinity"))
        numa[g] = node if node is not None else _int(cols.get("GPU NUMA ID"))
    return {"source": "nvidia-smi topo -m", "devices": devices, "gpus": gpus, "nics": nics,
            "nic_names": {n: nic_names[n] for n in nics}, "links": links,
            "affinity": affinity, "numa": numa}
