"""What :func:`dtlab.collectives.validate` returns: one :class:`Row` per op x dtype x size x
check, merged over the ranks, and a :class:`Report` that prints, renders and serialises them.

Every rank judges its own output and returns its rows in the same order (the checks are
deterministic); :func:`merge` folds the ranks' rows into one: *unsupported* if the backend
refused the call on any rank, else *fail* if any rank got a wrong answer (the first such rank's
detail, then which other ranks were wrong too), else *pass*.

>>> rows = merge([[{"op": "all_reduce", "dtype": "int64", "size": 1, "check": "sum",
...                 "status": "pass", "detail": ""}],
...               [{"op": "all_reduce", "dtype": "int64", "size": 1, "check": "sum",
...                 "status": "fail", "detail": "rank 1, index 0: expected 1, got 2"}]])
>>> rep = Report(rows, nprocs=2, backend="gloo")
>>> rep.ok, rep.failures[0].detail
(False, 'rank 1, index 0: expected 1, got 2')
>>> rep.to_dict()["results"][0]["ok"]
False
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass

STATUSES = ("pass", "fail", "unsupported")

# Failures that are torch's, not the machine's: (backend, op, check) -> the issue.
# pytorch/pytorch#192920 (open, 2026-08): gloo ignores a non-contiguous tensor's strides in
# broadcast, scatter and reduce -- wrong values, no error (gather was fixed in #158903); torch
# 2.13's gloo all_reduce does the same here (dtlab validate --backend gloo, 2026-11-27).
GLOO_STRIDES = "pytorch/pytorch#192920"
KNOWN_BUGS = {
    ("gloo", "broadcast", "non-contiguous"): GLOO_STRIDES,
    ("gloo", "all_reduce", "sum non-contiguous"): GLOO_STRIDES,
}


@dataclass(frozen=True)
class Row:
    """One check of one collective: ``status`` is "pass", "fail" or "unsupported" (the backend
    refused the call: neither passed nor failed); ``ok`` is True, False or None to match;
    ``detail`` names, for a failure, the rank, the index, what was expected and what came back."""

    op: str
    dtype: str
    size: int
    check: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool | None:
        return {"pass": True, "fail": False}.get(self.status)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def merge(per_rank: list[list[dict]]) -> list[Row]:
    """Each rank's rows (same order on every rank) -> one Row per check."""
    rows = []
    for cells in zip(*per_rank):
        head = cells[0]
        unsupported = [c for c in cells if c["status"] == "unsupported"]
        failed = [c for c in cells if c["status"] == "fail"]
        if unsupported:
            status, detail = "unsupported", unsupported[0]["detail"]
        elif failed:
            status, detail = "fail", failed[0]["detail"]
            others = [c.get("rank") for c in failed[1:] if c.get("rank") is not None]
            if others:
                detail += f" (also wrong on rank{'s' * (len(others) > 1)} " \
                          f"{', '.join(map(str, others))})"
        else:
            status, detail = "pass", ""
        rows.append(Row(head["op"], head["dtype"], int(head["size"]), head["check"], status,
                        detail))
    return rows


class Report:
    """The verdict of one validation: ``ok`` when no row failed (unsupported rows do not fail).

    ``rows`` (list of :class:`Row`), ``failures``, ``table()`` for a terminal, ``to_dict()`` for
    ``dtlab validate --json``, an HTML table in notebooks.
    """

    def __init__(self, rows: list[Row], *, nprocs: int, backend: str):
        self.rows, self.nprocs, self.backend = list(rows), nprocs, backend

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}

    def summary(self) -> str:
        c = self.counts()
        verdict = "ok" if self.ok else "FAILED"
        return (f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['unsupported']} "
                f"unsupported on {self.nprocs} ranks ({self.backend})")

    def table(self, all_rows: bool = False) -> str:
        """One line per op x check: how many dtype x size rows passed, then each failure and
        unsupported row in full (``all_rows=True``: every row)."""
        lines = [f"{'op':<18} {'check':<26} {'pass':>4} {'fail':>4} {'unsup':>5}"]
        groups: dict[tuple, list[Row]] = {}
        for r in self.rows:
            groups.setdefault((r.op, r.check), []).append(r)
        for (op, check), rows in groups.items():
            n = {s: sum(r.status == s for r in rows) for s in STATUSES}
            lines.append(f"{op:<18} {check:<26} {n['pass']:>4} {n['fail']:>4} "
                         f"{n['unsupported']:>5}")
        shown = self.rows if all_rows else [r for r in self.rows if r.status != "pass"]
        if shown:
            lines.append("")
        for r in shown:
            lines.append(f"{r.status.upper():<11} {r.op} {r.check} {r.dtype} size={r.size}: "
                         f"{r.detail}")
        known = sorted({f"{r.op} {r.check} ({KNOWN_BUGS[(self.backend, r.op, r.check)]})"
                        for r in self.failures if (self.backend, r.op, r.check) in KNOWN_BUGS})
        if known:
            lines += ["", f"known bugs of torch's {self.backend}, not of this machine: "
                      + ", ".join(known)]
        lines += ["", self.summary()]
        return "\n".join(lines)

    def render(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        return {"ok": self.ok, "nprocs": self.nprocs, "backend": self.backend,
                "results": [r.to_dict() for r in self.rows]}

    def __repr__(self) -> str:
        return f"<Report {self.summary()}>"

    def _repr_html_(self) -> str:
        colour = {"pass": "#e6f4ea", "fail": "#fce8e6", "unsupported": "#f1f3f4"}
        cells = "".join(
            f"<tr style='background:{colour[r.status]}'><td>{r.op}</td><td>{r.check}</td>"
            f"<td>{r.dtype}</td><td>{r.size}</td><td>{r.status}</td>"
            f"<td>{html.escape(r.detail)}</td></tr>"
            for r in sorted(self.rows, key=lambda r: STATUSES.index(r.status) != 1))
        return (f"<p><b>{html.escape(self.summary())}</b></p><table><tr><th>op</th>"
                f"<th>check</th><th>dtype</th><th>size</th><th>status</th><th>detail</th></tr>"
                f"{cells}</table>")
