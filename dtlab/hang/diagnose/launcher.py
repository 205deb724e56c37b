"""What a launcher's console says about how each rank ended: torchrun (torch elastic) and SLURM.

A launcher reports two different things, and a diagnosis must keep them apart:

* a rank that ended *by itself* (an exception, an exit code, a signal from the kernel such as
  the OOM killer) -- a candidate root cause;
* a rank the launcher *stopped* because another one had failed (torchrun: "Sending process PID
  closing signal SIGTERM" after the first failure; SLURM: ``srun: error: NODE: tasks 0,2:
  Terminated`` after ``srun: Job step aborted``), or that something outside stopped with the
  whole job (``timeout`` or ``kill`` sending SIGTERM to torchrun: "Received 15 death signal,
  shutting down workers"; SLURM's ``*** JOB 42 ON node1 CANCELLED AT ... DUE TO TIME LIMIT ***``).
  Such a rank is never a culprit: a job killed from outside while hung is diagnosed by what it
  was stuck in, not by the signals that ended it.

torchrun's "Root Cause (first observed failure)" is only the first rank it *saw* fail: a rank
that lost its peer can fail first (see tests/hang/fixtures/captured_torchrun_exit). Formats: the
consoles captured under tests/hang/fixtures/captured_torchrun_* (torch 2.13) and the SLURM
messages cited in tests/hang/fixtures/README.md. SLURM task numbers are taken as ranks, which
holds when srun starts the ranks itself (one task per rank, RANK = SLURM_PROCID).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# torchrun's ChildFailedError summary: one block per failed rank
_TR_BLOCK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)"
                       r"(?:\s*\(pid:\s*(\d+)\))?")
_TR_ROOT = re.compile(r"Root Cause \(first observed failure\):\s*\n\s*\[\d+\]:\s*\n(?:.*\n){0,2}?"
                      r"\s*rank\s*:\s*(\d+)")
_TR_STOPPING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")
_TR_DEATH = re.compile(r"Received (?:Signals\.)?(\w+) death signal, shutting down workers")
_SLURM_CANCEL = re.compile(r"\*\*\* (?:JOB|STEP) [\w.]+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))?"
                           r"(?: \*\*\*|$)", re.MULTILINE)
_SRUN_TASKS = re.compile(r"srun: error: \S+: tasks? ([\d,\- ]+): (Exited with exit code (\d+)|"
                         r"Terminated|Killed|Out Of Memory|[A-Z][\w ]+)")
_SLURM_OOM = re.compile(r"Detected \d+ oom[-_]kill event")


@dataclass
class LauncherReport:
    exit_codes: dict[int, int] = field(default_factory=dict)  # as the launcher reported them
    stopped: set[int] = field(default_factory=set)  # ranks the launcher or the outside stopped
    root: int | None = None  # torchrun's "Root Cause (first observed failure)"
    outside: str | None = None  # the line saying the whole job was stopped from outside
    oom: set[int] = field(default_factory=set)  # killed for memory (SLURM's cgroup OOM killer)
    lines: list[str] = field(default_factory=list)  # the launcher's own lines, for evidence
    seen: bool = False  # any launcher output at all


def _task_list(text: str) -> list[int]:
    out = []
    for part in text.replace(" ", "").split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            if a.isdigit() and b.isdigit() and int(b) - int(a) < 100000:
                out += range(int(a), int(b) + 1)
        elif part.isdigit():
            out.append(int(part))
    return out


def read(text: str) -> LauncherReport:
    """Everything torchrun and srun/slurmstepd said in ``text`` about how ranks ended."""
    rep = LauncherReport()
    pid_rank = {}
    for m in _TR_BLOCK.finditer(text):
        rank, code = int(m[1]), int(m[2])
        rep.exit_codes[rank] = code
        if m[3]:
            pid_rank[int(m[3])] = rank
        rep.seen = True
        rep.lines.append(f"torchrun: rank {rank} exitcode {code}")
    if m := _TR_ROOT.search(text):
        rep.root = int(m[1])
    stopping = {int(m[1]) for m in _TR_STOPPING.finditer(text)}
    rep.stopped |= {pid_rank[p] for p in stopping if p in pid_rank}
    if m := _TR_DEATH.search(text):
        rep.outside = f"torchrun: {m.group(0)}"
        rep.seen = True
    for m in _SLURM_CANCEL.finditer(text):
        rep.seen = True
        why = (m[1] or "").strip()
        if why != "TASK FAILURE":  # a time limit, scancel, preemption, a node failure: outside
            rep.outside = rep.outside or m.group(0).strip()
    for m in _SRUN_TASKS.finditer(text):
        rep.seen = True
        tasks = _task_list(m[1])
        rep.lines.append(m.group(0).strip())
        if m[3] is not None:
            rep.exit_codes.update({t: int(m[3]) for t in tasks})
        elif m[2] in ("Terminated", "Killed"):
            rep.stopped.update(tasks)  # SIGTERM/SIGKILL from srun or slurmstepd
        elif m[2] == "Out Of Memory":
            rep.oom.update(tasks)
    if "srun: Job step aborted" in text or "srun: Force Terminated" in text:
        rep.seen = True
    if _SLURM_OOM.search(text) and not rep.oom:
        rep.lines.append(_SLURM_OOM.search(text).group(0))
    if rep.outside:
        # everything that ended by a signal after the whole job was stopped was stopped by it
        rep.stopped |= {r for r, c in rep.exit_codes.items() if c < 0}
    return rep
