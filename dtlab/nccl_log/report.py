"""The parsed log as one screen for a person (:func:`summary`, which is ``NcclLog.render()``);
``dtlab nccl-log`` prints it (dtlab/nccl_log/cli.py)."""

from __future__ import annotations

from collections import Counter

from .model import Call
from .sources import MAX_LINE


def _dash(x) -> str:
    return "-" if x is None else str(x)


def _call(c: dict | None) -> str:
    if c is None:
        return "(no call)"
    return f"{c['op']} {c['count']} x {c['datatype_name']} {c['redop_name']} root {c['root']}"


def _transports(t: list[dict]) -> str:
    return "; ".join(("" if not d["conn_index"] else f"conn {d['conn_index']}: ")
                     + f"{d['via']} -> {d['peer']} ({len(d['channels'])} ch)" for d in t
                     if d["direction"] == "send") or "-"


def _algorithms(calls: list[Call]) -> str:
    used = Counter(f"{c.op} {c.algorithm}/{c.protocol}" for c in calls if c.algorithm)
    return ", ".join(f"{k} x{n}" for k, n in used.most_common(6))


def nodes_summary(n: dict) -> str:
    """``parse(...).nodes`` as a few lines: hosts with the ranks whose lines the log holds (an
    excerpt may hold only some of a host's ranks), bootstrap interface and NICs; the
    network, NIC and GPUDirect RDMA between nodes; where each ring leaves a node."""
    return "\n".join(_nodes(n)) or "one node, no network connections"


def _nodes(n: dict) -> list[str]:
    """The multi-node lines: only where ranks sit on several nodes or talk over the network."""
    cross = n.get("cross_node") or {}
    if not n or ((n["n_nodes"] or 0) < 2 and not cross.get("nets")):
        return []
    out = [f"nodes: {n['n_nodes']} (from {n['n_nodes_from']})"]
    for host, h in n["hosts"].items():
        nets = "; ".join(dict.fromkeys(f"NET/{x['net']} " + (" ".join(x["devices"]) or "no device")
                                       for x in h["nets"]))
        off = [f"{g['name'] or g['hca']}" + (f" ({g['why']})" if g["why"] else "")
               for g in h["gdr"] if not g["enabled"]]
        if off:
            nets += f"  GPUDirect RDMA off for {', '.join(off)}"
        out.append(f"  {host[:20]:<20} ranks seen {h['ranks'] or '?'}  bootstrap "
                   f"{', '.join(h['bootstrap']) or '-'}  {nets}")
    if cross.get("nets"):
        gdr = {True: "GPUDirect RDMA", False: "no GPUDirect RDMA", "mixed": "GDRDMA on some"}
        out.append(f"  across nodes: {', '.join(cross['nets'])} NIC {cross['nics']}, "
                   f"{gdr.get(cross['gdrdma'], '?')}, channels {cross['channels']}")
    if n.get("within_node"):
        out.append(f"  within a node: {', '.join(n['within_node'])}")
    for r in n.get("rings", [])[:2]:
        out.append(f"  ring {r['channel']}: {' '.join(map(str, r['order']))}; leaves a node at "
                   + (", ".join(f"{a}->{b}" for a, b in r["crossings"]) or "-"))
    out += [f"  note: {x}" for x in n.get("notes", [])]
    return out


def summary(log) -> str:
    """The human-readable report.

    >>> from dtlab.nccl_log import parse
    >>> print(summary(parse("h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\\n")))
    NCCL 2.28.9 (+cuda13.0)   processes: 1   world size: None   network: -
    env overrides: none
    no communicator found (no INIT or COLL lines)
    """
    out = []
    ver = log.nccl_version or "unknown"
    if log.cuda_version:
        ver += f" (+cuda{log.cuda_version})"
    out.append(f"NCCL {ver}   processes: {len(log.processes)}   world size: {log.world_size}"
               f"   network: {log.network or '-'}")
    if log.version_mismatch:
        out.append("  !! processes run different NCCL versions: " +
                   ", ".join(f"{p or '?'}={v}" for p, (v, _) in sorted(log.versions.items())))
    env = log.env
    out.append("env overrides: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "none"))
    for k, vals in log.env_mismatch.items():
        out.append(f"  !! {k} differs between processes: {vals}")
    if log.overlong_lines:  # said early: it holds even when no communicator was found
        out.append(f"skipped lines longer than {MAX_LINE // 1024} KiB (not NCCL's): " + ", ".join(
            f"{n} in {name}" for name, n in log.overlong_lines.items()))
    out += _nodes(log.nodes)
    c = log.selected
    if c is None:
        out.append("no communicator found (no INIT or COLL lines)")
        return "\n".join(out)
    which = "the world communicator" if c is log.world else "selected"
    out.append(f"\ncommunicator {c.key} ({c.kind}, {c.nranks} ranks; {which})")
    out.append(f"  {'rank':>4}  {'host':<12} {'pid':>7} {'dev':>3} {'busId':>8} {'chan':>4} "
               f"{'init s':>6} {'calls':>5}  transports (send side)")
    for r, v in sorted(c.members.items()):
        d = v.to_dict()
        init = f"{d['init_time_s']:.2f}" if d["init_time_s"] is not None else "-"
        dev, chan = _dash(v.cuda_dev), _dash(v.n_channels)
        out.append(f"  {r:>4}  {v.host[:12]:<12} {v.pid:>7} {dev:>3} {v.bus_id or '-':>8} "
                   f"{chan:>4} {init:>6} {len(v.calls):>5}  {_transports(d['transports'])}")
    missing = sorted(set(range(c.nranks)) - set(c.members))
    if missing:
        out.append(f"  !! no log seen from ranks {missing}")
    if c.ring_order:
        out.append(f"  rings: {len(c.ring_order)}, channel 0 order: "
                   + " -> ".join(map(str, c.ring_order[0])))
    algos = _algorithms([call for v in c.members.values() for call in v.calls])
    if algos:
        out.append(f"  algorithm/protocol chosen (rank 0): {algos}")
    tuning = [t for t in log.tuning if t["function"] == "AllReduce" and t["bandwidth_gbs"]]
    if tuning:
        out.append("  tuning model, AllReduce: " + ", ".join(
            f"{t['algorithm']}/{t['protocol']} {t['latency_us']:.1f}us {t['bandwidth_gbs']:.1f}GB/s"
            for t in tuning))
    div = log.divergence
    counts = {r: len(cs) for r, cs in log.calls(include_p2p=False).items()}
    if div is None:
        out.append(f"divergence: none -- collectives per rank {counts}")
    else:
        sure = "" if div.get("confident", True) else \
            " (no majority: the logs alone cannot tell which side is wrong)"
        short = f"; rank(s) {div['fewer']} made fewer calls" if div.get("fewer") else ""
        out.append(f"DIVERGENCE at collective #{div['position']} ({div['reason']}): "
                   f"rank(s) {div['ranks']}{sure}{short}; collectives per rank {div['n_calls']}")
        for r, call in div["calls"].items():
            out.append(f"  rank {r}: {_call(call)}")
    op = log.alignment["opcount"]
    if op.get("used") and not op.get("agrees"):
        out.append(f"  !! opCounts disagree from collective #{op['first_mismatch']}: "
                   f"{op['opcounts']}")
    others = [o for o in log.communicators if o is not c]
    if others:
        out.append("\nother communicators:")
        for o in others:
            calls = {r: len(v.calls) for r, v in sorted(o.members.items())}
            out.append(f"  {o.key} ({o.kind}, {o.nranks} ranks) calls per rank {calls}")
    if log.warnings:
        out.append(f"\nNCCL WARN lines: {len(log.warnings)}; first: {log.warnings[0]['msg']}")
    if log.errors:
        e = log.errors[0]
        out.append(f"NCCL error traces: {len(log.errors)}; first: {e['where']} -> {e['code']} "
                   f"({e['name']}) in {e['host']}:{e['pid']}")
    if log.skipped_sources:
        out.append(f"skipped (no NCCL lines, or not read): {', '.join(log.skipped_sources)}")
    return "\n".join(out)
