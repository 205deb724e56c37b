"""NCCL's RAS client (``ncclras``): every communicator of a job, asked from outside it.

NCCL 2.28 runs a RAS (reliability, availability, serviceability) thread in every process that
uses NCCL, on by default (``NCCL_RAS_ENABLE=1``), listening on localhost port 28028
(``NCCL_RAS_ADDR``); the ``ncclras`` client asks it, and through it every other process of the
job, for the state of each communicator: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html

    ncclras              # text: job summary, communicators, errors and warnings
    ncclras -f json      # the same facts as JSON, with each rank's count per collective

The recorded run (``data/h100x2-native/``): rank 0 launched a second AllReduce that rank 1 never
called, and RAS says so: ``MISMATCH`` -- "Rank 0 has launched up to operation 2 ... Rank 1 ...
up to operation 1". :func:`read_text` and :func:`read_json` return the same shape of facts.
"""

from __future__ import annotations

import json
import re

_VERSION = re.compile(r"^NCCL version (?P<nccl>\S+) compiled with CUDA (?P<cuda>\S+)$")
_RUNTIME = re.compile(r"^CUDA runtime version (?P<rt>\d+), driver version (?P<drv>\d+)$")
_SUMMARY_HEAD = ("Nodes  Processes         GPUs  Processes     GPUs",
                 "(total)   per node  per process    (total)  (total)")
_SUMMARY_KEYS = ("nodes", "processes_per_node", "gpus_per_process", "processes", "gpus")
_COMMS = re.compile(r"^Communicators\.\.\. \((?P<s>[\d.]+)s\)$")
_GROUPS_HEAD = ("Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
                "#  in group  per comm  per node  per comm  in group")
_GROUP_KEYS = ("group", "comms", "nodes_per_comm", "ranks_per_node", "ranks_per_comm",
               "ranks_in_group")
_GROUP = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(?P<status>[A-Z_]+)"
                    r"\s+(?P<errors>[A-Z_]+)\s*$")
# '#0-0 (f5ad75c18af8cf62) MISMATCH': group 0, communicator 0 of it, its hash, the finding
_ENTRY = re.compile(r"^#(?P<group>\d+)-(?P<comm>\d+) \((?P<hash>[0-9a-f]+)\) (?P<kind>[A-Z_]+)$")
_RANK_OPS = re.compile(r"^Rank (?P<rank>\d+) has launched up to operation (?P<op>\d+) -- GPU "
                       r"(?P<gpu>\d+) managed by process (?P<pid>\d+) on node (?P<node>\S+)$")
_MESSAGE = re.compile(r"^Communicator ranks have different (?P<op>\w+) operation counts$")


def read_text(text: str) -> dict:
    """``ncclras``'s text output: ``nccl``, ``cuda``, ``summary`` (nodes, processes, GPUs),
    ``groups`` (per group of alike communicators: sizes, ``status``, ``errors``), ``errors``
    and ``warnings`` (each: ``group``, ``comm``, ``hash``, ``kind``, ``messages``, ``ranks``
    with each rank's last ``operation``, GPU, pid, node, and ``collective`` when a message names
    the one whose counts differ), ``unparsed``."""
    out: dict = {"nccl": None, "cuda": None, "cuda_runtime": None, "cuda_driver": None,
                 "summary": None, "collection_s": None, "groups": [], "errors": [],
                 "warnings": [], "unparsed": []}
    lines = [ln.rstrip() for ln in text.splitlines()]
    section, entry, i = None, None, 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        i += 1
        if not stripped or set(stripped) == {"="}:
            continue
        if m := _VERSION.match(stripped):
            out["nccl"], out["cuda"] = m["nccl"], m["cuda"]
        elif m := _RUNTIME.match(stripped):
            out["cuda_runtime"], out["cuda_driver"] = int(m["rt"]), int(m["drv"])
        elif stripped == "Job summary":
            section = "summary"
        elif m := _COMMS.match(stripped):
            section, out["collection_s"] = "groups", float(m["s"])
        elif stripped in ("Errors", "Warnings"):
            section, entry = stripped.lower(), None
        elif section == "summary" and stripped == _SUMMARY_HEAD[0] and i < len(lines) \
                and lines[i].strip() == _SUMMARY_HEAD[1]:
            i += 1
            values = lines[i].split() if i < len(lines) else []
            if len(values) == len(_SUMMARY_KEYS) and all(v.isdigit() for v in values):
                out["summary"] = dict(zip(_SUMMARY_KEYS, map(int, values)))
                i += 1
        elif section == "groups" and stripped == _GROUPS_HEAD[0] and i < len(lines) \
                and lines[i].strip() == _GROUPS_HEAD[1]:
            i += 1
        elif section == "groups" and (m := _GROUP.match(line)):
            row = dict(zip(_GROUP_KEYS, map(int, m.groups()[:6])))
            out["groups"].append({**row, "status": m["status"], "errors": m["errors"]})
        elif section in ("errors", "warnings") and (m := _ENTRY.match(stripped)):
            entry = {"group": int(m["group"]), "comm": int(m["comm"]), "hash": m["hash"],
                     "kind": m["kind"], "collective": None, "messages": [], "ranks": []}
            out[section].append(entry)
        elif entry is not None and line.startswith(" ") and (m := _RANK_OPS.match(stripped)):
            entry["ranks"].append({"rank": int(m["rank"]), "operation": int(m["op"]),
                                   "gpu": int(m["gpu"]), "pid": int(m["pid"]), "node": m["node"]})
        elif entry is not None and line.startswith(" "):
            entry["messages"].append(stripped)
            if m := _MESSAGE.match(stripped):
                entry["collective"] = m["op"]
        else:
            out["unparsed"].append(line)
    return out


def read_json(text: str) -> dict:
    """``ncclras -f json``: ``nccl``, ``timestamp``, ``communicators`` (each ``hash``, ``size``,
    ``missing_ranks``, ``ranks``: rank, host, pid, CUDA device, status flags, ``counts`` per
    collective) and ``mismatches``: {communicator hash: {collective: {rank: count}}} for every
    collective whose count differs between the communicator's ranks (computed here from the
    counts, which is what the text form's MISMATCH warning reports)."""
    data = json.loads(text)
    out = {"nccl": data.get("nccl_version"), "timestamp": data.get("timestamp"),
           "communicators": [], "mismatches": {}}
    for c in data.get("communicators", []):
        ranks = [{"rank": r["rank"], "host": r.get("host"), "pid": r.get("pid"),
                  "cuda_dev": r.get("cuda_dev"), "status": r.get("status", {}),
                  "counts": r.get("collective_counts", {})} for r in c.get("ranks", [])]
        out["communicators"].append({"hash": c.get("hash"), "size": c.get("size"),
                                     "missing_ranks": c.get("missing_ranks", []), "ranks": ranks})
        ops = sorted({op for r in ranks for op in r["counts"]})
        differ = {op: {r["rank"]: r["counts"].get(op) for r in ranks} for op in ops
                  if len({r["counts"].get(op) for r in ranks}) > 1}
        if differ:
            out["mismatches"][c.get("hash")] = differ
    return out


def render(ras: dict) -> str:
    """The text form's facts in a few lines: version, job, each group's status, each finding."""
    lines = [f"NCCL {ras['nccl']} (CUDA {ras['cuda']})"]
    s = ras["summary"]
    if s:
        lines[0] += (f": {s['nodes']} node(s), {s['processes']} process(es), "
                     f"{s['gpus']} GPU(s)")
    for g in ras["groups"]:
        lines.append(f"  communicator group {g['group']}: {g['comms']} communicator(s) of "
                     f"{g['ranks_per_comm']} ranks, status {g['status']}, errors {g['errors']}")
    for kind in ("errors", "warnings"):
        for e in ras[kind]:
            lines.append(f"  {kind[:-1]} #{e['group']}-{e['comm']} ({e['hash']}) {e['kind']}: "
                         + "; ".join(e["messages"]))
            for r in e["ranks"]:
                lines.append(f"    rank {r['rank']}: launched up to operation {r['operation']} "
                             f"(GPU {r['gpu']}, pid {r['pid']}, node {r['node']})")
    if ras["unparsed"]:
        lines.append(f"  ({len(ras['unparsed'])} line(s) not understood, kept in 'unparsed')")
    return "\n".join(lines)
