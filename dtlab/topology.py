"""How are the GPUs connected? Reading ``nvidia-smi topo -m``.

The matrix names the path between every pair of GPUs, best first:

====  ==========================================================================
NV#   NVLink, # links bonded (H100/H200 SXM: NV18 = 18 NVLink4 links, ~478 GB/s a way raw)
PIX   one PCIe switch
PXB   several PCIe switches, no host bridge
PHB   through a PCIe host bridge (the CPU)
NODE  across host bridges inside one NUMA node
SYS   across the CPU interconnect (QPI/UPI/Infinity Fabric) between NUMA nodes
====  ==========================================================================

>>> m = parse_topo_matrix(open("data/h200x2-topo/nvidia-smi-topo.txt").read())   # doctest: +SKIP
>>> m["links"][("GPU0", "GPU1")]                                                   # doctest: +SKIP
'NV18'
"""

from __future__ import annotations

import re
import shutil
import subprocess

LINK_RANK = ["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]  # best to worst


def parse_topo_matrix(text: str) -> dict:
    """{"devices": [...], "links": {(a, b): kind}, "affinity": {dev: {column: value}}}."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header row
    lines = [ln.rstrip() for ln in text.splitlines()]
    header = None
    devices: list[str] = []
    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    for ln in lines:
        if header is None:
            cols = ln.split()
            if cols and re.fullmatch(r"(GPU|NIC|mlx)\S*", cols[0]) and "X" not in cols:
                # the header row: device names, then free-text columns split on 2+ spaces
                header = re.split(r"\t+| {2,}", ln.strip())
            continue
        if not ln.strip() or ln.lstrip().startswith("Legend"):
            break
        cells = re.split(r"\t+| {2,}", ln.strip())
        row = cells[0]
        devices.append(row)
        for col, val in zip(header, cells[1:]):
            if re.fullmatch(r"(GPU|NIC)\d+|mlx\S+", col):
                if val != "X":
                    links[(row, col)] = val
            else:
                affinity.setdefault(row, {})[col] = val
    if header is None:
        raise ValueError("not an `nvidia-smi topo -m` matrix: no header row of GPU columns found")
    return {"devices": devices, "links": links, "affinity": affinity}


def link_kind(value: str) -> str:
    """'NV18' -> 'NV'; the coarse kind used to rank paths."""
    return "NV" if value.startswith("NV") else value


def nvidia_smi_topo() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        p = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return p.stdout if p.returncode == 0 else None
