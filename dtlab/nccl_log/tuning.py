"""NCCL's tuning table: the latency (µs) and bandwidth (GB/s) its cost model predicts for every
collective x algorithm x protocol. Rank 0 of each communicator prints it at init when
``NCCL_DEBUG_SUBSYS`` includes TUNING (``ncclTopoTuneModel``, ``src/graph/tuning.cc``).

Two layouts, both read here:

newer releases print blocks of three algorithms::

      Algorithm   |                 Tree                |                 Ring                |
      Protocol    |             LL |          LL128 |         Simple |             LL | ...
     Max NThreads |            512 |            640 |            512 |            512 | ...
        Broadcast |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     4.6/  24.0 | ...

older releases one wide header::

    Latency/AlgBw |    Tree/    LL |    Tree/ LL128 |    Tree/Simple |    Ring/    LL | ...

>>> t = TableBuilder()
>>> for line in ["  Algorithm   |      Tree     |      Ring     |",
...              "  Protocol    |  LL |  Simple |  LL |  Simple |",
...              " Max NThreads |  512 |  512 |  512 |  512 |",
...              "    AllReduce |     8.0/  10.0 |    12.0/  20.0 |     4.5/  30.0 |    10.0/ 90.0 |"]:
...     t.feed(*classify_table_line(line))
>>> t.rows()[3]
{'function': 'AllReduce', 'algorithm': 'Ring', 'protocol': 'Simple', 'latency_us': 10.0, 'bandwidth_gbs': 90.0, 'max_threads': 512}
"""

from __future__ import annotations

import re

from .codes import canonical_algorithm, canonical_protocol


def _cells(msg: str, head: str) -> list[str] | None:
    """The '|'-separated cells after a row header like 'Protocol', or None for other rows."""
    left, bar, rest = msg.partition("|")
    if not bar or left.strip() != head:
        return None
    return [c.strip() for c in rest.split("|") if c.strip()]


def wide_header(msg: str) -> dict | None:
    cells = _cells(msg, "Latency/AlgBw")
    if not cells:
        return None
    cols = []
    for c in cells:
        a, _, p = c.partition("/")
        cols.append((canonical_algorithm(a.strip()), canonical_protocol(p.strip())))
    return {"columns": cols}


def algorithms(msg: str) -> dict | None:
    cells = _cells(msg, "Algorithm")
    return {"algorithms": [canonical_algorithm(c) for c in cells]} if cells else None


def protocols(msg: str) -> dict | None:
    cells = _cells(msg, "Protocol")
    return {"protocols": [canonical_protocol(c) for c in cells]} if cells else None


def max_threads(msg: str) -> dict | None:
    cells = _cells(msg, "Max NThreads")
    if not cells or not all(re.fullmatch(r"-?\d+", c) for c in cells):
        return None
    return {"values": [int(c) for c in cells]}


# "%13s |" then "%8.1f/%6.1f |" per column
_ROW = re.compile(r"^\s*(?P<func>[A-Za-z]\w*) \|(?P<cells>(?:\s*[-+\w.]+/\s*[-+\w.]+ \|)+)$")


def row(msg: str) -> dict | None:
    m = _ROW.match(msg.rstrip())
    if not m:
        return None
    try:
        cells = [(float(lat), float(bw)) for lat, bw in
                 re.findall(r"([-+\w.]+)/\s*([-+\w.]+) \|", m["cells"])]
    except ValueError:
        return None
    return {"function": m["func"], "cells": cells}


TABLE_RECOGNIZERS = [("tuning_header", wide_header), ("tuning_algorithms", algorithms),
                     ("tuning_protocols", protocols), ("tuning_threads", max_threads),
                     ("tuning_row", row)]
TABLE_KINDS = {kind for kind, _ in TABLE_RECOGNIZERS}


def first_match(recognizers, msg: str) -> tuple[str, dict] | None:
    """(kind, fields) of the first recogniser in ``recognizers`` that knows ``msg``."""
    for kind, recognise in recognizers:
        fields = recognise(msg)
        if fields:
            return kind, fields
    return None


def classify_table_line(msg: str) -> tuple[str, dict] | None:
    return first_match(TABLE_RECOGNIZERS, msg)


class TableBuilder:
    """Accumulates one communicator's table from its lines, in the order NCCL prints them."""

    def __init__(self) -> None:
        self.columns: list[tuple[str, str]] = []
        self._block: list[str] = []
        self.threads: dict[tuple[str, str], int] = {}
        self.cells: dict[tuple[str, str, str], tuple[float, float]] = {}

    def feed(self, kind: str, fields: dict) -> None:
        if kind == "tuning_header":
            self.columns = list(fields["columns"])
        elif kind == "tuning_algorithms":
            self._block = fields["algorithms"]
        elif kind == "tuning_protocols":
            # the Protocol row repeats the protocols three times even when the block holds fewer
            # algorithms (tuning.cc prints it for ba in 0..2), so keep the first run only
            protos: list[str] = []
            for p in fields["protocols"]:
                if p in protos:
                    break
                protos.append(p)
            self.columns = [(a, p) for a in self._block for p in protos]
        elif kind == "tuning_threads":
            self.threads.update(zip(self.columns, fields["values"]))
        elif kind == "tuning_row":
            for (a, p), cell in zip(self.columns, fields["cells"]):
                self.cells[(fields["function"], a, p)] = cell

    def rows(self) -> list[dict]:
        return [{"function": f, "algorithm": a, "protocol": p, "latency_us": lat,
                 "bandwidth_gbs": bw, "max_threads": self.threads.get((a, p))}
                for (f, a, p), (lat, bw) in self.cells.items()]
