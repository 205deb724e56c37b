"""Pass 1, network lines: what NCCL says about the NICs it found and how each connection travels.

The line shapes a multi-node job adds (``src/bootstrap.cc``, ``src/transport/net_ib.cc``,
``net_socket.cc``, ``src/transport/net.cc``, ``src/graph/paths.cc``):

* ``Bootstrap : Using eth0:10.0.0.1<0>`` -- the interface the ranks find each other through
  (out of band; 2.25+ prints ``Bootstrap: Using``, older ones ``[0]eth0:...<0> [1]...``);
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>`` and
  ``NET/Socket : Using [0]eth0:10.0.0.1<0>`` -- the devices of the network it will use,
  ``NET/IB : No device found.`` where there is no HCA;
* ``NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)`` (2.12+) and
  ``GPU Direct RDMA Enabled for GPU 1a000 / HCA 0 (distance 3 <= 4), read 1`` (older);
* on each connection, ``via NET/<net>/<dev>[/GDRDMA][/Shared]``: ``<net>`` is the network
  (``IB``, ``Socket``, or a plugin: ``IBext`` / ``IBext_v8`` from HPC-X's RDMA plugin),
  ``<dev>`` the index into the list printed by ``NET/... : Using``, ``GDRDMA`` when the NIC
  reads and writes GPU memory directly (GPUDirect RDMA) instead of through a host bounce buffer.

>>> classify_net("NET/IB : Using [0]mlx5_6:1/RoCE ; OOB xgbe4:10.0.0.7<0>")
('net_devices', {'net': 'IB', 'devices': ['mlx5_6:1/RoCE'], 'oob': 'xgbe4:10.0.0.7'})
>>> net_via("NET/IB/0/GDRDMA")
{'net': 'IB', 'family': 'IB', 'dev': 0, 'gdrdma': True, 'shared': False}
>>> net_via("P2P/CUMEM") is None
True
"""

from __future__ import annotations

import re

from .tuning import first_match

# "<if>:<addr><port>" as socket.cc prints an address; the address may be IPv6 or a name
_IF_ADDR = re.compile(r"(?:\[\d+\])?(?P<ifname>[\w.\-]+):(?P<addr>\S+?)<\d+>")


def bootstrap(msg: str) -> dict | None:
    m = re.match(r"^Bootstrap ?: Using (?P<rest>.+)$", msg)
    if not m:
        return None
    ifs = [f"{i['ifname']}:{i['addr']}" for i in _IF_ADDR.finditer(m["rest"])]
    return {"interfaces": ifs} if ifs else None


_NET_USING = re.compile(r"^NET/(?P<net>\w+) ?: Using (?P<rest>.*)$")


def net_devices(msg: str) -> dict | None:
    if re.match(r"^NET/\w+ ?: No device found", msg):
        return {"net": msg[4:].split()[0].rstrip(":"), "devices": [], "oob": None}
    m = _NET_USING.match(msg)
    if not m or "interface" in m["rest"]:  # 2.3-era "Using interface ib0 for sideband ..."
        return None
    devs, _, oob = m["rest"].partition("OOB ")
    if m["net"] == "Socket":
        found = [f"{i['ifname']}:{i['addr']}" for i in _IF_ADDR.finditer(devs)]
    else:
        found = re.findall(r"\[\d+\](\S+?)(?=\s|;|$)", devs)
    o = _IF_ADDR.search(oob)
    return {"net": m["net"], "devices": found,
            "oob": f"{o['ifname']}:{o['addr']}" if o else None}


_GDR = re.compile(r"GPU Direct RDMA (?:\([^)]*\) )?(?P<state>[Ee]nabled|[Dd]isabled) for "
                  r"(?:GPU (?P<gpu>\w+) / )?HCA (?P<hca>\d+)(?: '(?P<name>[^']*)')?\s*(?P<why>.*)$")


def gdr(msg: str) -> dict | None:
    m = _GDR.search(msg)
    if not m:
        return None
    return {"enabled": m["state"].lower() == "enabled", "hca": int(m["hca"]), "name": m["name"],
            "gpu": m["gpu"], "why": m["why"].strip(" ()") or None}


NET_RECOGNIZERS = [("bootstrap", bootstrap), ("net_devices", net_devices), ("gdr", gdr)]


def classify_net(msg: str) -> tuple[str, dict] | None:
    return first_match(NET_RECOGNIZERS, msg)


# src/transport/net.cc: "via NET/%s/%d%s%s" name, netDev, useGdr ? "/GDRDMA" : "",
# shared ? "/Shared" : "" (some releases add "(PCI)"/"(DMABUF)" style notes after these)
_VIA = re.compile(r"^NET/(?P<net>[^/\s]+)/(?P<dev>\d+)(?P<flags>.*)$")


def net_via(via: str) -> dict | None:
    """The network, device index and GPUDirect RDMA flag of a ``via NET/...`` connection."""
    m = _VIA.match(via)
    if not m:
        return None
    net = m["net"]
    return {"net": net, "family": "IB" if net.startswith("IB") else net, "dev": int(m["dev"]),
            "gdrdma": "/GDRDMA" in m["flags"], "shared": "/Shared" in m["flags"]}


# nccl-tests' own table (not an NCCL line): "#  Rank  0 Group  0 Pid  27255 on  kolyoz1 device
# 0 [0x42] NVIDIA H100 80GB HBM3" (2.x; older releases print no "Group")
_TEST_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
                        r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>0x[0-9a-fA-F]+)\]\s*"
                        r"(?P<gpu>.*?)\s*$")


def nccl_tests_rank(line: str) -> dict | None:
    """A row of nccl-tests' "# Using devices" table: which host and GPU each rank runs on.

    >>> nccl_tests_rank("#  Rank  4 Group  0 Pid  25146 on    kolyoz2 device  0 [0x42] NVIDIA H100")
    {'rank': 4, 'pid': 25146, 'host': 'kolyoz2', 'device': 0, 'bus': '0x42', 'gpu': 'NVIDIA H100'}
    """
    m = _TEST_RANK.match(line)
    return m and {"rank": int(m["rank"]), "pid": int(m["pid"]), "host": m["host"],
                  "device": int(m["dev"]), "bus": m["bus"], "gpu": m["gpu"]}
