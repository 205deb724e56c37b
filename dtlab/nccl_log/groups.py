"""Pass 3: match each process's communicators across processes, and find the world one.

A communicator made by ``ncclCommInitRank*`` is named in every process by the same ``commId``
(a hash of its ncclUniqueId, ``src/init.cc``). One made by ``ncclCommSplit`` has no commId in
recent logs; it is named by its parent, the split counter and the color, which all members
share. Logs too old to print a commId fall back to order: the k-th communicator of n ranks in
each process.

The world communicator is the largest one (nranks == world size) that processes created first:
torch's default process group. Each process's rank in it is *the* rank of that process.

>>> from dtlab.nccl_log.model import CommView
>>> vs = [CommView("h", 1, "0xa", 0, 2, order=0, comm_id="0x77"),
...       CommView("h", 2, "0xb", 1, 2, order=0, comm_id="0x77")]
>>> comms = group(vs)
>>> comms[0].key, sorted(comms[0].members), world(comms).key
('id:0x77', [0, 1], 'id:0x77')
"""

from __future__ import annotations

from .model import CommView, Communicator


def _nonzero_hex(s: str) -> bool:
    try:
        return int(s, 16) != 0
    except ValueError:
        return False


def _keys_for_process(views: list[CommView]) -> list[tuple[str, str]]:
    """(key, kind) for each view of one process, in the order the process created them."""
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}

    def nth(prefix: str) -> int:
        seen[prefix] = seen.get(prefix, 0) + 1
        return seen[prefix] - 1

    for i, v in enumerate(views):
        if v.parent:
            parent = next((j for j in range(i - 1, -1, -1) if views[j].ptr == v.parent), None)
            pkey = out[parent][0] if parent is not None else f"ptr:{v.parent}"
            if v.split_count is not None:
                out.append((f"split:{pkey}:{v.split_count}:{v.color}", "split"))
            else:
                prefix = f"split:{pkey}:c{v.color}"
                out.append((f"{prefix}:#{nth(prefix)}", "split"))
        elif v.comm_id and _nonzero_hex(v.comm_id):
            out.append((f"id:{v.comm_id.lower()}", "init"))
        elif v.rank >= 0:
            out.append((f"nth:{v.nranks}:#{nth(f'nth:{v.nranks}')}", "init"))
        else:  # only COLL lines were seen for it: no rank known
            out.append((f"coll:{v.nranks}:#{nth(f'coll:{v.nranks}')}", "unknown"))
    return out


def group(views: list[CommView]) -> list[Communicator]:
    """Communicators, ordered by when the processes created them. Sets ``view.group``."""
    by_process: dict[tuple[str, int], list[CommView]] = {}
    for v in views:
        by_process.setdefault((v.host, v.pid), []).append(v)
    comms: dict[str, Communicator] = {}
    unranked: dict[str, list[CommView]] = {}
    for proc_views in by_process.values():
        proc_views.sort(key=lambda v: v.order)
        for v, (key, kind) in zip(proc_views, _keys_for_process(proc_views)):
            v.group = key
            c = comms.setdefault(key, Communicator(key, v.nranks, kind=kind))
            if kind == "init" and key.startswith("id:"):
                c.comm_id = v.comm_id
            if v.rank < 0:
                unranked.setdefault(key, []).append(v)
            else:
                c.members.setdefault(v.rank, v)
    # without INIT lines, ranks are unknown: number the processes in the order they were read
    for key, vs in unranked.items():
        free = [r for r in range(comms[key].nranks) if r not in comms[key].members]
        for r, v in zip(free, vs):
            comms[key].members[r] = v
    return sorted(comms.values(), key=lambda c: (sum(v.order for v in c.members.values())
                                                 / max(len(c.members), 1), c.key))


def world(comms: list[Communicator]) -> Communicator | None:
    """The default communicator: nranks == world size, and created before the others."""
    if not comms:
        return None
    size = max(c.nranks for c in comms)
    return next(c for c in comms if c.nranks == size)


def select(comms: list[Communicator], which: str | int | None) -> Communicator | None:
    """The communicator named by key, by commId ('0x...'), or by index; None -> the world one."""
    if which is None:
        return world(comms)
    if isinstance(which, int):
        return comms[which]
    want = which.lower()
    for c in comms:
        if want in (c.key.lower(), (c.comm_id or "").lower()):
            return c
    raise KeyError(f"no communicator {which!r}; known: {', '.join(c.key for c in comms)}")
