"""Topologies in and out: a file of either kind in, plain JSON or a page of text out (what
``dtlab topo [FILE] [--json]`` prints)."""

from __future__ import annotations

from ..paths import read_bytes, shown
from .matrix import parse_topo_matrix
from .nccl_xml import parse_nccl_topo
from .predict import nearest_nics, predict_pairs

HINT = "give `nvidia-smi topo -m` output or an NCCL topology XML (NCCL_TOPO_DUMP_FILE)"


def parse(text: str) -> dict:
    """``nvidia-smi topo -m`` text or NCCL topology XML, told apart by the first character."""
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith("<"):
        return parse_nccl_topo(text)
    return parse_topo_matrix(text)


def load(path: str) -> dict:
    """:func:`parse` of a file; FileNotFoundError when it is not there, ValueError when it is
    not a readable regular file (:func:`dtlab.paths.read_bytes`), not text, or holds no
    topology (the message names the file)."""
    raw = read_bytes(path, HINT)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{shown(path)} is not text: {HINT}") from None
    try:
        return parse(text)
    except ValueError as e:
        raise ValueError(f"{shown(path)}: {e}: {HINT}") from None


class TopoReport:
    """A topology as a report (:mod:`dtlab.reporting`): ``to_dict()`` is :func:`to_json`,
    ``render()`` is :func:`render`."""

    def __init__(self, topo: dict):
        self.topo = topo

    def to_dict(self) -> dict:
        return to_json(self.topo)

    def render(self) -> str:
        return render(self.topo)


def to_json(topo: dict) -> dict:
    """Plain JSON data: ``devices``, ``links`` [{a, b, kind}] (each pair once, in device order),
    ``affinity``, then ``gpus``, ``nics``, ``nic_names``, ``numa``, ``predicted`` (per GPU pair),
    ``nearest_nic`` and whatever else the source gave (NCCL's cpus, gpu_info, nets, nvlinks; NVML
    and peer access on a live machine)."""
    devices = topo["devices"]
    links = []
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            kind = topo["links"].get((a, b)) or topo["links"].get((b, a))
            if kind:
                links.append({"a": a, "b": b, "kind": kind})
    out = {"source": topo["source"], "devices": devices, "links": links,
           "affinity": topo["affinity"], "gpus": topo["gpus"], "nics": topo["nics"],
           "nic_names": topo["nic_names"], "numa": topo["numa"],
           "predicted": predict_pairs(topo), "nearest_nic": nearest_nics(topo)}
    for key in ("cpus", "gpu_info", "nets", "nvlinks", "nvml", "peer_access"):
        if key in topo:
            out[key] = topo[key]
    return out


def render(topo: dict) -> str:
    """A page for a person: the matrix (GPU rows), each GPU's NUMA node and nearest NIC, and the
    transport predicted for each GPU pair."""
    cols = topo["gpus"] + topo["nics"]
    width = max([len(c) for c in cols] + [4]) + 2
    lines = [f"{topo['source']}: {len(topo['gpus'])} GPUs, {len(topo['nics'])} NICs", "",
             " " * width + "".join(c.ljust(width) for c in cols)]
    for g in topo["gpus"]:
        cells = ["X" if c == g else (topo["links"].get((g, c)) or topo["links"].get((c, g)) or "?")
                 for c in cols]
        lines.append(g.ljust(width) + "".join(x.ljust(width) for x in cells))
    if topo["nics"]:
        lines += ["", "NICs: " + ", ".join(f"{n} = {topo['nic_names'][n]}" for n in topo["nics"])]
    lines += ["", "per GPU:"]
    near = nearest_nics(topo)
    for g in topo["gpus"]:
        n = near[g]
        nic = (f"nearest NIC {n['name']} ({n['nic']}, {n['kind']}, "
               f"{'GPUDirect RDMA' if n['gdr'] else 'through host memory'})") if n["nic"] else "no NIC"
        numa = topo["numa"].get(g)
        lines.append(f"  {g}: NUMA node {numa if numa is not None else 'unknown'}; {nic}")
    pairs = predict_pairs(topo)
    if pairs:
        lines += ["", "predicted, per GPU pair (NCCL's default rules):"]
        for r in pairs:
            bw = f"~{r['gbps']:.0f} GB/s" if r["gbps"] else "PCIe rate unknown"
            lines.append(f"  {r['a']}-{r['b']}: {r['kind']:<5} -> {r['transport']:<10} {bw}")
    if topo.get("peer_access"):
        pa = topo["peer_access"]
        lines += ["", "torch.cuda.can_device_access_peer: " + "; ".join(
            f"{i}->{j} {'yes' if pa[i][j] else 'no'}" for i in range(len(pa))
            for j in range(len(pa)) if i != j)]
    return "\n".join(lines)


def gpu_rows(topo: dict) -> dict[str, dict[str, str]]:
    """The GPU rows of the matrix as nested plain dicts, NICs by their matrix names:
    ``{"GPU0": {"GPU1": "NV18", "NIC0": "PIX", ...}, ...}`` (no self entries)."""
    cols = topo["gpus"] + topo["nics"]
    return {g: {c: topo["links"].get((g, c)) or topo["links"][(c, g)] for c in cols if c != g}
            for g in topo["gpus"]}


def provenance(path: str) -> str:
    """Where a file under data/topologies comes from: the section of that folder's README.md
    headed by the file's name (source, machine, date, what it shows)."""
    import os

    readme = os.path.join(os.path.dirname(path), "README.md")
    name = os.path.basename(path)
    try:
        with open(readme, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        raise ValueError(f"no README.md beside {path}: every recorded file needs its source") from None
    for section in text.split("\n## ")[1:]:
        title, _, body = section.partition("\n")
        if name in title or name.replace("-p2p.txt", "-topo.txt") in title:
            return f"{name} -- {body.strip()}"
    raise ValueError(f"{readme} has no section for {name}")
