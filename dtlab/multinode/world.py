"""Is the world what the launch meant? Rules over a rank table, and which pairs to time.

Contract: a *rank table* is a list of dicts, one per rank that reported, each with ``rank``,
``world_size``, ``node`` (torchrun's node rank, ``GROUP_RANK``), ``local_rank``,
``local_world_size``, ``host``, and ``gpu`` (``{"name", "uuid", "bus_id"}`` or None on CPU).
:func:`check_world` names what is wrong -- ranks missing, a rank reported twice, two ranks on
one GPU, local ranks that are not ``0..k-1`` on a node -- without starting anything, so the same
function reads a live run (``python -m dtlab.multinode.check``) and a saved table:

>>> t = [{"rank": 0, "world_size": 3, "node": 0, "local_rank": 0, "local_world_size": 2,
...       "host": "a", "gpu": {"name": "H100", "uuid": "GPU-1", "bus_id": "0:1"}},
...      {"rank": 1, "world_size": 3, "node": 0, "local_rank": 0, "local_world_size": 2,
...       "host": "a", "gpu": {"name": "H100", "uuid": "GPU-1", "bus_id": "0:1"}}]
>>> r = check_world(t)
>>> r["missing"], r["duplicate_gpus"], r["bad_local_ranks"], r["ok"]
([2], [[0, 1]], [1], False)
"""

from __future__ import annotations

from collections import defaultdict


def check_world(table: list[dict], world_size: int | None = None) -> dict:
    """What is wrong with ``table`` (see the module docstring). ``world_size`` defaults to the
    largest ``world_size`` any rank reported. Lists are sorted; ``ok`` is True when all are
    empty."""
    ws = world_size if world_size is not None else max((r["world_size"] for r in table), default=0)
    seen: dict[int, int] = defaultdict(int)
    for r in table:
        seen[r["rank"]] += 1
    missing = sorted(set(range(ws)) - set(seen))
    duplicate_ranks = sorted(k for k, c in seen.items() if c > 1)
    out_of_range = sorted(k for k in seen if not 0 <= k < ws)

    by_gpu: dict[tuple, list[int]] = defaultdict(list)
    for r in table:
        g = r.get("gpu")
        if g:  # a UUID names one GPU in the whole cluster; without it, the bus id on one host
            key = ("uuid", g["uuid"]) if g.get("uuid") else ("bus", r["host"], g.get("bus_id"))
            by_gpu[key].append(r["rank"])
    duplicate_gpus = sorted(sorted(v) for v in by_gpu.values() if len(v) > 1)

    bad_local = set()
    by_node: dict[object, list[dict]] = defaultdict(list)
    for r in table:
        by_node[r["node"]].append(r)
    for rows in by_node.values():
        locals_ = defaultdict(list)
        for r in rows:
            locals_[r["local_rank"]].append(r["rank"])
            if not 0 <= r["local_rank"] < r.get("local_world_size", len(rows)):
                bad_local.add(r["rank"])
        for ranks in locals_.values():
            bad_local.update(sorted(ranks)[1:])  # the first holder keeps it; the rest are wrong
    bad_local_ranks = sorted(bad_local)
    ok = not (missing or duplicate_ranks or out_of_range or duplicate_gpus or bad_local_ranks)
    return {"world_size": ws, "ranks_present": len(seen), "missing": missing,
            "duplicate_ranks": duplicate_ranks, "out_of_range": out_of_range,
            "duplicate_gpus": duplicate_gpus, "bad_local_ranks": bad_local_ranks, "ok": ok}


def nodes(table: list[dict]) -> list[dict]:
    """One entry per node, in node order: {node, host, address, ranks}."""
    by: dict[object, list[dict]] = defaultdict(list)
    for r in table:
        by[r["node"]].append(r)
    return [{"node": n, "host": rows[0]["host"], "address": rows[0].get("address"),
             "ranks": sorted(r["rank"] for r in rows)}
            for n, rows in sorted(by.items(), key=lambda kv: str(kv[0]).zfill(8))]


def pairs(table: list[dict]) -> list[dict]:
    """The rank pairs to time: one inside each node that has two ranks (``within``), one between
    every two nodes (``across``: each node's lowest rank). Every rank computes the same list
    from the same table, so all of them create the same groups in the same order.

    >>> t = [{"rank": r, "node": r // 2, "host": "h", "local_rank": r % 2} for r in range(4)]
    >>> [(p["kind"], p["ranks"]) for p in pairs(t)]
    [('within', [0, 1]), ('within', [2, 3]), ('across', [0, 2])]
    """
    ns = nodes(table)
    out = [{"kind": "within", "nodes": [n["node"]], "ranks": n["ranks"][:2]}
           for n in ns if len(n["ranks"]) >= 2]
    for i, a in enumerate(ns):
        for b in ns[i + 1:]:
            out.append({"kind": "across", "nodes": [a["node"], b["node"]],
                        "ranks": [a["ranks"][0], b["ranks"][0]]})
    return out
