"""What a parsed NCCL log holds. Plain dataclasses; ``to_dict()`` gives the JSON shape.

A *process* (host, pid) holds one or more communicators. ``CommView`` is one process's view of
one communicator (its rank in it, its channels, its calls); ``Communicator`` gathers the views
of all processes that belong to the same communicator (same commId, or same split of the same
parent). torch makes several: the default (world) group, one per ``new_group``, and extra
2-rank ones for point-to-point pairs.

>>> c = Call(op="AllReduce", opcount=0, count=1024, datatype=7, redop=0, root=0, comm="0x1",
...          nranks=2)
>>> c.to_dict()["datatype_name"], c.to_dict()["dtype"], c.nbytes, c.is_p2p
('ncclFloat32', 'float32', 4096, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import codes
from .tuning import TableBuilder


@dataclass
class Call:
    """One COLL line: a collective (or Send/Recv) as the application issued it."""

    op: str
    opcount: int
    count: int
    datatype: int
    redop: int
    root: int
    comm: str
    nranks: int
    stream: str | None = None
    source: str = ""
    lineno: int = 0
    tid: int = 0
    algorithm: str | None = None  # from the rank-0 TUNING line, when logged
    protocol: str | None = None
    channels: list[int] | None = None

    @property
    def nbytes(self) -> int | None:
        size = codes.type_size(self.datatype)
        return None if size is None else size * self.count

    @property
    def is_p2p(self) -> bool:
        return self.op in codes.P2P_OPS

    def signature(self) -> tuple:
        """What must agree across ranks at one position of the sequence."""
        return (self.op, self.count, self.datatype, self.redop, self.root)

    def to_dict(self) -> dict:
        d = {"op": self.op, "count": self.count, "datatype": self.datatype,
             "datatype_name": codes.datatype_name(self.datatype),
             "dtype": codes.torch_dtype(self.datatype), "redop": self.redop,
             "redop_name": codes.redop_name(self.redop), "root": self.root,
             "opcount": self.opcount, "bytes": self.nbytes}
        if self.is_p2p:
            d["p2p"] = True
        if self.algorithm:
            d.update(algorithm=self.algorithm, protocol=self.protocol)
        return d


@dataclass
class Transport:
    """One connection line: channel, the two ranks, and how the bytes travel."""

    channel: int
    conn_index: int | None
    src_rank: int
    dst_rank: int
    via: str  # as printed: "P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0/GDRDMA", ...
    direction: str = "send"

    @property
    def kind(self) -> str:
        """'P2P/CUMEM', 'P2P/IPC', 'P2P/direct', 'SHM', 'NET/IB', 'NET/Socket', ..."""
        parts = self.via.split("/")
        if parts[0] in ("P2P", "NET") and len(parts) > 1:
            return f"{parts[0]}/{parts[1].split()[0]}"
        return parts[0]


def _order(item):
    (peer, via, kind, d, conn), _ = item
    return (conn or 0, peer, d, via)


@dataclass
class CommView:
    """One process's view of one communicator, built from that process's lines."""

    host: str
    pid: int
    ptr: str
    rank: int
    nranks: int
    order: int  # how many communicators this process started before this one
    func: str | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None
    parent: str | None = None
    split_count: int | None = None
    color: int | None = None
    completed: bool = False
    destroyed: bool = False
    n_nodes: int | None = None
    local_rank: int | None = None
    local_ranks: int | None = None
    channel_counts: dict = field(default_factory=dict)
    ring_order: dict = field(default_factory=dict)  # channel -> ranks (rank 0 prints these)
    ring_neighbours: dict = field(default_factory=dict)  # channel -> (prev, next)
    trees: list = field(default_factory=list)
    transports: list[Transport] = field(default_factory=list)
    tuning: TableBuilder = field(default_factory=TableBuilder)
    init_timings: dict | None = None
    calls: list[Call] = field(default_factory=list)
    group: str | None = None  # key of the Communicator this view belongs to

    @property
    def n_channels(self) -> int | None:
        if "coll" in self.channel_counts:
            return self.channel_counts["coll"]
        return len(self.ring_neighbours) or len(self.trees) or None

    def transport_summary(self) -> list[dict]:
        """Connections grouped by (peer, via, direction, connection index): which channels use
        each path. Index 0 connects the collective rings/trees; the first Send/Recv adds index 1
        connections on the p2p channels (None: SHM lines print no index)."""
        groups: dict[tuple, list[int]] = {}
        for t in self.transports:
            peer = t.dst_rank if t.src_rank == self.rank else t.src_rank
            key = (peer, t.via, t.kind, t.direction, t.conn_index)
            groups.setdefault(key, []).append(t.channel)
        return [{"peer": peer, "via": via, "kind": kind, "direction": d, "conn_index": conn,
                 "channels": sorted(set(chs))}
                for (peer, via, kind, d, conn), chs in sorted(groups.items(), key=_order)]

    def to_dict(self) -> dict:
        return {
            "rank": self.rank, "nranks": self.nranks, "host": self.host, "pid": self.pid,
            "cuda_dev": self.cuda_dev, "nvml_dev": self.nvml_dev, "bus_id": self.bus_id,
            "comm_id": self.comm_id, "comm": self.ptr, "init_func": self.func,
            "n_nodes": self.n_nodes, "local_rank": self.local_rank, "n_channels": self.n_channels,
            "channel_counts": self.channel_counts, "transports": self.transport_summary(),
            "transport_kinds": sorted({t.kind for t in self.transports}),
            "rings": [{"channel": c, "prev": p, "next": n}
                      for c, (p, n) in sorted(self.ring_neighbours.items())],
            "trees": self.trees,
            "init_time_s": self.init_timings["total_s"] if self.init_timings else None,
            "init_timings_s": self.init_timings["parts_s"] if self.init_timings else None,
            "n_calls": len(self.calls),
        }


@dataclass
class Communicator:
    """The views of one communicator from all the processes that logged it, by rank."""

    key: str
    nranks: int
    members: dict[int, CommView] = field(default_factory=dict)
    comm_id: str | None = None
    kind: str = "init"  # "init" (ncclCommInitRank*), "split" (ncclCommSplit), "unknown"

    @property
    def ring_order(self) -> list[list[int]]:
        for v in self.members.values():
            if v.ring_order:
                return [v.ring_order[c] for c in sorted(v.ring_order)]
        return []

    @property
    def tuning(self) -> list[dict]:
        for v in sorted(self.members.values(), key=lambda v: v.rank):
            rows = v.tuning.rows()
            if rows:
                return rows
        return []

    def calls(self, include_p2p: bool = True) -> dict[int, list[Call]]:
        return {r: [c for c in v.calls if include_p2p or not c.is_p2p]
                for r, v in sorted(self.members.items())}

    def to_dict(self, with_calls: bool = False) -> dict:
        d = {"key": self.key, "comm_id": self.comm_id, "kind": self.kind, "nranks": self.nranks,
             "ranks_seen": sorted(self.members), "ring_order": self.ring_order,
             "n_calls": {r: len(v.calls) for r, v in sorted(self.members.items())}}
        if with_calls:
            d["collectives"] = {r: [c.to_dict() for c in calls]
                                for r, calls in self.calls().items()}
        return d
