"""What ``dtlab check`` returns: one :class:`Row` per check, and a :class:`Report` that prints
them as a table, serialises them for ``--json``, and decides the exit status.

>>> rep = Report([Row("gpus", SKIP, "no NVIDIA GPU", "", "", "")], level="quick", backend="gloo",
...              nprocs=2)
>>> rep.exit_status, rep.to_dict()["rows"][0]["verdict"]
(0, 'SKIP')
"""

from __future__ import annotations

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


class Report:
    def __init__(self, rows: list[Row], *, level: str, backend: str, nprocs: int):
        self.rows, self.level, self.backend, self.nprocs = list(rows), level, backend, nprocs

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

    def __str__(self) -> str:
        return self.render()
