"""Reading nccl-tests text output: what ``all_reduce_perf`` & co. print, as JSON-ready data.
(:mod:`dtlab.bench.report` prints reports back in the same layout.)

A report is one test run, as JSON-ready data::

    {"header":  {"tool": "nccl-tests", "nccl_tests_version": "2.19.6", "nccl_version": "2.28.9",
                 "test": "all_reduce_perf", "op": "all_reduce", "nranks": 2, "nprocs": 1,
                 "hosts": ["vm"], "devices": [{"rank": 0, "group": 0, "pid": 1119, "host": "vm",
                 "device": 0, "pci": "0000:00:06", "name": "NVIDIA H200"}, ...],
                 "nthreads": 1, "ngpus": 2, "min_bytes": 8, "max_bytes": 1073741824, "step": 2,
                 "step_kind": "factor", "warmup_iters": 1, "iters": 20, "agg_iters": 1,
                 "validation": 1, "graph": 0, "unalign": 0, "notes": [...], "warnings": [...]},
     "rows":    [{"size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
                  "oop": {"time_us": 18.13, "algbw": 0.0, "busbw": 0.0, "wrong": 0},
                  "ip":  {"time_us": 17.27, "algbw": 0.0, "busbw": 0.0, "wrong": 0}}, ...],
     "trailer": {"out_of_bounds_values": 0, "out_of_bounds_ok": true,
                 "avg_bus_bandwidth": 86.1093, "concluded": true}}

A value nccl-tests prints as ``N/A`` (``#wrong`` of in-place all_to_all/sendrecv, which it does not
check) is ``None``. Header keys appear only when the text gives them. Lines that are not part of
the table (NCCL INFO lines, mpirun chatter) are skipped, as they appear in real logs.

>>> rep = parse_nccl_tests("data/h200x2-nccl-tests/nt_all_reduce.txt")     # doctest: +SKIP
>>> rep["rows"][-1]["oop"]["busbw"], rep["trailer"]["avg_bus_bandwidth"]    # doctest: +SKIP
(327.37, 86.1093)
"""

from __future__ import annotations

import re

from ..paths import text_or_file
from ..vocab import op_name
from .formulas import OPS

_VERSION = re.compile(r"#\s*nccl-tests version\s+(\S+)(?:\s+\(([^)]*)\))?"
                      r"(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_START = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_DONE = re.compile(r"#\s*Collective test concluded:\s*(\S+)")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_PARAMS = [("nthreads", r"nThread\s+(\d+)"), ("ngpus", r"nGpus\s+(\d+)"),
           ("min_bytes", r"minBytes\s+(\d+)"), ("max_bytes", r"maxBytes\s+(\d+)"),
           ("step", r"step:\s*(\d+)"), ("warmup_iters", r"warmup iters:\s*(\d+)"),
           ("iters", r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"), ("agg_iters", r"agg iters:\s*(\d+)"),
           ("validation", r"validation:\s*(\d+)"), ("graph", r"graph:\s*(\d+)"),
           ("unalign", r"unalign:\s*(\d+)")]
_TRAILER = re.compile(r"#\s*(Out of bounds values|Bitwise mismatches|Avg bus bandwidth|GPU memory usage)"
                      r"\s*:\s*(.*?)\s*$")
# printed column name -> key in a row's oop/ip object
_FIELDS = {"time": "time_us", "cputime": "time_us", "algbw": "algbw", "busbw": "busbw",
           "#wrong": "wrong", "error": "wrong", "#bitdiff": "bitdiff", "i_min": "iter_min_us",
           "i_max": "iter_max_us", "i_p99": "iter_p99_us", "i_cv%": "iter_cv_pct"}
_IDENT = ("size", "count", "type", "redop", "root")


def nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE -> '2.28.9' (codes are X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before)."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _read(text_or_path) -> tuple[str, str]:
    return text_or_file(text_or_path, "pass a file holding nccl-tests output, or its text")


def parse_nccl_tests(text_or_path) -> dict:
    """Parse one nccl-tests run (a path or the text itself) into a report (see the module doc).

    Raises ValueError naming the file if it is not nccl-tests output, or if it holds several
    runs (use :func:`parse_nccl_tests_all` for those).

    >>> rep = parse_nccl_tests("tests/bench/fixtures/nt_broadcast.txt")    # doctest: +SKIP
    >>> rep["header"]["op"], rep["header"]["nranks"], len(rep["rows"])      # doctest: +SKIP
    ('broadcast', 2, 28)
    """
    reports = parse_nccl_tests_all(text_or_path)
    if len(reports) > 1:
        name = reports[0]["header"].get("source", "<text>")
        tests = ", ".join(r["header"].get("test", "?") for r in reports)
        raise ValueError(f"{name}: holds {len(reports)} nccl-tests runs ({tests}); use "
                         f"parse_nccl_tests_all() to get one report per run.")
    return reports[0]


def parse_nccl_tests_all(text_or_path) -> list[dict]:
    """Every run in a log that holds several (e.g. a job script calling each ``*_perf``)."""
    text, name = _read(text_or_path)
    reports: list[dict] = []
    cur = None
    for line in text.splitlines():
        s = line.strip()
        starts = _VERSION.match(s) or _START.match(s) or s.startswith("# nThread")
        if starts and (cur is None or cur["_columns"] is not None or
                       (_VERSION.match(s) and "nccl_tests_version" in cur["header"])):
            cur = _new_report(name)
            reports.append(cur)
        if cur is None:
            if _is_column_header(s):  # a table pasted without its preamble
                cur = _new_report(name)
                reports.append(cur)
            else:
                continue
        _feed(cur, s)
    reports = [r for r in reports if r["_columns"] is not None or r["header"].get("test")]
    if not reports:
        raise ValueError(f"{name}: not nccl-tests output: found no '# nccl-tests version' / "
                         f"'# Collective test starting' line and no '#  size  count  type ...' "
                         f"table header. Pass the text printed by all_reduce_perf and friends.")
    return [_finish(r) for r in reports]


def _new_report(name: str) -> dict:
    return {"header": {"tool": "nccl-tests", "source": name, "devices": [], "notes": [],
                       "warnings": []}, "rows": [], "trailer": None, "_columns": None}


def _is_column_header(s: str) -> bool:
    toks = s.lstrip("#").split()
    return s.startswith("#") and toks[:2] == ["size", "count"]


def _feed(rep: dict, s: str) -> None:
    h = rep["header"]
    if m := _VERSION.match(s):
        h["nccl_tests_version"] = m.group(1)
        if m.group(2):
            h["nccl_tests_git"] = m.group(2)
        if m.group(3):
            h["nccl_headers"] = int(m.group(3))
        if m.group(4):
            h["nccl_library"] = int(m.group(4))
            h["nccl_version"] = nccl_version_string(int(m.group(4)))
    elif m := _START.match(s):
        h["test"] = m.group(1)
        # torch's name (alltoall_perf -> all_to_all); gather_perf, hypercube_perf ... are
        # parsed too, their op just is not one dtlab.bench measures
        h["op"] = op_name(m.group(1))
    elif s.startswith("# nThread"):
        for key, pat in _PARAMS:
            if pm := re.search(pat, s):
                h[key] = int(pm.group(1))
        if km := re.search(r"step:\s*\d+\((\w+)\)", s):
            h["step_kind"] = km.group(1)
    elif m := _RANK.match(s):
        h["devices"].append({"rank": int(m.group(1)), "group": int(m.group(2)),
                             "pid": int(m.group(3)), "host": m.group(4),
                             "device": int(m.group(5)), "pci": m.group(6), "name": m.group(7)})
    elif m := re.match(r"NCCL version\s+(\S+)", s):
        h["nccl_runtime"] = m.group(1)  # NCCL's own banner (NCCL_DEBUG=VERSION or INFO)
    elif _is_column_header(s):
        rep["_columns"] = s.lstrip("#").split()
    elif m := _TRAILER.match(s):
        _trailer(rep, m.group(1), m.group(2))
    elif m := _DONE.match(s):
        rep["trailer"] = (rep["trailer"] or {}) | {"concluded": True}
    elif s.startswith("# error:"):
        h["warnings"].append(s[2:].strip())
    elif not s.startswith("#"):
        if rep["_columns"] is not None and (row := _row(rep["_columns"], s.split())):
            rep["rows"].append(row)
    elif rep["_columns"] is None and s.strip("# ") and not s.startswith("# Using devices") \
            and "out-of-place" not in s and not s.lstrip("# ").startswith("(B)"):
        h["notes"].append(s.lstrip("# "))


def _trailer(rep: dict, key: str, value: str) -> None:
    t = rep["trailer"] = rep["trailer"] or {}
    parts = value.split()
    if key == "Out of bounds values":
        t["out_of_bounds_values"] = int(parts[0])
        t["out_of_bounds_ok"] = parts[1:2] == ["OK"]
    elif key == "Bitwise mismatches":
        t["bitwise_mismatches"] = int(parts[0])
    elif key == "Avg bus bandwidth":
        t["avg_bus_bandwidth"] = float(parts[0])
        if len(parts) > 1:
            t["avg_bus_bandwidth_check"] = parts[1]
    else:
        t["gpu_memory_usage"] = value


def _num(tok: str):
    if tok == "N/A":
        return None
    v = float(tok)
    return v


def _row(cols: list[str], toks: list[str]) -> dict | None:
    """One table line -> a row dict, or None if the line is not a row (log noise)."""
    if len(toks) < 2 or not (toks[0].isdigit() and toks[1].isdigit()):
        return None
    first_time = next((i for i, c in enumerate(cols) if c in ("time", "cputime")), len(cols))
    ident, rest = cols[:first_time], cols[first_time:]
    starts = [i for i, c in enumerate(rest) if c in ("time", "cputime")]
    groups = [rest[a:b] for a, b in zip(starts, starts[1:] + [len(rest)])]
    if groups and "timestamp" in groups[-1]:
        groups[-1] = groups[-1][:groups[-1].index("timestamp")]
    need = len(ident) + sum(map(len, groups))
    names = ["oop", "ip"]
    if len(toks) < need:
        if len(groups) == 2 and len(toks) == len(ident) + len(groups[1]):
            groups, names = groups[1:], ["ip"]  # out-of-place left blank (trace replay)
        else:
            return None
    row: dict = {k: None for k in _IDENT}
    try:
        for col, tok in zip(ident, toks):
            row[col] = int(tok) if col in ("size", "count", "root") else tok
        pos = len(ident)
        for name, group in zip(names, groups):
            vals = {}
            for col in group:
                v = _num(toks[pos])
                pos += 1
                key = _FIELDS.get(col, col)
                if key in ("wrong", "bitdiff") and v is not None and v.is_integer():
                    v = int(v)
                vals[key] = v
            row[name] = vals
    except ValueError:
        return None
    row.setdefault("oop", None)
    row.setdefault("ip", None)
    if len(toks) > pos and "timestamp" in cols:
        row["timestamp"] = " ".join(toks[pos:])
    return row


def _finish(rep: dict) -> dict:
    h = rep["header"]
    ranks = [d["rank"] for d in h["devices"]]
    if ranks:
        h["nranks"] = len(set(ranks))
        h["nprocs"] = len({(d["host"], d["pid"]) for d in h["devices"]})
        h["hosts"] = sorted({d["host"] for d in h["devices"]})
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        if dup:
            h["warnings"].append(
                f"rank(s) {dup} listed more than once ({len(ranks)} Rank lines, {h['nranks']} "
                f"distinct): the processes did not form one job (nccl-tests built without MPI=1 "
                f"but started by mpirun/srun?), so each ran its own small test.")
    if rep["_columns"] is None:
        h["warnings"].append("no results table: the run stopped before its first size.")
    elif rep["trailer"] is None or "avg_bus_bandwidth" not in rep["trailer"]:
        h["warnings"].append("no '# Avg bus bandwidth' trailer: the run did not finish (a crash, "
                             "a hang, or the log was cut).")
    wrong = [r["size"] for r in rep["rows"] for g in ("oop", "ip")
             if r.get(g) and (r[g].get("wrong") or 0) > 0]
    if wrong:
        h["warnings"].append(f"wrong results (#wrong > 0) at size(s) {sorted(set(wrong))} B.")
    if h.get("op") not in OPS:
        h.setdefault("op", None)
    del rep["_columns"]
    return rep

