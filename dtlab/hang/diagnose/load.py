"""Step 1 of a diagnosis: find the evidence in a folder, recognising each file by its content.

A file's name is only a hint (for the rank); what a file *is* comes from what it says:

=================  ===============================================================
flight_recorder    a pickle or JSON dict with ``entries`` and ``version`` (torch FR)
run_info           dtlab's ``run.json`` (ranks, pids, exit codes, who dtlab stopped)
nccl_log           lines with ``NCCL INFO`` / ``NCCL WARN``
stacks             a py-spy dump (``Process N: ...`` then ``Thread ...``)
console            any other text: rank output, torchrun/launcher console, dmesg, ...
=================  ===============================================================

Flight Recorder pickles are read with an unpickler that builds only plain data (dicts, lists,
strings, numbers): a pickle from someone else's machine cannot run code here.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field

MAX_BYTES = 64 << 20  # a larger file is not evidence a person produced on purpose
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
    skipped: list[str] = field(default_factory=list)

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
        except Exception:
            return "unreadable", None, ""
        if isinstance(obj, dict) and "entries" in obj and "version" in obj:
            return "flight_recorder", obj, ""
        return "unreadable", None, ""
    text = raw.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            if "entries" in obj and "version" in obj:
                return "flight_recorder", obj, ""
            if "nprocs" in obj and "ranks" in obj and "backend" in obj:
                return "run_info", obj, ""
            if "failure_class" in obj:
                return "verdict", obj, ""
    if _NCCL_LINE.search(text):
        return "nccl_log", None, text
    if _PYSPY_HEAD.search(text) and "Thread " in text:
        return "stacks", None, text
    if "\x00" in text[:4096]:
        return "unreadable", None, ""
    return "console", None, text


def load(root: str) -> EvidenceSet:
    """Read every file under ``root``; raise :class:`NoEvidence` if none of it is usable."""
    if not os.path.isdir(root):
        raise NoEvidence(f"{root!r} is not a folder: give the evidence folder that `dtlab hang` "
                         f"wrote, or one holding logs, stack dumps and Flight Recorder dumps")
    ev = EvidenceSet(root=root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full) or os.path.getsize(full) > MAX_BYTES:
                ev.skipped.append(rel)
                continue
            with open(full, "rb") as f:
                raw = f.read()
            if not raw.strip():
                continue
            kind, data, text = classify(full, raw)
            if kind in ("unreadable", "verdict"):
                ev.skipped.append(rel)
                continue
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
            + (f" (unreadable or skipped: {', '.join(ev.skipped[:5])})" if ev.skipped else "")
            + ". Record a failure with `dtlab hang KIND --out DIR` or point at your job's logs.")
    if not any(i.kind != "console" or _looks_distributed(i.text) for i in ev.items):
        raise NoEvidence(f"nothing in {root!r} looks like output of a distributed job (no "
                         f"torch.distributed, NCCL or gloo messages, no rank stacks)")
    return ev


def _looks_distributed(text: str) -> bool:
    return bool(re.search(r"torch\.distributed|distributed_c10d|gloo|NCCL|ProcessGroup|"
                          r"CollectiveFingerPrint|monitoredBarrier|Watchdog|ChildFailedError|"
                          r"\[dtlab-step\]|Traceback|\[rank ?\d+\]", text))
