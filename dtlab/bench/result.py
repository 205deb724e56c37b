"""What a bandwidth sweep is given and what it gives back, as records.

* :class:`SweepConfig` -- a sweep's checked settings (:func:`dtlab.bench.engine.make_config`
  builds it; it is what each rank gets, pickled);
* :class:`SweepResult` -- what :func:`dtlab.bench.sweep` returns: the DataFrame and what goes
  with it, a report (:mod:`dtlab.reporting`: ``to_dict()`` is ``dtlab bench --json``,
  ``render()`` its nccl-tests-like text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .report import render_report, summarize

if TYPE_CHECKING:
    import pandas

_VALUES = ("time_us", "algbw", "busbw", "wrong")
_COLUMN_NAMES = {"oop": "out-of-place", "ip": "in-place"}


@dataclass(frozen=True)
class SweepConfig:
    """A sweep's settings, checked: collectives (canonical names), sizes in bytes, the size
    factor, timed and warm-up calls per size and column, dtype (dtlab.vocab's name), whether
    rank 0 prints rows, whether ``#wrong`` is checked, CUDA-graph replays (0: eager) and the
    launch's id (the store keys of its device exchange)."""

    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    progress: bool = True
    check: bool = True
    graph: int = 0
    run_id: str = "sweep"


@dataclass(frozen=True)
class SweepResult:
    """One sweep: ``frame`` (nccl-tests' columns, :data:`dtlab.bench.FRAME_COLUMNS`),
    ``header`` (nccl-tests' header fields: devices, versions, sizes, iterations),
    ``unsupported`` ({op: {"oop"|"ip": the backend's error}}) and ``skipped`` ([(op, size)]
    rounded down to 0 B or not run)."""

    frame: "pandas.DataFrame"
    header: dict = field(default_factory=dict)
    unsupported: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)

    def to_reports(self) -> list[dict]:
        """One report per (tool, op, nranks, backend): nccl-tests' JSON schema."""
        return to_reports(self)

    def to_dict(self) -> list[dict]:
        """What ``dtlab bench --json`` prints: :meth:`to_reports`."""
        return self.to_reports()

    def render(self) -> str:
        """What ``dtlab bench`` prints: nccl-tests-like text, one block per op."""
        return "\n".join(render_report(r) for r in self.to_reports())


def frame_of(data: Any) -> Any:
    """A sweep's result -> its DataFrame; anything else (a DataFrame, a path) as it is."""
    return data.frame if isinstance(data, SweepResult) else data


def _clean(v):
    """pandas/numpy scalars -> plain Python; NaN and <NA> -> None (JSON null, printed N/A)."""
    import pandas as pd

    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def to_reports(data: "SweepResult | pandas.DataFrame") -> list[dict]:
    """A sweep's result (or a bare DataFrame of one: no header, nothing unsupported) -> one
    report per (tool, op, nranks, backend): the JSON of ``dtlab bench --json``, the same schema
    as ``dtlab nccl-tests --json``."""
    if isinstance(data, SweepResult):
        df, base, unsupported = data.frame, dict(data.header or {}), dict(data.unsupported)
    else:
        df, base, unsupported = data, {}, {}
    base = base or {"tool": "dtlab bench"}
    reports = []
    keys = ["tool", "op", "nranks", "backend"]
    for key, part in df.groupby(keys, sort=False, dropna=False):
        tool, op, nranks, backend = (_clean(k) for k in key)
        rows = []
        for rec in part.to_dict(orient="records"):
            row = {k: _clean(rec[k]) for k in ("size", "count", "type", "redop", "root")}
            for g in ("oop", "ip"):
                row[g] = {k: _clean(rec[f"{g}_{k}"]) for k in _VALUES}
            rows.append(row)
        h = {**base, "op": op, "test": op, "nranks": nranks, "backend": backend,
             "warnings": list(base.get("warnings", []))}
        h["tool"] = "nccl-tests" if tool == "nccl-tests" else h.get("tool", "dtlab bench")
        for g, why in unsupported.pop(op, {}).items():
            h["warnings"].append(f"{_COLUMN_NAMES[g]} unsupported on {backend}: {why}")
        reports.append({"header": h, "rows": rows, "trailer": summarize(rows)})
    for op, cols in unsupported.items():  # ops with no row at all
        warn = [f"{_COLUMN_NAMES[g]} unsupported on {base.get('backend')}: {why}"
                for g, why in cols.items()]
        reports.append({"header": {**base, "op": op, "test": op, "warnings": warn}, "rows": [],
                        "trailer": None})
    return reports
