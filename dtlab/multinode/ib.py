"""The InfiniBand tools' output, read: ``ibstat``, ``perfquery``, perftest's ``ib_write_bw`` and
``ibtracert``. This course has no InfiniBand fabric; 04 reads outputs that people ran on theirs
and posted (``data/public-ib/``, each with its source), and the same functions read yours::

    from dtlab.multinode import ib
    ports = ib.ibstat(open("ibstat.txt").read())
    ib.port_problems(ports, expected_rate=400)   # [] when every port is up at its rate

Names and numbers are the InfiniBand Architecture Specification's, as the tools print them:
a port's logical state (PortState: 1 Down, 2 Initializing, 3 Armed, 4 Active) and physical
state (PortPhysicalState: 2 Polling, 3 Disabled, 5 LinkUp, ...); ``ibstatus`` prints the number
beside the name (``4: ACTIVE``, ``5: LinkUp``). Only an Active port carries traffic: NCCL's device
scan skips the others (``src/transport/net_ib.cc``: ``if (portAttr.state != IBV_PORT_ACTIVE)
continue;``).
"""

from __future__ import annotations

import re

ERROR_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
                  "PortRcvErrors", "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors",
                  "PortXmitDiscards", "PortXmitConstraintErrors", "PortRcvConstraintErrors",
                  "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors", "VL15Dropped")
# PortXmitData / PortRcvData count data octets divided by 4 (the specification's PortCounters)
DATA_UNIT_BYTES = 4

_CA = re.compile(r"^CA '([^']+)'")
_PORT = re.compile(r"^\s+Port (\d+):")
_FIELD = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_PORT_FIELDS = {"State": "state", "Physical state": "physical_state", "Rate": "rate",
                "Base lid": "base_lid", "SM lid": "sm_lid", "Link layer": "link_layer",
                "Port GUID": "port_guid"}


def _number(value: str):
    try:
        return int(value, 0)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


def ibstat(text: str) -> list[dict]:
    """One dict per port of ``ibstat``'s output: ``ca``, ``ca_type``, ``firmware``, ``port``,
    ``state``, ``physical_state``, ``rate`` (Gb/s), ``base_lid``, ``sm_lid``, ``link_layer``,
    ``port_guid`` (None where the output stops before a field: a cut excerpt)."""
    ports, ca = [], None
    for line in text.splitlines():
        if m := _CA.match(line):
            ca = {"ca": m.group(1), "ca_type": None, "firmware": None}
        elif ca is not None and (m := _PORT.match(line)):
            ports.append({**ca, "port": int(m.group(1)), **{k: None for k in _PORT_FIELDS.values()}})
        elif ca is not None and (m := _FIELD.match(line)):
            key, value = m.groups()
            if ports and ports[-1]["ca"] == ca["ca"] and key in _PORT_FIELDS:
                field = _PORT_FIELDS[key]
                ports[-1][field] = _number(value) if field in ("rate", "base_lid", "sm_lid") else value
            elif key == "CA type":
                ca["ca_type"] = value
            elif key == "Firmware version":
                ca["firmware"] = value
    return ports


def port_problems(ports: list[dict], expected_rate: float) -> list[dict]:
    """The ports of :func:`ibstat` that cannot carry a job at ``expected_rate`` Gb/s, each with
    why: not Active (no traffic at all), not LinkUp (no physical link), or trained below the
    rate (a lane down or a slower speed: it works, slowly)."""
    out = []
    for p in ports:
        why = []
        if p["state"] != "Active":
            why.append(f"state {p['state']} (only an Active port carries traffic)")
        if p["physical_state"] != "LinkUp":
            why.append(f"physical state {p['physical_state']} (no link)")
        if p["rate"] is None or p["rate"] < expected_rate:
            why.append(f"rate {p['rate']} Gb/s, expected {expected_rate:g}")
        if why:
            out.append({"ca": p["ca"], "port": p["port"], "why": "; ".join(why)})
    return out


def perfquery(text: str) -> dict:
    """``perfquery [-x]``'s counters as ``{name: int}`` (the ``Name:....value`` lines); with
    ``-x`` the data counters count 4-byte units (:data:`DATA_UNIT_BYTES`)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+):\.*(\S+)\s*$", line.strip())
        if m:
            out[m.group(1)] = _number(m.group(2))
    return out


def perftest(text: str) -> dict:
    """perftest's ``ib_write_bw`` (and siblings) output: ``header`` (``Device``, ``Link type``,
    ``Mtu``, ... as printed) and ``rows``: ``bytes``, ``iterations``, ``bw_peak_gbps``,
    ``bw_avg_gbps``, ``msg_rate_mpps`` (with ``--report_gbits``: Gb/s)."""
    header, rows = {}, []
    for line in text.splitlines():
        if m := re.match(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line):
            b, it, peak, avg, rate = m.groups()
            rows.append({"bytes": int(b), "iterations": int(it), "bw_peak_gbps": float(peak),
                         "bw_avg_gbps": float(avg), "msg_rate_mpps": float(rate)})
            continue
        for part in re.split(r"\t+", line):
            if m := re.match(r"^\s*([A-Za-z][\w .*-]*?)\s+:\s+(\S.*?)\s*$", part):
                header[m.group(1)] = m.group(2)
    return {"header": header, "rows": rows}


_HOP = re.compile(r'^\[(\d+)\] -> (\w+) port \{(0x[0-9a-f]+)\}\[(\d+)\] lid (\d+)-\d+ "(.*)"')


def ibtracert(text: str) -> list[dict]:
    """``ibtracert``'s route: one dict per hop, ``out_port`` (of the node before), ``kind``
    (switch or ca), ``guid``, ``in_port``, ``lid``, ``name``; the first and last lines say
    where it starts and ends."""
    return [{"out_port": int(m.group(1)), "kind": m.group(2), "guid": m.group(3),
             "in_port": int(m.group(4)), "lid": int(m.group(5)), "name": m.group(6)}
            for line in text.splitlines() if (m := _HOP.match(line.strip()))]
