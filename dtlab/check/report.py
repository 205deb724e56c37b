"""What ``dtlab check`` returns: one :class:`Row` per check, and a :class:`Report` that prints
them as a table, serialises them for ``--json``, writes them as one self-contained HTML page
with the pictures the checks made (``--html``), and decides the exit status.

>>> rep = Report([Row("gpus", SKIP, "no NVIDIA GPU", "", "", "")], level="quick", backend="gloo",
...              nprocs=2)
>>> rep.exit_status, rep.to_dict()["rows"][0]["verdict"]
(0, 'SKIP')
"""

from __future__ import annotations

import html
import time
from dataclasses import asdict, dataclass

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass(frozen=True)
class Row:
    """One check: its verdict, what was measured, what was expected and where that expectation
    comes from, and what to do on WARN or FAIL (the course section that explains it)."""

    check: str
    verdict: str
    measured: str
    expected: str
    source: str
    todo: str
    seconds: float = 0.0


def row(check: str, t0: float, verdict: str, measured: str, expected: str = "",
        source: str = "", todo: str = "") -> Row:
    """A :class:`Row` for a check that started at ``t0`` (``time.monotonic()``)."""
    return Row(check, verdict, measured, expected, source, todo, round(time.monotonic() - t0, 2))


COLOURS = {PASS: "#2e7d32", WARN: "#ef6c00", FAIL: "#c62828", SKIP: "#757575"}


class Report:
    def __init__(self, rows: list[Row], *, level: str, backend: str, nprocs: int,
                 figures: dict[str, str] | None = None):
        self.rows, self.level, self.backend, self.nprocs = list(rows), level, backend, nprocs
        self.figures = dict(figures or {})  # check -> a PNG as base64 text (:mod:`.figures`)

    @property
    def exit_status(self) -> int:
        return 1 if any(r.verdict in (WARN, FAIL) for r in self.rows) else 0

    def to_dict(self) -> dict:
        return {"level": self.level, "backend": self.backend, "nprocs": self.nprocs,
                "ok": self.exit_status == 0, "rows": [asdict(r) for r in self.rows]}

    def render(self) -> str:
        lines = [f"dtlab check --level {self.level}: {self.nprocs} ranks on {self.backend}"]
        w = max(len(r.check) for r in self.rows) if self.rows else 5
        for r in self.rows:
            lines.append(f"  [{r.verdict}] {r.check:<{w}}  {r.measured}  ({r.seconds:.1f} s)")
            if r.expected:
                lines.append(f"  {'':6} {'':<{w}}  expected: {r.expected}"
                             + (f" -- {r.source}" if r.source else ""))
            if r.todo and r.verdict in (WARN, FAIL, SKIP):
                lines.append(f"  {'':6} {'':<{w}}  -> {r.todo}")
        bad = [r.check for r in self.rows if r.verdict in (WARN, FAIL)]
        lines.append("  healthy: every check passed or could not run here (SKIP says why)"
                     if not bad else f"  look at: {', '.join(bad)}")
        return "\n".join(lines)

    def to_html(self) -> str:
        """One page, nothing outside it: the table, then each check's picture."""
        e = html.escape
        rows = []
        for r in self.rows:
            said = e(r.measured)
            if r.expected:
                said += f"<br><small>expected: {e(r.expected)}" + (
                    f" &mdash; {e(r.source)}" if r.source else "") + "</small>"
            if r.todo and r.verdict in (WARN, FAIL, SKIP):
                said += f"<br><small>&rarr; {e(r.todo)}</small>"
            rows.append(f"<tr><td>{e(r.check)}</td><td style='color:white;background:"
                        f"{COLOURS.get(r.verdict, '#000')};text-align:center'><b>{e(r.verdict)}"
                        f"</b></td><td>{said}</td><td>{r.seconds:.1f} s</td></tr>")
        bad = [r.check for r in self.rows if r.verdict in (WARN, FAIL)]
        pics = "".join(f"<h2>{e(name)}</h2><img alt='{e(name)}' src='data:image/png;base64,{png}'>"
                       for name, png in self.figures.items())
        return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>dtlab check</title>"
                "<style>body{font-family:sans-serif;max-width:72em;margin:2em auto}"
                "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.4em;"
                "vertical-align:top}</style></head><body>"
                f"<h1>dtlab check --level {e(self.level)}: {self.nprocs} ranks on "
                f"{e(self.backend)}</h1><p>"
                + (e(f"look at: {', '.join(bad)}") if bad else
                   "healthy: every check passed or could not run here (SKIP says why)")
                + "</p><table><tr><th>check</th><th>verdict</th><th>measured, expected, what to "
                  "do</th><th>took</th></tr>" + "".join(rows) + "</table>" + pics
                + "</body></html>")

    def __str__(self) -> str:
        return self.render()
