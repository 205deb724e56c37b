"""Rules for how the launch ended: the check's report (a world not whole, a slow link, nothing
wrong), a rehearsal stopped at its time limit before the check reported (unsure), and anything
else (``launch_failed``, unsure: the last error line of each failed node is the evidence).

Each rule takes the :class:`~.verdict.Verdict` and returns a Diagnosis or None (pass).
"""

from __future__ import annotations

import re

from .facts import TBF, path_finding


def world_incomplete(v):
    report = v.f.report
    if report is None or report.get("ok"):
        return None
    probs = {k: report[k] for k in ("missing", "duplicate_ranks", "duplicate_gpus",
                                    "bad_local_ranks") if report.get(k)}
    v.note("report.json", "check", str(probs))
    return v.done("world_incomplete", f"the check ran but the world is not whole: {probs}")


def slow_link(v):
    """A rate limit, or one node pair much slower than the rest, explains the bandwidth."""
    f = v.f
    if f.report is None or not f.report.get("ok"):
        return None
    slow = _slow_link(f.report, f.qdiscs, v.note)
    return v.done("slow_link", slow) if slow else None


def no_failure(v):
    f = v.f
    if f.report is None or not f.report.get("ok"):
        return None
    for p in f.short_paths:  # TCP's MSS can hide it: the run worked, the path is short
        v.note(f"{p['src']}: ping -M do", "path", path_finding(p))
    bw = f.report.get("bandwidth_GBps") or {}
    measured = ", ".join(f"{k} {bw[k]:.4f} GB/s" for k in ("within", "across")
                         if bw.get(k) is not None)
    v.note("report.json", "check", f"{f.report['ranks_present']} of {f.report['world_size']} "
           f"ranks" + (f", {measured}" if measured else ""))
    return v.done("no_failure", "every rank present, no duplicate, links as expected")


def unfinished(v):
    """Exit codes known (None: still running when stopped), none failed, some still running:
    the rehearsal's limit came first. Unsure; a cluster's logs alone tell no codes."""
    f = v.f
    if f.report is not None:
        return None
    running = [n for n in f.started if n in f.codes and f.codes[n] is None]
    if not running or not all(n in f.codes and f.codes[n] in (0, None) for n in f.started):
        return None
    for n in running:
        last = (f.consoles.get(n, "").strip().splitlines() or ["(no output yet)"])[-1]
        v.note(f.log(n), "console", f"still running when stopped; its last line: {last[:300]}")
    short = f.short_paths
    for p in short:  # between real hosts an MTU black hole hangs like this, silent
        v.note(f"{p['src']}: ping -M do", "path", path_finding(p))
    return v.done("unfinished", f"no agent failed, but the check had not reported when "
                  f"{', '.join(running)} were stopped at the rehearsal's time limit: too slow "
                  f"to tell whether the launch works (a busy machine? larger --join-timeout "
                  f"and --pg-timeout give it longer)" + (
                      "; and ping -M do finds a path that drops frames its NICs send (see the "
                      "evidence): big messages would hang on it" if short else ""),
                  confident=False)


def launch_failed(v):
    """Anything else: each failed node's last error line, unsure. Always decides."""
    f = v.f
    for n, t in f.consoles.items():
        if f.codes.get(n) not in (0, None):
            errs = [ln.strip() for ln in t.splitlines() if re.search(r"Error|error:", ln)]
            v.note(f.log(n), "console", (errs[-1] if errs else f"exit {f.codes[n]}")[:300])
    if f.host_timed_out:
        return v.done("launch_failed", "the rendezvous timed out; see each node's last error",
                      confident=False)
    return v.done("launch_failed", "the launch failed before the check reported; see each "
                  "node's last error", confident=False)


def _rate_Bps(value: str, unit: str) -> float:
    return float(value) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[unit.upper()] / 8


def _slow_link(report: dict, qdiscs: dict[str, str], note) -> str | None:
    """A rate limit that explains the across-node bandwidth, by alpha-beta, or None."""
    across = [m for m in report.get("pairs", []) if m["kind"] == "across"]
    if not across:
        return None
    limited = {n: TBF.search(q) for n, q in qdiscs.items() if TBF.search(q)}
    nbytes = report["bytes"]
    if limited:
        n, m = next(iter(limited.items()))
        rate = _rate_Bps(m.group(1), m.group(2))
        note(f"{n}: tc qdisc show", "qdisc", m.group(0))
        worst = min(across, key=lambda p: p["bandwidth_GBps"])
        alpha = worst["latency_us"] * 1e-6
        # a two-rank ring all_reduce sends S bytes each way: t(S) = alpha + S / rate
        predicted = nbytes / (alpha + nbytes / rate) / 1e9
        within = report["bandwidth_GBps"].get("within")
        note("report.json", "timing", f"across {worst['bandwidth_GBps']:.4f} GB/s measured, "
             f"{predicted:.4f} GB/s predicted (alpha {alpha * 1e6:.0f} us + {nbytes} B / "
             f"{rate / 1e6:.1f} MB/s)" + (f"; within a node {within:.4f} GB/s" if within else ""))
        return (f"the link of {n} is rate-limited ({m.group(0)}): all_reduce across nodes runs at "
                f"{worst['bandwidth_GBps']:.4f} GB/s, the alpha-beta model predicts "
                f"{predicted:.4f} GB/s" + (f", {within / worst['bandwidth_GBps']:.0f}x slower "
                                           f"than within a node" if within else ""))
    if len(across) >= 3:
        bws = sorted(p["bandwidth_GBps"] for p in across)
        median = bws[len(bws) // 2]
        slow = [p for p in across if p["bandwidth_GBps"] < median / 3]
        if slow:
            for p in slow:
                note("report.json", "timing", f"nodes {p['nodes']}: {p['bandwidth_GBps']:.4f} "
                     f"GB/s vs a median of {median:.4f} GB/s across nodes")
            return f"{len(slow)} node pair(s) at under a third of the median across-node bandwidth"
    return None
