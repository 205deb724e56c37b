"""Step 1 of a diagnosis: find the evidence in a folder, recognising each file by its content.

A file's name is only a hint (for the rank); what a file *is* comes from what it says:

=================  ===============================================================
flight_recorder    a pickle or JSON dict with ``entries`` and ``version`` (torch FR)
run_info           dtlab's ``run.json`` (ranks, pids, exit codes, who dtlab stopped)
nccl_log           lines with ``NCCL INFO`` / ``NCCL WARN``
stacks             a py-spy dump (``Process N: ...`` then ``Thread ...``)
memory_events      a JSON dict with ``memory_cgroups``: what the kernel counted for a rank's
                   memory cgroup (``dtlab hang host_oom``'s ``cgroup-memory.json``)
console            any other text: rank output, torchrun/launcher console, dmesg, ...
=================  ===============================================================

Reading a folder dtlab did not write: only regular files are read (a FIFO, a device, a socket
or a symlink -- which could point at /dev/zero -- is listed as skipped, never opened for
reading), each through :func:`dtlab.paths.read_regular` (a non-blocking, no-follow open checked
again with fstat), and at most ``MAX_BYTES`` (64 MiB) of each file and ``MAX_TOTAL`` (512 MiB)
in all are read; a larger file is skipped and said so. Every file that is skipped or cannot be
made sense of (a Flight Recorder dump with malformed entries, a pickle of something else, binary
junk, JSON nested 200,000 deep) is *unreadable evidence*: listed with the reason in
``EvidenceSet.skipped`` and in the diagnosis, never a crash.

Flight Recorder dumps are pickles (torch's own ``fr_trace`` analyzer unpickles them too). They
are read with an unpickler that refuses every class -- the dumps torch 2.10/2.11 write hold only
dicts, lists, tuples, strings, numbers and None, so none is needed -- so a pickle from someone
else's machine cannot run code here.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field

from ...paths import MAX_BYTES, read_regular  # per file: bounded, no FIFO, device or symlink

MAX_TOTAL = 512 << 20  # per folder: past this, files are listed but not read
MAX_FILES = 5000  # per folder: a job's logs, not a file system
_RANK_IN_NAME = re.compile(r"(?:rank|trace_|_r)[_\-]?(\d+)(?!.*\d)", re.IGNORECASE)
_NCCL_LINE = re.compile(r"NCCL (INFO|WARN)")
_PYSPY_HEAD = re.compile(r"^Process (\d+): ", re.MULTILINE)


class NoEvidence(ValueError):
    """The folder holds nothing a diagnosis can use."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: Flight Recorder dumps "
                                     f"hold plain data only")


def plain_pickle(data: bytes):
    return _PlainUnpickler(io.BytesIO(data)).load()


@dataclass
class Item:
    path: str  # relative to the evidence folder
    kind: str
    rank: int | None
    text: str = ""
    data: object = None


@dataclass
class EvidenceSet:
    root: str
    items: list[Item] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why it was not used)

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items if i.kind == kind]

    @property
    def run_info(self) -> dict:
        """The first dtlab run.json at the top, else any (the main run, not its detail rerun)."""
        runs = sorted(self.of("run_info"), key=lambda i: (i.path.count(os.sep), i.path))
        return runs[0].data if runs else {}


def rank_from_name(path: str) -> int | None:
    m = _RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def classify(path: str, raw: bytes) -> tuple[str, object, str]:
    """(kind, parsed data, text) of one file."""
    if raw[:1] == b"\x80":  # pickle protocol 2+
        try:
            obj = plain_pickle(raw)
        except Exception as e:  # any failure to unpickle, whatever the bytes are
            return "unreadable", None, f"a pickle that is not plain data ({_short(e)})"
        if isinstance(obj, dict) and "entries" in obj and "version" in obj:
            return "flight_recorder", obj, ""
        return "unreadable", None, (f"a pickle of a {type(obj).__name__}, not a Flight "
                                    f"Recorder dump (a dict with 'entries' and 'version')")
    text = raw.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(text)
        except RecursionError:  # '[' * 200_000: nothing dtlab or torch writes
            return "unreadable", None, "JSON nested deeper than Python's recursion limit"
        except ValueError as e:
            if os.path.basename(path) == "run.json":  # the name is a hint; here, the only one
                return "unreadable", None, (f"a run.json that is not whole JSON ({_short(e)}): "
                                            f"cut short, or not written by dtlab")
            obj = None
        if isinstance(obj, dict):
            if "entries" in obj and "version" in obj:
                return "flight_recorder", obj, ""
            if "nprocs" in obj and "ranks" in obj and "backend" in obj:
                problem = _run_problem(obj)
                if problem:
                    return "unreadable", None, f"a run.json with {problem}"
                return "run_info", obj, ""
            if "failure_class" in obj:
                return "verdict", obj, ""
            if isinstance(obj.get("memory_cgroups"), list):
                return "memory_events", obj, ""
    if _NCCL_LINE.search(text):
        return "nccl_log", None, text
    if _PYSPY_HEAD.search(text) and "Thread " in text:
        return "stacks", None, text
    if "\x00" in text[:4096]:
        return "unreadable", None, "binary data, not text"
    return "console", None, text


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:80]}"


def _run_problem(info: dict) -> str | None:
    """What in a run.json is not as dtlab writes it (runtime/evidence.py), or None."""
    ranks = info.get("ranks")
    if not isinstance(ranks, list) or not all(
            isinstance(r, dict) and isinstance(r.get("rank"), int) for r in ranks):
        return "'ranks' not a list of {rank: int, ...}"
    for r in ranks:
        for key in ("exit_code", "pid"):
            if r.get(key) is not None and not isinstance(r[key], int):
                return f"a non-integer {key}"
        if r.get("duration_s") is not None and not isinstance(r["duration_s"], (int, float)):
            return "a non-numeric duration_s"
    if info.get("nprocs") is not None and not isinstance(info["nprocs"], int):
        return "a non-integer nprocs"
    if not isinstance(info.get("stopped_by_dtlab") or [], list):
        return "'stopped_by_dtlab' not a list"
    return None


def load(root: str) -> EvidenceSet:
    """Read every regular file under ``root`` (bounded, see the module docstring); raise
    :class:`NoEvidence` if none of it is usable."""
    if not os.path.isdir(root):
        raise NoEvidence(f"{root!r} is not a folder: give the evidence folder that `dtlab hang` "
                         f"wrote, or one holding logs, stack dumps and Flight Recorder dumps")
    ev = EvidenceSet(root=root)
    total = seen = 0
    for dirpath, dirnames, filenames in os.walk(root):  # never follows symlinked folders
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            seen += 1
            if seen > MAX_FILES or total >= MAX_TOTAL:
                ev.skipped.append((rel, f"past dtlab's limit of {MAX_FILES} files / "
                                        f"{MAX_TOTAL >> 20} MiB per folder: not read"))
                continue
            raw, why = read_regular(full, min(MAX_BYTES, MAX_TOTAL - total))
            if raw is None:
                ev.skipped.append((rel, why))
                continue
            total += len(raw)
            if not raw.strip():
                continue
            kind, data, text = classify(full, raw)
            if kind == "unreadable":
                ev.skipped.append((rel, text))
                continue
            if kind == "verdict":
                continue  # an earlier diagnosis: never evidence for the next one
            ev.items.append(Item(rel, kind, rank_from_name(name), text, data))
    runs = sorted(os.path.dirname(i.path) for i in ev.of("run_info"))
    tops = [d for d in runs if not any(d != o and (o == "" or d.startswith(o + os.sep)) for o in runs)]
    if len(tops) > 1:
        raise NoEvidence(f"{root!r} holds {len(tops)} separate runs ("
                         + ", ".join(os.path.join(d, "run.json") for d in tops[:4])
                         + "): diagnose one run's folder at a time")
    if not ev.items:
        raise NoEvidence(
            f"no evidence in {root!r}: found no NCCL_DEBUG log, Flight Recorder dump, py-spy "
            f"dump, run.json or console output"
            + (" (unreadable or skipped: " + "; ".join(f"{p}: {w}" for p, w in ev.skipped[:5])
               + ")" if ev.skipped else "")
            + ". Record a failure with `dtlab hang KIND --out DIR` or point at your job's logs.")
    if not any(i.kind != "console" or _looks_distributed(i.text) for i in ev.items):
        raise NoEvidence(f"nothing in {root!r} looks like output of a distributed job (no "
                         f"torch.distributed, NCCL or gloo messages, no rank stacks)")
    return ev


def _looks_distributed(text: str) -> bool:
    return bool(re.search(r"torch\.distributed|distributed_c10d|gloo|NCCL|ProcessGroup|"
                          r"CollectiveFingerPrint|monitoredBarrier|Watchdog|ChildFailedError|"
                          r"\[dtlab-step\]|Traceback|\[rank ?\d+\]|^srun: |^slurmstepd: ", text,
                          re.MULTILINE))
