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

Named tuples rather than dataclasses: a pool cell sends four of them, and a tuple pickles in
half the time (a few microseconds a message, measured).
"""

from __future__ import annotations

from typing import NamedTuple


class Run(NamedTuple):
    id: str
    call: bytes  # cloudpickled (fn, args, kwargs)
    lines: dict  # linecache entries of the parent's cells, for tracebacks


class Exec(NamedTuple):
    id: str
    source: str
    filename: str


class Push(NamedTuple):
    id: str
    blob: bytes  # cloudpickled {name: value}


class Pull(NamedTuple):
    id: str
    name: str


class Shutdown(NamedTuple):
    """Leave the group and exit (no fields)."""


class Ready(NamedTuple):
    rank: int
    pid: int
    device: str
    offsets: tuple[int, int]


class StartFailed(NamedTuple):
    rank: int
    traceback: str


class Done(NamedTuple):
    id: str
    ok: bool
    payload: bytes | str | None
    seconds: float
    offsets: tuple[int, int]
