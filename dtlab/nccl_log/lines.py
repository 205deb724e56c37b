"""Pass 1: recognise single NCCL log lines. No state; one small function per line shape.

Every line NCCL writes with ``NCCL_DEBUG=INFO`` starts with the prefix built in
``src/debug.cc``: an optional timestamp (``NCCL_DEBUG_TIMESTAMP_LEVELS``), then
``host:pid:tid [cudaDev] NCCL INFO <message>`` (WARN lines: ``[dev] file:line (func) NCCL WARN``).
Launchers may put their own prefix in front (torchrun ``[rank0]:`` / ``[default0]:``), so the
prefix is searched for anywhere in the line, not only at its start.

>>> r = split_line("[rank0]:gpu-a:1001:1001 [0] NCCL INFO NCCL version 2.28.9+cuda12.9")
>>> (r.host, r.pid, r.tid, r.dev, r.level), classify(r.msg)
(('gpu-a', 1001, 1001, 0, 'INFO'), ('version', {'version': '2.28.9', 'cuda': '12.9'}))
>>> classify("AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 1024 datatype 7 op 0 "
...          "root 0 comm 0x55aa [nranks=2] stream 0x5600")[1]["count"]
1024
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import codes
from .tuning import TABLE_RECOGNIZERS, first_match


@dataclass(frozen=True)
class Record:
    """One prefixed NCCL line: where it was written from and what it says."""

    source: str
    lineno: int
    host: str
    pid: int
    tid: int
    dev: int
    level: str  # INFO or WARN
    msg: str


# src/debug.cc: "%s:%d:%d " hostname, pid, tid; then "[%d] NCCL INFO %s" or
# "[%d] %s:%d (%s) NCCL WARN %s". getHostNameForLog() cuts the host at the first '.'.
_PREFIX = re.compile(
    r"(?<![\w.\-])(?P<host>[A-Za-z0-9][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\] "
    r"(?:\S+:\d+ (?:\([^)]*\) )?)?NCCL (?P<level>INFO|WARN) ?(?P<msg>.*?)\s*$")

# init.cc VERSION_STRING: "NCCL version " MAJOR.MINOR.PATCH SUFFIX "+cuda" CUDA_MAJOR.CUDA_MINOR.
# At NCCL_DEBUG=VERSION (and in old releases, on stdout) it is printed without the prefix.
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)[^\s+]*(?:\+cuda(?P<cuda>[\d.]+))?")


def split_line(line: str, source: str = "<text>", lineno: int = 0) -> Record | None:
    """The prefix fields and the message of one line, or None if it is not an NCCL line."""
    m = _PREFIX.search(line)
    if not m:
        return None
    return Record(source, lineno, m["host"], int(m["pid"]), int(m["tid"]), int(m["dev"]),
                  m["level"], m["msg"])


# Without the prefix, accept only the whole VERSION_STRING at the start of a line (after launcher
# or timestamp brackets): torch's error messages also say "..., NCCL version 2.28.9".
_BARE_VERSION = re.compile(r"^(?:\[[^\]]*\]:?\s*)*NCCL version \d+\.\d+\.\d+\S*\+cuda")


def bare_version(line: str) -> dict | None:
    """'NCCL version 2.18.5+cuda12.2' on a line without the host:pid:tid prefix."""
    if not _BARE_VERSION.match(line):
        return None
    m = _VERSION.search(line)
    return {"version": m["version"], "cuda": m["cuda"]}


# ---- one recogniser per message shape; each returns a dict of fields or None ----

def version(msg: str) -> dict | None:
    m = _VERSION.match(msg)
    return {"version": m["version"], "cuda": m["cuda"]} if m else None


# src/init.cc, ncclCommInitRankFunc / commFree. Shapes seen across releases:
#   2.18:  "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START"
#   2.19+: "ncclCommInitRank comm %p ... commId 0x%llx - Init START"
#          "ncclCommSplit comm %p ... busId %lx parent %p color %d key %d commId 0x%llx - Init START"
#   2.21+: "%s comm %p ..." with the API name; splits print
#          "parent %p splitCount %d color %d key %d- Init START" (no space before '-', no commId)
#   newer: "[Rank %d] %s comm %p ..."; DESTROY: "comm %p ... commId 0x%llx - Destroy COMPLETE"
_INIT = re.compile(
    r"^(?:\[Rank -?\d+\] )?(?:(?P<func>nccl\w+) )?comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>-?\d+) "
    r"nranks (?P<nranks>\d+)(?P<rest>.*?)\s*-\s*(?P<phase>Init START|Init COMPLETE|"
    r"Destroy COMPLETE|Abort COMPLETE)$")
_INIT_FIELDS = {"cudaDev": "cuda_dev", "nvmlDev": "nvml_dev", "busId": "bus_id",
                "commId": "comm_id", "parent": "parent", "splitCount": "split_count",
                "childCount": "split_count", "color": "color", "key": "key"}


def init(msg: str) -> dict | None:
    m = _INIT.match(msg)
    if not m:
        return None
    out = {"func": m["func"], "ptr": m["ptr"], "rank": int(m["rank"]), "nranks": int(m["nranks"]),
           "phase": m["phase"]}
    for name, value in re.findall(r"(\w+) (\S+)", m["rest"]):
        field = _INIT_FIELDS.get(name)
        if field in ("bus_id", "comm_id", "parent"):
            out[field] = value  # identifiers: keep NCCL's spelling (busId is %lx, no 0x)
        elif field:
            out[field] = int(value)
    return out


# src/init.cc: "Init timings - %s: rank %d nranks %d total %.2f (kernels %.2f, alloc %.2f, ...)"
# (2.19/2.20: "Init timings: rank %d nranks %d total %.2f (kernels ..., bootstrap ..., ...)")
_TIMINGS = re.compile(r"^Init timings(?: - (?P<func>\w+))?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
                      r"total (?P<total>[\d.]+)(?: \((?P<parts>[^)]*)\))?")


def init_timings(msg: str) -> dict | None:
    m = _TIMINGS.match(msg)
    if not m:
        return None
    parts = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)", m["parts"] or "")}
    return {"func": m["func"], "rank": int(m["rank"]), "nranks": int(m["nranks"]),
            "total_s": float(m["total"]), "parts_s": parts}


# src/init.cc: "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
_COMM_INFO = re.compile(r"^comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
                        r"nNodes (?P<nnodes>\d+) localRanks (?P<lranks>\d+) localRank (?P<lrank>\d+)")


def comm_info(msg: str) -> dict | None:
    m = _COMM_INFO.match(msg)
    return m and {"ptr": m["ptr"], "rank": int(m["rank"]), "nranks": int(m["nranks"]),
                  "n_nodes": int(m["nnodes"]), "local_ranks": int(m["lranks"]),
                  "local_rank": int(m["lrank"])}


# src/init.cc: "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels,
# %d p2p channels per peer" (older releases print a subset of these, same words)
def channel_counts(msg: str) -> dict | None:
    if " coll channels" not in msg:
        return None
    out = {}
    for n, kind, per_peer in re.findall(r"(\d+) (\w+) channels( per peer)?", msg):
        out[f"{kind}_per_peer" if per_peer else kind] = int(n)
    return out or None


# src/graph/rings.cc, rank 0 only: "Channel %02d/%02d :" then the ranks in ring order (" %3d"
# each in older releases, single-spaced in 2.28), "..." when the line is cut
_RING_ORDER = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :(?P<ranks>(?:\s+-?\d+)+)(?:\s*\.\.\.)?$")


def ring_order(msg: str) -> dict | None:
    m = _RING_ORDER.match(msg)
    return m and {"channel": int(m["ch"]), "n_channels": int(m["n"]),
                  "ranks": [int(x) for x in m["ranks"].split()]}


# src/init.cc (GRAPH): "Ring %02d : %d -> %d -> %d" (prev -> this rank -> next)
_RING_NEIGHBOURS = re.compile(r"^Ring (?P<ch>\d+) : (?P<prev>-?\d+) -> (?P<rank>\d+) -> (?P<next>-?\d+)$")


def ring_neighbours(msg: str) -> dict | None:
    m = _RING_NEIGHBOURS.match(msg)
    return m and {"channel": int(m["ch"]), "prev": int(m["prev"]), "rank": int(m["rank"]),
                  "next": int(m["next"])}


# src/init.cc: "Trees" then " [%d] %d/%d/%d->%d->%d" per channel: down0/down1/down2->rank->up
_TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(-?\d+)->(-?\d+)")


def trees(msg: str) -> dict | None:
    if not msg.startswith("Trees"):
        return None
    entries = [{"channel": int(c), "down": [int(d) for d in (d0, d1, d2) if int(d) >= 0],
                "rank": int(r), "up": int(up)} for c, d0, d1, d2, r, up in _TREE.findall(msg)]
    return {"trees": entries}


# src/transport/{p2p,shm,net}.cc, on the sending side of each connection:
#   p2p.cc "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/CUMEM%s%s" (also P2P/IPC, P2P/direct pointer,
#          P2P/MNNVL, P2P/indirect/...; %s = "/read", "/CE")
#   shm.cc "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s"            (no connection index)
#   net.cc "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (and [receive])
# The bracket is the nvmlDev in 2.19+; 2.18-era lines print the busId in hex there.
_TRANSPORT = re.compile(
    r"^Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<sdev>[0-9a-fA-Fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fA-Fx]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.+)$")


def transport(msg: str) -> dict | None:
    m = _TRANSPORT.match(msg)
    return m and {"channel": int(m["ch"]), "conn_index": int(m["conn"]) if m["conn"] else None,
                  "src_rank": int(m["src"]), "src_dev": m["sdev"], "dst_rank": int(m["dst"]),
                  "dst_dev": m["ddev"], "direction": m["dir"] or "send", "via": m["via"]}


# src/init.cc commAlloc: "Using network %s" (Socket, IB, or a plugin's name)
def network(msg: str) -> dict | None:
    m = re.match(r"^Using network (\S+)", msg)
    return m and {"network": m[1]}


# src/misc/param.cc: "%s set by environment to %lld." (integers, with a period) or "... to %s"
_ENV = re.compile(r"^(?P<name>NCCL_\w+) set by environment to (?P<value>.*)$")


def env(msg: str) -> dict | None:
    m = _ENV.match(msg)
    if not m:
        return None
    value = m["value"]
    if re.fullmatch(r"-?\d+\.", value):
        value = value[:-1]
    return {"name": m["name"], "value": value}


# src/enqueue.cc ncclEnqueueCheck, every rank, every call (COLL):
#   "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p
#    [nranks=%d] stream %p"   -- opCount is hex; %p may print "(nil)"
_COLL = re.compile(
    r"^(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff (?P<sendbuff>\S+) recvbuff "
    r"(?P<recvbuff>\S+) count (?P<count>\d+) datatype (?P<dt>-?\d+) op (?P<redop>-?\d+) root "
    r"(?P<root>-?\d+) comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\](?: stream (?P<stream>\S+))?")


def coll(msg: str) -> dict | None:
    m = _COLL.match(msg)
    return m and {"op": m["op"], "opcount": int(m["opcount"], 16), "count": int(m["count"]),
                  "datatype": int(m["dt"]), "redop": int(m["redop"]), "root": int(m["root"]),
                  "comm": m["comm"], "nranks": int(m["nranks"]), "stream": m["stream"]}


# TUNING, rank 0 only, once per launched collective:
#   2.19+ src/enqueue.cc "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"
#   2.18  src/enqueue.cc "%ld Bytes -> Algo %d proto %d time %f"  (indices, no op name)
_ALGO = re.compile(
    r"^(?:(?P<op>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?(?: time (?P<time>[-\d.e+]+))?")


def algo(msg: str) -> dict | None:
    m = _ALGO.match(msg)
    if not m:
        return None
    a, p = m["algo"], m["proto"]
    a = codes.algorithm_name(int(a)) if a.isdigit() else codes.canonical_algorithm(a)
    p = codes.protocol_name(int(p)) if p.isdigit() else codes.canonical_protocol(p)
    out = {"op": m["op"], "bytes": int(m["bytes"]), "algorithm": a, "protocol": p}
    if m["lo"] is not None:
        out["channels"] = [int(m["lo"]), int(m["hi"])]
    return out


# src/include/checks.h NCCLCHECK & co.: on failure every frame logs "%s:%d -> %d" (file, line,
# ncclResult_t) on its way up: the trace of an error, innermost first
_ERROR_TRACE = re.compile(r"^(?P<where>[\w./-]+\.(?:cc|cu|h|cpp):\d+) -> (?P<code>\d+)")


def error_trace(msg: str) -> dict | None:
    m = _ERROR_TRACE.match(msg)
    return m and {"where": m["where"], "code": int(m["code"]),
                  "name": codes.result_name(int(m["code"]))}


RECOGNIZERS = [
    ("coll", coll), ("transport", transport), ("algo", algo), ("init", init),
    ("init_timings", init_timings), ("comm_info", comm_info), ("ring_order", ring_order),
    ("ring_neighbours", ring_neighbours), ("trees", trees), ("channel_counts", channel_counts),
    ("network", network), ("env", env), ("version", version), ("error_trace", error_trace),
] + TABLE_RECOGNIZERS


def classify(msg: str) -> tuple[str, dict] | None:
    """(kind, fields) for the first recogniser that knows this message; None for the rest."""
    return first_match(RECOGNIZERS, msg)
