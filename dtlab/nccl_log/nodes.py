"""Pass 5: across nodes -- which host each rank runs on, how many nodes NCCL counted, and how the
bytes cross between nodes (network, NIC index, GPUDirect RDMA), ring by ring.

Works from the process-level facts ``assemble`` keeps for every line, so it also reads excerpts
of logs (a forum post, a ``grep``) that lack the Init lines tying a line to a communicator.

Where a rank runs, from the evidence NCCL prints:

* a connection line is written by the rank on the near side: by the sender for ``[send]``, by the
  receiver for ``[receive]``; a P2P or SHM line by a rank whose peer shares its host;
* ``comm ... rank 3 nRanks 8 nNodes 2 localRanks 4`` and ``... rank 3 nranks 8 ... Init START``
  (only those of the largest communicator: a split's rank 0 is some other world rank);
* nccl-tests' ``#  Rank  4 Group  0 Pid 25146 on kolyoz2 device 0 ...`` table.

A node is a host name here. NCCL itself counts nodes by a host hash (host name and boot id, or
``NCCL_HOSTID``), so ``nNodes`` can exceed the host names seen: dtlab's simulated nodes on one
machine are the example. Then ``crosses_nodes`` stays None where the host names cannot tell.

>>> from dtlab.nccl_log import parse
>>> d = parse('''
... a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
... a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
... b:2:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0/GDRDMA
... ''').nodes
>>> d["hosts"]["a"]["ranks"], d["hosts"]["b"]["ranks"], d["n_nodes"]
([0], [1], 2)
>>> d["cross_node"]["nets"], d["cross_node"]["gdrdma"]
(['NET/IB'], True)
"""

from __future__ import annotations

from collections import defaultdict

from .assemble import Assembly
from .model import Transport
from .net import net_via


def _placements(asm: Assembly) -> tuple[dict[int, str], dict[int, list[str]]]:
    """rank -> host, and the ranks for which the evidence names more than one host."""
    seen: dict[int, set] = defaultdict(set)
    for row in asm.test_ranks:
        seen[row["rank"]].add(row["host"])
    largest = max((p["nranks"] for p in asm.placements), default=0)
    for p in asm.placements:
        if p["nranks"] == largest:
            seen[p["rank"]].add(p["host"])
    for link in asm.links:
        if link["via"].startswith("NET/"):
            near = link["src_rank"] if link["direction"] == "send" else link["dst_rank"]
            seen[near].add(link["host"])
        else:  # P2P, SHM: both ends on the host that wrote the line
            seen[link["src_rank"]].add(link["host"])
            seen[link["dst_rank"]].add(link["host"])
    where = {r: next(iter(h)) for r, h in seen.items() if len(h) == 1}
    conflicts = {r: sorted(h) for r, h in seen.items() if len(h) > 1}
    return dict(sorted(where.items())), conflicts


def _crosses(a: str | None, b: str | None, hosts_tell: bool) -> bool | None:
    if a is None or b is None:
        return None
    if a != b:
        return True
    return False if hosts_tell else None


def _links(asm: Assembly, where: dict[int, str], hosts_tell: bool) -> list[dict]:
    """One row per connection (channel, ends, way, connection index), both sides merged."""
    rows: dict[tuple, dict] = {}
    for link in asm.links:
        key = (link["channel"], link["conn_index"], link["src_rank"], link["dst_rank"],
               link["via"])
        row = rows.get(key)
        if row is None:
            src_h, dst_h = where.get(link["src_rank"]), where.get(link["dst_rank"])
            row = rows[key] = {
                "channel": link["channel"], "conn_index": link["conn_index"],
                "src": link["src_rank"], "dst": link["dst_rank"], "via": link["via"],
                "src_host": src_h, "dst_host": dst_h,
                "crosses_nodes": _crosses(src_h, dst_h, hosts_tell), "seen_from": []}
            v = net_via(link["via"])
            row["transport"] = f"NET/{v['net']}" if v else Transport(0, None, 0, 0, link["via"]).kind
            if v:
                row.update(net=v["net"], net_family=v["family"], nic=v["dev"],
                           gdrdma=v["gdrdma"])
        side = link["direction"] if link["via"].startswith("NET/") else "local"
        if side not in row["seen_from"]:
            row["seen_from"].append(side)
    return sorted(rows.values(), key=lambda r: (r["channel"], r["src"], r["dst"], r["via"]))


def _summary(rows: list[dict]) -> dict:
    """How the bytes cross nodes, and how they move inside one."""
    cross = [r for r in rows if r["crosses_nodes"] or (r["crosses_nodes"] is None and "net" in r)]
    gdr = {r["gdrdma"] for r in cross if "gdrdma" in r}
    pairs: dict[tuple, set] = defaultdict(set)
    for r in cross:
        pairs[(r["src"], r["dst"], r["via"])].add(r["channel"])
    return {
        "nets": sorted({r["transport"] for r in cross}),
        "nics": sorted({r["nic"] for r in cross if "nic" in r}),
        "gdrdma": (gdr.pop() if len(gdr) == 1 else "mixed") if gdr else None,
        "channels": sorted({r["channel"] for r in cross}),
        "pairs": [{"src": s, "dst": d, "via": via, "channels": sorted(ch)}
                  for (s, d, via), ch in sorted(pairs.items())],
    }


def _rings(asm: Assembly, where: dict[int, str], rows: list[dict]) -> list[dict]:
    """Each ring in order with the hops that leave a node ("ring over nodes"): hops between two
    hosts, or hops whose connection line says NET (the network is used only between nodes unless
    P2P and SHM are switched off)."""
    net_hops = {(r["channel"], r["src"], r["dst"]) for r in rows if "net" in r}
    out, done = [], set()
    for ring in asm.ring_orders:
        if ring["channel"] in done:
            continue
        done.add(ring["channel"])
        order = ring["ranks"]
        hops = list(zip(order, order[1:] + order[:1]))
        crossing = [[a, b] for a, b in hops if (ring["channel"], a, b) in net_hops
                    or (where.get(a) and where.get(b) and where[a] != where[b])]
        unknown = sum(1 for a, b in hops if not (where.get(a) and where.get(b)))
        out.append({"channel": ring["channel"], "order": order, "crossings": crossing,
                    "hops_unplaced": unknown})
    return sorted(out, key=lambda r: r["channel"])


def nodes(asm: Assembly) -> dict:
    """The multi-node picture: hosts with their ranks and NICs, nNodes, cross-node links, rings."""
    where, conflicts = _placements(asm)
    hosts: dict[str, dict] = {}
    for (host, _pid), facts in sorted(asm.net.items()):
        h = hosts.setdefault(host, {"ranks": [], "bootstrap": [], "nets": [], "gdr": []})
        for b in facts["bootstrap"]:
            h["bootstrap"] += [i for i in b["interfaces"] if i not in h["bootstrap"]]
        for n in facts["net_devices"]:
            if n not in h["nets"]:
                h["nets"].append(n)
        for g in facts["gdr"]:
            if g not in h["gdr"]:
                h["gdr"].append(g)
    for r, host in where.items():
        hosts.setdefault(host, {"ranks": [], "bootstrap": [], "nets": [], "gdr": []})
        hosts[host]["ranks"].append(r)
    for host in list(asm.processes) + [(link["host"], 0) for link in asm.links]:
        hosts.setdefault(host[0], {"ranks": [], "bootstrap": [], "nets": [], "gdr": []})
    counted = sorted({c["n_nodes"] for c in asm.node_counts})
    ranked_hosts = sorted(h for h, v in hosts.items() if v["ranks"])
    n_nodes = max(counted) if counted else (len(ranked_hosts) or None)
    hosts_tell = not counted or max(counted) <= len(ranked_hosts)
    rows = _links(asm, where, hosts_tell)
    notes = []
    if counted and max(counted) > len(ranked_hosts) and ranked_hosts:
        notes.append(f"NCCL counted nNodes {max(counted)} but the lines come from "
                     f"{len(ranked_hosts)} host name(s): nodes told apart by NCCL's host hash "
                     "(NCCL_HOSTID, or a simulation on one machine), not by host name")
    if conflicts:
        notes.append(f"ranks placed on more than one host (several communicators?): {conflicts}")
    return {
        "n_nodes": n_nodes,
        "n_nodes_from": "nNodes line" if counted else ("hosts seen" if ranked_hosts else None),
        "hosts": dict(sorted(hosts.items())),
        "rank_host": where,
        "links": rows,
        "cross_node": _summary(rows),
        "within_node": sorted({r["transport"] for r in rows if r["crosses_nodes"] is False}),
        "rings": _rings(asm, where, rows),
        "notes": notes,
    }
