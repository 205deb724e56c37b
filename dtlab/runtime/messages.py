"""The messages between a :class:`dtlab.Pool` and its ranks, defined once for both sides.

They travel over the authenticated control channel (:mod:`.channel`), pickled. The parent sends
a command; the rank answers every command that has an ``id`` with one :class:`Done`::

    parent -> rank                                   rank -> parent
    Run(id, call, lines)   call fn in this rank      Ready(rank, pid, device, offsets)  once, at start
    Exec(id, source, filename)  a cell, namespaced   StartFailed(rank, traceback)       instead of Ready
    Push(id, blob)         set names                 Done(id, ok, payload, seconds, offsets)
    Pull(id, name)         send a name's value back
    Shutdown()             leave the group, exit

``payload`` of a Done is the pickled value (ok) or the traceback text (not ok); ``offsets`` say
where the command's output ends in the rank's stdout/stderr files, so the parent shows each cell
exactly its own output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    id: str
    call: bytes  # cloudpickled (fn, args, kwargs)
    lines: dict  # linecache entries of the parent's cells, for tracebacks


@dataclass(frozen=True)
class Exec:
    id: str
    source: str
    filename: str


@dataclass(frozen=True)
class Push:
    id: str
    blob: bytes  # cloudpickled {name: value}


@dataclass(frozen=True)
class Pull:
    id: str
    name: str


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class Ready:
    rank: int
    pid: int
    device: str
    offsets: tuple[int, int]


@dataclass(frozen=True)
class StartFailed:
    rank: int
    traceback: str


@dataclass(frozen=True)
class Done:
    id: str
    ok: bool
    payload: bytes | str | None
    seconds: float
    offsets: tuple[int, int]
