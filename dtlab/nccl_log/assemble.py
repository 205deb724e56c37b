"""Pass 2: give every recognised line to the process and communicator it belongs to.

Lines carry ``host:pid:tid`` but most carry no communicator. The rules, from where NCCL logs
them:

* init lines name their ``comm %p``; so do COLL lines and ``comm %p rank %d nRanks ...``;
* everything between a communicator's ``Init START`` and ``Init COMPLETE`` on the same thread
  (rings, trees, channel counts, tuning table, and, without lazy connection, the transports)
  belongs to it -- ``ncclCommInitRankFunc`` runs init on one thread (``src/init.cc``);
* with runtime connection (``NCCL_RUNTIME_CONNECT``, default on in recent releases) the
  transport lines come at the first collective instead, on the thread that issued it, right
  after its COLL line; so a thread's last COLL line names the owner of what follows;
* ``Init timings`` follows its ``Init COMPLETE`` on the same thread;
* the rank-0 TUNING line ``AllReduce: 4096 Bytes -> Algo RING ...`` follows the COLL lines of
  its group launch on the same thread; it is matched to the earliest waiting call with the same
  op and size.

>>> a = assemble([("f", 1, "h:7:7 [0] NCCL INFO ncclCommInitRankConfig comm 0xa rank 0 nranks 2 "
...                "cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init START"),
...               ("f", 2, "h:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")])
>>> a.views[0].comm_id, a.views[0].transports[0].kind
('0x1', 'P2P/CUMEM')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import lines, net
from .model import Call, CommView, Transport
from .tuning import TABLE_KINDS

_MAX_WAITING_CALLS = 256  # calls kept waiting for a TUNING line; without TUNING none arrive


@dataclass
class _Process:
    host: str
    pid: int
    views: list[CommView] = field(default_factory=list)
    by_ptr: dict[str, CommView] = field(default_factory=dict)
    initializing: dict[int, CommView] = field(default_factory=dict)  # tid -> view
    completed: dict[int, CommView] = field(default_factory=dict)  # tid -> last completed
    last_call: dict[int, CommView] = field(default_factory=dict)  # tid -> view of last COLL
    last_call_any: CommView | None = None
    waiting: dict[int, list[Call]] = field(default_factory=dict)  # tid -> calls without algo

    def owner(self, tid: int) -> CommView | None:
        """The communicator an unlabelled line from this thread most likely belongs to."""
        if tid in self.initializing:
            return self.initializing[tid]
        if tid in self.last_call:
            return self.last_call[tid]
        if self.initializing:
            return max(self.initializing.values(), key=lambda v: v.order)
        return self.last_call_any or (self.views[-1] if self.views else None)

    def new_view(self, ptr: str, rank: int, nranks: int) -> CommView:
        view = CommView(self.host, self.pid, ptr, rank, nranks, order=len(self.views))
        self.views.append(view)
        self.by_ptr[ptr] = view
        return view


@dataclass
class Assembly:
    """Everything pass 2 found, before communicators are matched across processes."""

    processes: dict[tuple[str, int], _Process] = field(default_factory=dict)
    sources: dict[tuple[str, int], set] = field(default_factory=dict)
    versions: dict[tuple[str, int] | None, tuple[str, str | None]] = field(default_factory=dict)
    env: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)
    networks: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    warnings: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # "file.cc:123 -> 5" error-trace lines
    nccl_lines: dict[str, int] = field(default_factory=dict)  # source -> lines recognised
    unattributed: int = 0
    # process-level facts for the multi-node pass (nodes.py), kept whether or not a line could be
    # given to a communicator: excerpts of logs often lack the Init lines that would place them
    net: dict[tuple[str, int], dict] = field(default_factory=dict)  # bootstrap, NICs, GDR lines
    links: list[dict] = field(default_factory=list)  # every connection line, with its host
    placements: list[dict] = field(default_factory=list)  # {rank, nranks, host}: init/comm lines
    node_counts: list[dict] = field(default_factory=list)  # "nNodes" lines, with their host
    ring_orders: list[dict] = field(default_factory=list)  # "Channel 00/02 : 0 1 ..." lines
    test_ranks: list[dict] = field(default_factory=list)  # nccl-tests' "# Rank ... on host" rows

    @property
    def views(self) -> list[CommView]:
        return [v for p in self.processes.values() for v in p.views]


def _on_init(proc: _Process, tid: int, f: dict) -> None:
    view = proc.by_ptr.get(f["ptr"])
    if view is None and f["phase"] in ("Destroy COMPLETE", "Abort COMPLETE"):
        return  # the end of a communicator whose start this log does not hold
    if view is None or f["phase"] == "Init START":
        view = proc.new_view(f["ptr"], f["rank"], f["nranks"])
    for name in ("func", "cuda_dev", "nvml_dev", "bus_id", "comm_id", "parent", "split_count",
                 "color"):
        if f.get(name) is not None:
            setattr(view, name, f[name])
    if f["phase"] == "Init START":
        proc.initializing[tid] = view
    elif f["phase"] == "Init COMPLETE":
        view.completed = True
        for t in [t for t, v in proc.initializing.items() if v is view]:
            del proc.initializing[t]
        proc.completed[tid] = view
    else:  # Destroy / Abort: the pointer may be handed out again
        view.destroyed = True
        proc.by_ptr.pop(f["ptr"], None)


def _on_timings(proc: _Process, tid: int, f: dict) -> bool:
    candidates = [proc.completed.get(tid)] + proc.views[::-1]
    for view in candidates:
        same = view and (view.rank, view.nranks) == (f["rank"], f["nranks"])
        if same and view.init_timings is None:
            view.init_timings = f
            return True
    return False


def _on_coll(proc: _Process, tid: int, rec: lines.Record, f: dict) -> None:
    view = proc.by_ptr.get(f["comm"])
    if view is None:  # INIT lines missing (log cut, or NCCL_DEBUG_SUBSYS without INIT)
        view = proc.new_view(f["comm"], -1, f["nranks"])
    call = Call(op=f["op"], opcount=f["opcount"], count=f["count"], datatype=f["datatype"],
                redop=f["redop"], root=f["root"], comm=f["comm"], nranks=f["nranks"],
                stream=f["stream"], source=rec.source, lineno=rec.lineno, tid=tid)
    view.calls.append(call)
    proc.last_call[tid] = proc.last_call_any = view
    if view.rank in (0, -1) and not call.is_p2p:  # only rank 0 prints the TUNING line
        waiting = proc.waiting.setdefault(tid, [])
        waiting.append(call)
        del waiting[:-_MAX_WAITING_CALLS]


def _on_algo(proc: _Process, tid: int, f: dict) -> bool:
    waiting = proc.waiting.get(tid, [])
    same_op = [c for c in waiting if f["op"] in (None, c.op)]
    match = next((c for c in same_op if c.nbytes == f["bytes"]), same_op[0] if same_op else None)
    if match is None:
        return False
    waiting.remove(match)
    match.algorithm, match.protocol = f["algorithm"], f["protocol"]
    match.channels = f.get("channels")
    return True


def _on_owned(view: CommView, kind: str, f: dict) -> None:
    if kind == "channel_counts":
        view.channel_counts.update(f)
    elif kind == "ring_order":
        view.ring_order[f["channel"]] = f["ranks"]
    elif kind == "ring_neighbours":
        view.ring_neighbours[f["channel"]] = (f["prev"], f["next"])
    elif kind == "trees":
        view.trees = f["trees"]
    elif kind == "transport":
        view.transports.append(Transport(f["channel"], f["conn_index"], f["src_rank"],
                                         f["dst_rank"], f["via"], f["direction"]))
    elif kind in TABLE_KINDS:
        view.tuning.feed(kind, f)


def _note_placement(out: Assembly, rec: lines.Record, kind: str, f: dict) -> None:
    """Lines that say which host a rank runs on, or how many nodes NCCL counted."""
    where = {"host": rec.host, "pid": rec.pid}
    if kind == "transport":
        out.links.append({**where, **f})
    elif kind == "init" and f["phase"] == "Init START":
        out.placements.append({**where, "rank": f["rank"], "nranks": f["nranks"]})
    elif kind == "comm_info":
        out.placements.append({**where, "rank": f["rank"], "nranks": f["nranks"]})
        out.node_counts.append({**where, **f})
    elif kind == "ring_order":
        out.ring_orders.append({**where, **f})


def assemble(numbered_lines: Iterable[tuple[str, int, str]]) -> Assembly:
    """Pass 2 over (source, line number, text) triples, in the order they were written."""
    out = Assembly()
    for source, lineno, text in numbered_lines:
        rec = lines.split_line(text, source, lineno)
        if rec is None:
            row = net.nccl_tests_rank(text)
            if row:
                out.test_ranks.append(row)
            v = lines.bare_version(text)
            if v:
                out.versions.setdefault(None, (v["version"], v["cuda"]))
                out.nccl_lines[source] = out.nccl_lines.get(source, 0) + 1
            continue
        out.nccl_lines[source] = out.nccl_lines.get(source, 0) + 1
        key = (rec.host, rec.pid)
        proc = out.processes.get(key) or out.processes.setdefault(key, _Process(*key))
        out.sources.setdefault(key, set()).add(source)
        if rec.level == "WARN":
            out.warnings.append({"host": rec.host, "pid": rec.pid, "tid": rec.tid,
                                 "dev": rec.dev, "msg": rec.msg, "source": source,
                                 "line": lineno})
            continue
        found = lines.classify(rec.msg) or net.classify_net(rec.msg)
        if not found:
            continue
        kind, f = found
        _note_placement(out, rec, kind, f)
        if kind == "version":
            out.versions.setdefault(key, (f["version"], f["cuda"]))
        elif kind == "env":
            out.env.setdefault(key, {})[f["name"]] = f["value"]
        elif kind == "error_trace":
            out.errors.append({"host": rec.host, "pid": rec.pid, "tid": rec.tid, **f,
                               "source": source, "line": lineno})
        elif kind in ("bootstrap", "net_devices", "gdr"):
            facts = out.net.setdefault(key, {"bootstrap": [], "net_devices": [], "gdr": []})
            if f not in facts[kind]:
                facts[kind].append(f)
        elif kind == "network":
            nets = out.networks.setdefault(key, [])
            if f["network"] not in nets:
                nets.append(f["network"])
        elif kind == "init":
            _on_init(proc, rec.tid, f)
        elif kind == "comm_info":
            view = proc.by_ptr.get(f["ptr"])
            if view:
                view.n_nodes, view.local_rank = f["n_nodes"], f["local_rank"]
                view.local_ranks = f["local_ranks"]
        elif kind == "init_timings":
            out.unattributed += not _on_timings(proc, rec.tid, f)
        elif kind == "coll":
            _on_coll(proc, rec.tid, rec, f)
        elif kind == "algo":
            out.unattributed += not _on_algo(proc, rec.tid, f)
        else:
            view = proc.owner(rec.tid)
            if view is None:
                out.unattributed += 1
            else:
                _on_owned(view, kind, f)
    return out
