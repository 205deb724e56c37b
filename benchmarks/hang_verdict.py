"""Hang onset -> verdict: how long from the moment ranks diverge to `dtlab diagnose`'s answer.

For each failure class, `dtlab.hang.reproduce` runs the reproducer; the onset is the moment the
culprit rank entered its bad step's collective (its ``[dtlab-step] ... step=2 phase=collective``
timestamp, written by the rank itself); the verdict time is when ``reproduce`` has the
diagnosis in hand (the evidence written and read back). The goal (issue 6): the collective
timeout (``init_process_group(timeout=)``) + 10 s.

    python benchmarks/hang_verdict.py                       # gloo, 3 ranks, every kind
    python benchmarks/hang_verdict.py --pg-timeout 5 --kinds size_mismatch,rank_killed
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def onset(out: str, culprit: int, step: int) -> float | None:
    path = os.path.join(out, f"rank{culprit}.stdout.txt")
    text = open(path).read() if os.path.exists(path) else ""
    m = re.search(rf"\[dtlab-step\] rank={culprit} step={step} phase=collective t=([\d.]+)", text)
    return float(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=3)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--pg-timeout", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--kinds", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ.setdefault("DTLAB_OUTPUT", "none")
    from dtlab.hang import KINDS, reproduce
    from dtlab.hang.kinds import BAD_STEP, CULPRIT

    kinds = [k for k in (a.kinds.split(",") if a.kinds else KINDS) if k != "straggler"]
    rows = []
    for kind in kinds:
        out = tempfile.mkdtemp(prefix=f"dtlab-bench-{kind}-")
        rep = reproduce(kind, nprocs=a.nprocs, backend=a.backend, timeout=a.timeout,
                        pg_timeout=a.pg_timeout, out=out)  # detail="auto", as users run it
        t_verdict = time.time()
        t0 = onset(out, CULPRIT % a.nprocs, BAD_STEP)
        dt = None if t0 is None else t_verdict - t0
        ok = dt is not None and dt <= a.pg_timeout + 10
        rows.append({"kind": kind, "outcome": rep.outcome, "verdict": rep.diagnosis.failure_class,
                     "onset_to_verdict_s": dt, "goal_s": a.pg_timeout + 10, "met": ok})
        print(f"{kind:<20} {rep.outcome:<10} -> {rep.diagnosis.failure_class:<19} "
              f"onset->verdict {dt if dt is None else round(dt, 1)} s "
              f"(goal {a.pg_timeout + 10:g} s) {'ok' if ok else 'MISSED'}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nprocs": a.nprocs, "backend": a.backend, "pg_timeout_s": a.pg_timeout,
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
