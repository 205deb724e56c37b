"""Printing reports: nccl-tests' own text layout, and a short summary for people.

A report is ``{"header", "rows", "trailer"}`` as :mod:`dtlab.bench.nccl_tests` parses it and as
:func:`dtlab.bench.to_reports` makes it from a sweep, so both print the same way.
:func:`render_row` reproduces nccl-tests' table lines byte for byte (its ``getFloatStr``: two
decimals when they fit the column, then one, then none).

>>> from dtlab.bench.nccl_tests import parse_nccl_tests
>>> print(summary_text(parse_nccl_tests("data/h200x2-nccl-tests/nt_all_reduce.txt")))  # doctest: +SKIP
"""

from __future__ import annotations

from .formulas import format_size


def float_field(value: float | None, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals if they fit the width, else 1, else 0, else 1.2e+03."""
    if value is None or value != value:  # None or NaN: not measured
        return "N/A".rjust(width)
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        s = fmt.format(value)
        if len(s) <= width:
            return s
    return (f"{{:{width}.1e}}" if width >= 7 else f"{{:{width}.0e}}").format(value)


def render_row(row: dict) -> str:
    """One table line, byte for byte as nccl-tests prints it."""
    root = "" if row.get("root") is None else f"{row['root']:6d}"
    line = (f"{row.get('size') or 0:12d}  {row.get('count') or 0:12d}  {row.get('type') or '':>8s}  "
            f"{row.get('redop') or '':>6s}  {root:>6s}")
    for g in ("oop", "ip"):
        v = row.get(g) or {}
        line += (f"  {float_field(v.get('time_us'), 7)}  {float_field(v.get('algbw'), 6)}"
                 f"  {float_field(v.get('busbw'), 6)}")
        wrong = v.get("wrong")
        line += "    N/A" if wrong is None else f"  {float(wrong):6g}"
    return line


TABLE_HEAD = (
    "#                                                              out-of-place                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ")


def render_report(report: dict) -> str:
    """A report (parsed, or made by :func:`dtlab.bench.sweep`) as nccl-tests-like text."""
    h, out = report.get("header", {}), []
    if h.get("tool", "nccl-tests") == "nccl-tests":
        if "nccl_tests_version" in h:
            git = f" ({h['nccl_tests_git']})" if h.get("nccl_tests_git") else ""
            out.append(f"# nccl-tests version {h['nccl_tests_version']}{git} "
                       f"nccl-headers={h.get('nccl_headers', 0)} nccl-library={h.get('nccl_library', 0)}")
    else:
        out.append(f"# {h.get('tool')} {h.get('tool_version', '')}".rstrip() +
                   "".join(f" {k}={h[k]}" for k in ("torch", "backend", "nccl_version") if h.get(k)))
    if h.get("test") or h.get("op"):
        out.append(f"# Collective test starting: {h.get('test') or h.get('op')}")
    if "min_bytes" in h:
        step = f" step: {h.get('step', 2)}({h.get('step_kind', 'factor')})"
        iters = "".join(f" {label}: {h[k]}" for k, label in (
            ("warmup_iters", "warmup iters"), ("iters", "iters"), ("agg_iters", "agg iters"),
            ("validation", "validation"), ("graph", "graph"), ("unalign", "unalign")) if k in h)
        lead = f"# nThread {h['nthreads']} nGpus {h['ngpus']} " if "nthreads" in h else "# "
        out.append(f"{lead}minBytes {h['min_bytes']} maxBytes {h['max_bytes']}{step}{iters}")
    out += [f"# {n}" for n in h.get("notes", [])] + ["#", "# Using devices"]
    for d in h.get("devices", []):
        out.append(f"#  Rank {d['rank']:2d} Group {d.get('group', 0):2d} Pid {d.get('pid', 0):6d} on "
                   f"{d.get('host', ''):>10s} device {d.get('device', 0):2d} [{d.get('pci', '')}] "
                   f"{d.get('name', '')}")
    out += ["#", TABLE_HEAD] + [render_row(r) for r in report.get("rows", [])]
    t = report.get("trailer") or {}
    if "out_of_bounds_values" in t:
        out.append(f"# {'Out of bounds values':<20s} : {t['out_of_bounds_values']} "
                   f"{'OK' if t.get('out_of_bounds_ok') else 'FAILED'}")
    if "avg_bus_bandwidth" in t:
        out.append(f"# {'Avg bus bandwidth':<20s} : {t['avg_bus_bandwidth']:g} "
                   f"{t.get('avg_bus_bandwidth_check', '')}")
    out += [f"# WARNING: {w}" for w in h.get("warnings", [])]
    if t.get("concluded"):
        out += ["#", f"# Collective test concluded: {h.get('test') or h.get('op')}", "#"]
    return "\n".join(out) + "\n"


def summarize(rows: list[dict]) -> dict:
    """The trailer nccl-tests computes: wrong (size, column) pairs and the mean busbw of every
    measured column (out-of-place and in-place alike, as its ``Avg bus bandwidth`` does)."""
    bws = [r[g]["busbw"] for r in rows for g in ("oop", "ip")
           if r.get(g) and r[g].get("busbw") is not None]
    bad = sum(1 for r in rows for g in ("oop", "ip") if r.get(g) and (r[g].get("wrong") or 0) > 0)
    return {"out_of_bounds_values": bad, "out_of_bounds_ok": bad == 0,
            "avg_bus_bandwidth": round(sum(bws) / len(bws), 4) if bws else None, "concluded": True}


def _best(rows: list[dict]) -> tuple[float, int, str] | None:
    best = None
    for r in rows:
        for g, name in (("oop", "out-of-place"), ("ip", "in-place")):
            bw = (r.get(g) or {}).get("busbw")
            if bw is not None and (best is None or bw > best[0]):
                best = (bw, r["size"], name)
    return best


def summary_text(report: dict) -> str:
    """A few lines a person reads at 3 a.m.: what ran where, busbw per size, peak, problems."""
    h, rows, t = report["header"], report["rows"], report.get("trailer") or {}
    who = h.get("test") or h.get("op") or "?"
    tool = (f"nccl-tests {h['nccl_tests_version']}" if h.get("nccl_tests_version")
            else h.get("tool", "nccl-tests"))
    nccl = f", NCCL {h['nccl_version']}" if h.get("nccl_version") else ""
    names = sorted({d["name"] for d in h.get("devices", [])})
    where = ""
    if h.get("nranks"):
        where = (f", {h['nranks']} ranks in {h.get('nprocs', '?')} process(es) on "
                 f"{', '.join(h.get('hosts', [])) or '?'}: {', '.join(names)}")
    out = [f"{h.get('source', '')}: {who}, {tool}{nccl}{where}".lstrip(": ")]
    if "iters" in h:
        out.append(f"  warmup {h.get('warmup_iters', '?')}, iters {h['iters']}, sizes "
                   f"{format_size(h.get('min_bytes', 0))}..{format_size(h.get('max_bytes', 0))}")
    out.append(f"  {'size':>6s}  {'oop us':>9s}  {'oop busbw':>9s}  {'ip us':>9s}  "
               f"{'ip busbw':>9s}  #wrong")
    for r in rows:
        o, i = r.get("oop") or {}, r.get("ip") or {}
        wrong = "/".join("N/A" if v.get("wrong") is None else str(v["wrong"]) for v in (o, i))
        out.append(f"  {format_size(r['size']):>6s}  {float_field(o.get('time_us'), 9)}  "
                   f"{float_field(o.get('busbw'), 9)}  {float_field(i.get('time_us'), 9)}  "
                   f"{float_field(i.get('busbw'), 9)}  {wrong}")
    if best := _best(rows):
        out.append(f"peak busbw {best[0]:.2f} GB/s at {format_size(best[1])} ({best[2]})")
    if "avg_bus_bandwidth" in t:
        oob = t.get("out_of_bounds_values")
        out.append(f"avg bus bandwidth {t['avg_bus_bandwidth']:g} GB/s; out-of-bounds values "
                   f"{oob} {'OK' if t.get('out_of_bounds_ok') else 'FAILED'}")
    out += [f"WARNING: {w}" for w in h.get("warnings", [])]
    return "\n".join(out)
