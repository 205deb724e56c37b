"""Reading NCCL's topology XML (``NCCL_TOPO_DUMP_FILE``, or a ``NCCL_TOPO_FILE`` a cloud publishes).

NCCL writes what it detected when ``NCCL_TOPO_DUMP_FILE=path`` is set (rank 0 of a
communicator writes it at init). The elements, as NCCL's ``src/graph/xml.cc`` writes them::

    <system version="1">
      <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel">   one per NUMA node
        <pci busid="0000:0c:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
          <pci busid="0000:13:00.0" class="0x030200" ...>                         a PCIe switch
            <gpu dev="0" sm="80" rank="0" gdr="1">                                 holds devices
              <nvlink target="0000:c3:00.0" count="2" tclass="0x068000"/>        tclass 0x068000:
            </gpu>                                                                 an NVSwitch
          </pci>
          <pci busid="0000:1a:00.0" class="0x020000">
            <nic><net name="mlx5_0" dev="0" speed="200000" port="1" gdr="1"/></nic>   speed: Mb/s
    ...

Published topology files may leave elements out (Azure's ``ndv5-topo.xml`` has no ``<gpu>`` or
``<nic>``): a ``pci`` of class 0x03xx is then a GPU and one of class 0x02xx a NIC, numbered in
bus-id order. Paths between devices are classified as NCCL does (``src/graph/paths.cc``): one
PCIe switch between them PIX, more PXB, through the CPU PHB (NCCL has no NODE), across CPUs SYS;
NVLink NV# with # the links between the two GPUs, directly or through NVSwitches.

>>> t = parse_nccl_topo(open("data/topologies/simai-8xa100-4cx6-nccl-topo.xml").read())
>>> len(t["gpus"]), t["links"][("GPU0", "GPU7")], t["links"][("GPU1", "NIC1")]
(8, 'NV12', 'PXB')
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

NVSWITCH_CLASS = "0x068000"  # the PCI class NCCL gives an NVLink target that is an NVSwitch


def pcie_gbps(link_speed: str | None, link_width: str | int | None) -> float | None:
    """One direction of a PCIe link in GB/s from its transfer rate and lanes: 8b/10b coding up to
    5 GT/s (Gen1-2), 128b/130b for 8-32 GT/s (Gen3-5); the PCI-SIG base specification's rates.

    >>> round(pcie_gbps("16.0 GT/s PCIe", "16"), 1), round(pcie_gbps("32 GT/s", 16), 1)
    (31.5, 63.0)
    """
    m = re.match(r"\s*([\d.]+)\s*GT/s", link_speed or "")
    if not m or not str(link_width or "").strip().isdigit():
        return None
    gt = float(m.group(1))
    coding = 0.8 if gt <= 5 else 128 / 130
    return gt * coding / 8 * int(link_width)


PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # GT/s per lane -> generation


def pcie_gen(link_speed: str | None) -> int | None:
    """'16.0 GT/s PCIe' -> 4."""
    m = re.match(r"\s*([\d.]+)\s*GT/s", link_speed or "")
    return PCIE_GEN.get(float(m.group(1))) if m else None


def _path_kind(a: tuple[int, list[str]], b: tuple[int, list[str]]) -> str:
    """NCCL's PCIe path type between two devices given (cpu index, chain of PCI bus ids from the
    CPU down to the device's own)."""
    (cpu_a, chain_a), (cpu_b, chain_b) = a, b
    if cpu_a != cpu_b:
        return "SYS"
    common = 0
    while common < min(len(chain_a), len(chain_b)) and chain_a[common] == chain_b[common]:
        common += 1
    if common == 0:
        return "PHB"
    if common == len(chain_a) == len(chain_b):
        return "PIX"  # two ports of one card
    # bridges strictly between the two ends: each side's own below the shared one, and it
    bridges = (len(chain_a) - 1 - common) + (len(chain_b) - 1 - common) + 1
    return "PIX" if bridges <= 1 else "PXB"


# PCIe trees are a handful of switches deep; 64 is past any machine, below Python's recursion limit
MAX_PCI_DEPTH = 64


def parse_nccl_topo(text: str) -> dict:
    """The XML as plain data, in the shape :func:`parse_topo_matrix` returns plus what only NCCL
    records; ValueError if ``text`` is not an NCCL topology.

    Extra keys: ``cpus`` (numaid, affinity, arch, vendor), ``pci`` (every PCI element: busid,
    class, link_speed, link_width, parent), ``gpu_info`` (per GPU: busid, dev, rank, sm, gdr,
    PCIe gen and GB/s), ``nvlinks`` (gpu, target, count, tclass), ``nets`` (per NIC: name, dev,
    speed_gbps, port, gdr, busid).
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not an NCCL topology XML: {e}") from None
    if root.tag != "system":
        raise ValueError(f"not an NCCL topology XML: the root element is <{root.tag}>, not <system>")
    cpus, pci, gpus, nets, nvlinks = [], {}, [], [], []

    def walk(el, cpu: int, chain: list[str]) -> None:
        if len(chain) > MAX_PCI_DEPTH:  # recursing on would end in a RecursionError
            raise ValueError(f"not an NCCL topology XML: <pci> nested deeper than "
                             f"{MAX_PCI_DEPTH} levels")
        for child in el:
            if child.tag == "pci":
                bus = child.get("busid", "").lower()
                pci[bus] = {"busid": bus, "class": child.get("class"), "parent": chain[-1] if chain
                            else None, "link_speed": child.get("link_speed"),
                            "link_width": child.get("link_width")}
                here = chain + [bus]
                gpu = child.find("gpu")
                cls = child.get("class") or ""
                if gpu is not None or (cls.startswith("0x03") and child.find("nic") is None
                                       and not len(child)):
                    gpus.append((cpu, here, gpu))
                    for link in (gpu if gpu is not None else []):
                        if link.tag == "nvlink":
                            nvlinks.append({"busid": bus, "target": link.get("target", "").lower(),
                                            "count": int(link.get("count", "1")),
                                            "tclass": link.get("tclass")})
                elif cls.startswith("0x02") and not len(child):
                    nets.append((cpu, here, None))
                walk(child, cpu, here)
            elif child.tag == "nic":
                for net in child.findall("net"):
                    nets.append((cpu, chain, net))

    for el in root:
        if el.tag == "cpu":
            cpus.append({"numaid": int(el.get("numaid", len(cpus))), "affinity": el.get("affinity"),
                         "arch": el.get("arch"), "vendor": el.get("vendor")})
            walk(el, len(cpus) - 1, [])
    if not gpus and not nets:
        raise ValueError("NCCL topology XML: no GPU and no NIC under any <cpu>")

    def gpu_key(g):
        dev = g[2].get("dev") if g[2] is not None else None
        return (0, int(dev), "") if dev is not None else (1, 0, g[1][-1])

    gpus.sort(key=gpu_key)
    nets.sort(key=lambda n: (0, int(n[2].get("dev", 0)), "") if n[2] is not None else (1, 0, n[1][-1]))
    names = {}
    where = {}
    gpu_info, net_info = {}, {}
    for i, (cpu, chain, el) in enumerate(gpus):
        name = f"GPU{el.get('dev') if el is not None and el.get('dev') is not None else i}"
        where[name] = (cpu, chain)
        names[chain[-1]] = name
        p = pci[chain[-1]]
        gpu_info[name] = {"busid": chain[-1], "numa": cpus[cpu]["numaid"],
                          **{k: (int(el.get(k)) if el is not None and el.get(k) is not None else None)
                             for k in ("dev", "rank", "sm", "gdr")},
                          "pcie_gen": pcie_gen(p["link_speed"]), "pcie_width": _width(p),
                          "pcie_gbps": pcie_gbps(p["link_speed"], p["link_width"])}
    for i, (cpu, chain, el) in enumerate(nets):
        name = f"NIC{i}"
        where[name] = (cpu, chain)
        speed = el.get("speed") if el is not None else None
        net_info[name] = {"name": el.get("name") if el is not None else (chain[-1] if chain else name),
                          "busid": chain[-1] if chain else None, "numa": cpus[cpu]["numaid"],
                          "dev": int(el.get("dev")) if el is not None and el.get("dev") else None,
                          "port": el.get("port") if el is not None else None,
                          "gdr": int(el.get("gdr")) if el is not None and el.get("gdr") else None,
                          "speed_gbps": int(speed) / 8000 if speed and speed.isdigit() else None}
    devices = list(where)
    links: dict[tuple[str, str], str] = {}
    for a in devices:
        for b in devices:
            if a != b:
                links[(a, b)] = _path_kind(where[a], where[b])
    # NVLink: to another GPU directly, or to NVSwitches (every GPU on them is reachable)
    direct: dict[tuple[str, str], int] = {}
    to_switch: dict[str, int] = {}
    for link in nvlinks:
        src = names[link["busid"]]
        if link["target"] in names:
            pair = (src, names[link["target"]])
            direct[pair] = direct.get(pair, 0) + link["count"]
        elif link["tclass"] == NVSWITCH_CLASS:
            to_switch[src] = to_switch.get(src, 0) + link["count"]
    for a in gpu_info:
        for b in gpu_info:
            if a != b:
                n = direct.get((a, b), 0) or direct.get((b, a), 0)
                n += min(to_switch.get(a, 0), to_switch.get(b, 0))
                if n:
                    links[(a, b)] = f"NV{n}"
    gpu_names = list(gpu_info)
    return {"source": "NCCL topology XML", "devices": devices, "gpus": gpu_names,
            "nics": list(net_info), "nic_names": {n: v["name"] for n, v in net_info.items()},
            "links": links, "affinity": {}, "numa": {g: gpu_info[g]["numa"] for g in gpu_names},
            "cpus": cpus, "pci": list(pci.values()), "gpu_info": gpu_info,
            "nvlinks": [{**{k: v for k, v in link.items() if k != "busid"},
                         "gpu": names[link["busid"]]} for link in nvlinks],
            "nets": net_info}


def _width(p: dict) -> int | None:
    w = str(p.get("link_width") or "")
    return int(w) if w.isdigit() else None
