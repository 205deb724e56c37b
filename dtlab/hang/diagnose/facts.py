"""Step 4: gather every signal, stack and trace of one evidence folder into :class:`Facts`.

A folder may hold several runs (``dtlab hang`` writes the raw run at the top and a
TORCH_DISTRIBUTED_DEBUG=DETAIL rerun in ``detail/``): exit codes, stacks and traces come from
the top run only, while messages that *describe* the bug (DETAIL's fingerprints, monitoredBarrier
reports) are taken from every run.

Launchers' consoles (torchrun, SLURM; :mod:`.launcher`) add exit codes dtlab did not record and
the ranks the launcher -- or something outside, with the whole job -- stopped: those join
``stopped`` and are never culprits. Files that could not be used are kept in ``unreadable``
with the reason, so the diagnosis says what it did not read.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

from . import launcher
from . import signals as S
from .load import EvidenceSet, Item
from .traces import Call, MalformedDump, from_flight_recorder, from_nccl_calls


@dataclass
class Facts:
    root: str
    nprocs: int | None = None
    backend: str | None = None
    outcome: str | None = None
    phase: str | None = None  # "start": the timeout passed before every rank reached user code
    late: list[int] = field(default_factory=list)  # the ranks that had not reached it
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    returned: set[int] = field(default_factory=set)  # fn returned on these ranks
    stopped: set[int] = field(default_factory=set)  # dtlab, the launcher or the outside stopped them
    reported_exits: dict[int, int] = field(default_factory=dict)  # from a launcher's console
    launcher_root: int | None = None  # torchrun's "Root Cause (first observed failure)"
    outside: str | None = None  # the line saying the whole job was stopped from outside
    launcher_lines: list[str] = field(default_factory=list)
    printed: set[int] = field(default_factory=set)  # ranks seen printing anything
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (file, why)
    signals: list[S.Signal] = field(default_factory=list)
    described: list[S.Signal] = field(default_factory=list)  # from every run (DETAIL & co.)
    stacks: dict[int, S.Signal] = field(default_factory=dict)
    traces: dict[int, list[Call]] = field(default_factory=dict)
    trace_source: str = ""
    trace_files: dict[int, str] = field(default_factory=dict)
    nccl_divergence: dict | None = None
    nccl_files: list[str] = field(default_factory=list)
    p2p_tail: dict[int, list[dict]] = field(default_factory=dict)  # last NCCL send/recv per rank
    memory: dict[int, dict] = field(default_factory=dict)  # a rank's memory cgroup, as counted

    def exit_code(self, rank: int) -> int | None:
        """The rank's exit code as run.json or, failing that, a launcher recorded it."""
        return self.exit_codes.get(rank, self.reported_exits.get(rank))

    def of(self, kind: str, rank: int | None = None, every_run: bool = False) -> list[S.Signal]:
        pool = self.described if every_run else self.signals
        return [s for s in pool if s.kind == kind and (rank is None or s.rank == rank)]

    @property
    def ranks(self) -> list[int]:
        if self.nprocs:
            return list(range(self.nprocs))
        seen = set(self.exit_codes) | set(self.traces) | set(self.stacks) | self.printed
        seen |= {s.rank for s in self.signals if s.rank is not None} | set(self.reported_exits)
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
    f = Facts(root=ev.root, unreadable=list(ev.skipped))
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
                f.printed |= {r for r in S.split_by_rank(item.text, item.rank) if r is not None}
                _launcher_facts(f, launcher.read(item.text), item.path)
        elif item.kind == "stacks" and in_top:
            rank = item.rank if item.rank is not None else _pid_rank(item.text, pid_rank)
            when = "snapshot" if "snapshot" in item.path else "timeout" if "timeout" in item.path else "dump"
            sig = S.stack_signal(item.text, rank, item.path, when)
            if rank is not None and (rank not in f.stacks or when == "snapshot"):
                f.stacks[rank] = sig  # the snapshot shows the hang before any watchdog acted
        elif item.kind == "flight_recorder" and in_top and item.rank is not None:
            try:
                calls = from_flight_recorder(item.data)
            except MalformedDump as e:
                f.unreadable.append((item.path, f"a Flight Recorder dump with malformed entries ({e})"))
                continue
            if len(calls) >= len(f.traces.get(item.rank, [])):
                f.traces[item.rank] = calls
                f.trace_files[item.rank] = item.path
                f.trace_source = "flight_recorder"
        elif item.kind == "nccl_log" and in_top:
            nccl_paths.append(item)
        elif item.kind == "memory_events" and in_top:
            for g in item.data["memory_cgroups"]:
                if isinstance(g, dict) and isinstance(g.get("rank"), int):
                    f.memory[g["rank"]] = {**g, "file": item.path}
    if nccl_paths:
        _nccl_facts(f, nccl_paths)
    _oom_killed(f)
    if f.outside:  # a whole job stopped from outside: every rank ended by that, none by itself
        f.stopped |= {r for r, c in {**f.reported_exits, **f.exit_codes}.items()
                      if c is not None and c < 0}
    return f


def _launcher_facts(f: Facts, rep: launcher.LauncherReport, path: str) -> None:
    if not rep.seen:
        return
    f.reported_exits.update(rep.exit_codes)
    f.stopped |= rep.stopped
    f.launcher_root = rep.root if rep.root is not None else f.launcher_root
    f.outside = f.outside or rep.outside
    f.launcher_lines += rep.lines
    for r in rep.oom:
        f.signals.append(S.Signal("oom", r, path, f"SLURM: task {r}: Out Of Memory"))


def _oom_killed(f: Facts) -> None:
    """A rank whose memory cgroup counted an OOM kill and that ended by SIGKILL (or whose end
    is not recorded) was ended by the kernel's OOM killer. A count with another ending (a child
    of the rank was the one killed) or a SIGKILL with no count is not that."""
    for r, g in sorted(f.memory.items()):
        kills, code = g.get("oom_kill"), f.exit_code(r)
        if not isinstance(kills, int) or kills < 1 or code not in (None, -9) or r in f.stopped:
            continue
        limit = g.get("limit_bytes")
        f.signals.append(S.Signal("oom", r, g["file"], (
            f"the kernel's OOM killer ended rank {r} in its memory cgroup (oom_kill {kills}"
            + (f", limit {mib(limit)}" if isinstance(limit, int) else "")
            + (f", peak {mib(g['peak_bytes'])}" if isinstance(g.get("peak_bytes"), int) else "")
            + ")"), {"killer": "kernel", "limit_bytes": limit, "oom_kill": kills}))


def mib(n: int) -> str:
    """Bytes as MiB, one decimal (a cgroup's limit and peak)."""
    return f"{n / (1 << 20):.1f} MiB"


def _run_facts(f: Facts, info: dict) -> None:
    f.nprocs = info.get("nprocs")
    f.backend = info.get("backend")
    f.outcome = info.get("outcome")
    f.phase = info.get("phase")
    f.late = [r for r in info.get("late_ranks") or [] if isinstance(r, int)]
    f.stopped = {r for r in info.get("stopped_by_dtlab") or [] if isinstance(r, int)}
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
    return out


def _nccl_facts(f: Facts, items: list[Item]) -> None:
    from ...nccl_log import parse

    try:  # the text load() read (bounded), not the files again: COLL lines carry host:pid
        log = parse("\n".join(i.text for i in items) + "\n")
    except ValueError:
        return
    d = log.to_dict()
    f.nccl_files = [i.path for i in items]
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
