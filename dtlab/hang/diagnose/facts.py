"""Step 4: gather every signal, stack and trace of one evidence folder into :class:`Facts`.

A folder may hold several runs (``dtlab hang`` writes the raw run at the top and a
TORCH_DISTRIBUTED_DEBUG=DETAIL rerun in ``detail/``): exit codes, stacks and traces come from
the top run only, while messages that *describe* the bug (DETAIL's fingerprints, monitoredBarrier
reports) are taken from every run.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

from . import signals as S
from .load import EvidenceSet, Item
from .traces import Call, from_flight_recorder, from_nccl_calls


@dataclass
class Facts:
    root: str
    nprocs: int | None = None
    backend: str | None = None
    outcome: str | None = None
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    returned: set[int] = field(default_factory=set)  # fn returned on these ranks
    stopped: set[int] = field(default_factory=set)  # dtlab stopped them (not a failure)
    signals: list[S.Signal] = field(default_factory=list)
    described: list[S.Signal] = field(default_factory=list)  # from every run (DETAIL & co.)
    stacks: dict[int, S.Signal] = field(default_factory=dict)
    traces: dict[int, list[Call]] = field(default_factory=dict)
    trace_source: str = ""
    trace_files: dict[int, str] = field(default_factory=dict)
    nccl_divergence: dict | None = None
    nccl_files: list[str] = field(default_factory=list)
    p2p_tail: dict[int, list[dict]] = field(default_factory=dict)  # last NCCL send/recv per rank

    def of(self, kind: str, rank: int | None = None, every_run: bool = False) -> list[S.Signal]:
        pool = self.described if every_run else self.signals
        return [s for s in pool if s.kind == kind and (rank is None or s.rank == rank)]

    @property
    def ranks(self) -> list[int]:
        if self.nprocs:
            return list(range(self.nprocs))
        seen = set(self.exit_codes) | set(self.traces) | set(self.stacks)
        seen |= {s.rank for s in self.signals if s.rank is not None}
        return sorted(seen)


def _run_of(path: str, run_dirs: list[str]) -> str:
    """The evidence run a file belongs to: the deepest folder above it that holds a run.json."""
    best = ""
    for d in run_dirs:
        if (d == "" or path.startswith(d + os.sep)) and len(d) >= len(best):
            best = d
    return best


def gather(ev: EvidenceSet) -> Facts:
    run_dirs = sorted({os.path.dirname(i.path) for i in ev.of("run_info")}) or [""]
    top = min(run_dirs, key=lambda d: (d.count(os.sep) if d else -1, d))
    f = Facts(root=ev.root)
    info = next((i.data for i in ev.of("run_info") if os.path.dirname(i.path) == top), {})
    _run_facts(f, info)
    pid_rank = {r.get("pid"): r.get("rank") for r in info.get("ranks", []) if r.get("pid")}
    nccl_paths = []
    for item in ev.items:
        in_top = _run_of(item.path, run_dirs) == top
        if item.kind == "console":
            sigs = _console(item)
            f.described += sigs
            if in_top:
                f.signals += sigs
        elif item.kind == "stacks" and in_top:
            rank = item.rank if item.rank is not None else _pid_rank(item.text, pid_rank)
            when = "snapshot" if "snapshot" in item.path else "timeout" if "timeout" in item.path else "dump"
            sig = S.stack_signal(item.text, rank, item.path, when)
            if rank is not None and (rank not in f.stacks or when == "snapshot"):
                f.stacks[rank] = sig  # the snapshot shows the hang before any watchdog acted
        elif item.kind == "flight_recorder" and in_top and item.rank is not None:
            calls = from_flight_recorder(item.data)
            if len(calls) >= len(f.traces.get(item.rank, [])):
                f.traces[item.rank] = calls
                f.trace_files[item.rank] = item.path
                f.trace_source = "flight_recorder"
        elif item.kind == "nccl_log" and in_top:
            nccl_paths.append(os.path.join(ev.root, item.path))
    if nccl_paths:
        _nccl_facts(f, nccl_paths)
    return f


def _run_facts(f: Facts, info: dict) -> None:
    f.nprocs = info.get("nprocs")
    f.backend = info.get("backend")
    f.outcome = info.get("outcome")
    f.stopped = set(info.get("stopped_by_dtlab") or [])
    for r in info.get("ranks", []):
        f.exit_codes[r["rank"]] = r.get("exit_code")
        if r.get("duration_s") is not None:
            f.returned.add(r["rank"])


def _pid_rank(text: str, pid_rank: dict) -> int | None:
    import re

    m = re.search(r"^Process (\d+):", text, re.MULTILINE)
    return pid_rank.get(int(m.group(1))) if m else None


def _console(item: Item) -> list[S.Signal]:
    out = []
    for rank, lines in S.split_by_rank(item.text, item.rank).items():
        out += S.line_signals(lines, rank, item.path)
        out += S.tracebacks(lines, rank, item.path)
        out += S.fatal_dumps("\n".join(lines), rank, item.path)
    for m in S.TORCHRUN.finditer(item.text):  # torchrun's ChildFailedError summary
        out.append(S.Signal("reported_exit", int(m[1]), item.path, m.group(0).splitlines()[0],
                            {"exit_code": int(m[2]), "root": False}))
    return out


def _nccl_facts(f: Facts, paths: list[str]) -> None:
    from ...nccl_log import parse

    try:
        log = parse(paths)
    except ValueError:
        return
    d = log.to_dict()
    f.nccl_files = [os.path.relpath(p, f.root) for p in paths]
    f.nccl_divergence = d.get("divergence")
    f.nprocs = f.nprocs or d.get("world_size")
    for rank, rows in (d.get("collectives") or {}).items():
        r = int(rank)
        f.p2p_tail[r] = [row for row in rows if row.get("p2p")][-2:]
        if r not in f.traces:  # Flight Recorder, when present, has more (sites, states)
            f.traces[r] = from_nccl_calls(rows)
            f.trace_files[r] = "NCCL COLL lines"
            f.trace_source = f.trace_source or "nccl_log"


def step_times(f: Facts) -> dict[int, dict[int, dict[str, float]]]:
    """{rank: {step: {phase: t}}} from the ``[dtlab-step]`` lines."""
    out: dict[int, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for s in f.of("step"):
        out[s.rank][s.data["step"]][s.data["phase"]] = s.data["t"]
    return out
