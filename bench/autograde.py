"""Autograding cost: one student's submission of the whole course, graded as instructors will.

What is timed is ``dtlab.course.autograde`` (nbgrader underneath) on one submission holding
every notebook in notebooks/, each answered correctly (solution cells filled from the source),
so every cell runs as it does for a good student. For comparison, in the same job: executing
the same notebooks headless with nbclient, no nbgrader (the floor: what the cells themselves
cost). The budget is 5 minutes for the nine-notebook course on 2 CPU cores.

    python bench/autograde.py                 # pinned to 2 CPU cores, as CI and the budget assume
    python bench/autograde.py --cores 0       # all cores of this machine
    python bench/autograde.py --rounds 3 --json out.json   # medians of 3, alternating
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "grading"))  # synthetic_submissions.solved

BUDGET_S = 300.0
COURSE_NOTEBOOKS = 9


def headless(paths: list[str]) -> float:
    """Seconds to execute the notebooks with nbclient as the grading kernel would (same env)."""
    import nbformat
    from nbclient import NotebookClient

    from dtlab.course.execute import GuardedExecute, environ

    with environ(GuardedExecute.class_traits()["kernel_env"].default()):
        t0 = time.perf_counter()
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": os.path.dirname(path)}}).execute()
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2, help="pin to this many CPU cores (0: all)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat both, alternating; report medians")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        have = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, have[:args.cores])  # children (kernels, ranks) inherit it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    import nbformat
    import nbgrader
    import torch

    from dtlab import course
    from synthetic_submissions import solved

    with tempfile.TemporaryDirectory(prefix="dtlab-bench-autograde-") as tmp:
        root = os.path.join(tmp, "course")
        released = course.release(root=root)
        aids = [r.assignment for r in released]
        for r in released:
            dest = os.path.join(tmp, "inbox", "bench", r.assignment, r.assignment + ".ipynb")
            os.makedirs(os.path.dirname(dest))
            source = os.path.join(root, "source", r.assignment, r.assignment + ".ipynb")
            nbformat.write(solved(r.path, source), dest)

        floors, grades = [], []
        for _ in range(args.rounds):  # alternate, so machine noise hits both alike
            floors.append(headless([os.path.join(root, "source", a, a + ".ipynb") for a in aids]))
            t0 = time.perf_counter()
            graded = course.autograde(os.path.join(tmp, "inbox"), root=root)
            grades.append(time.perf_counter() - t0)
        floor_s, grade_s = statistics.median(floors), statistics.median(grades)

    wrong = [g for g in graded if not g.ok or g.score != g.max_score]
    if wrong:  # a fast wrong grading is no benchmark
        for g in wrong:
            print(f"{g.assignment}: {g.score} / {g.max_score} {g.error}", file=sys.stderr)
        return 1
    per_nb = grade_s / len(aids)
    result = {
        "what": "dtlab course autograde, one full-course submission (all solutions correct)",
        "notebooks": aids, "cores": cores, "rounds": args.rounds, "autograde_s": round(grade_s, 1),
        "headless_execute_s": round(floor_s, 1), "ratio_autograde_to_headless": round(grade_s / floor_s, 2),
        "per_notebook_s": round(per_nb, 1), "budget_s": BUDGET_S,
        "projected_nine_notebooks_s": round(per_nb * COURSE_NOTEBOOKS, 1),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "nbgrader": nbgrader.__version__},
    }
    print(f"autograde of one full-course submission ({len(aids)} notebook(s): {', '.join(aids)}) "
          f"on {cores} CPU core(s): {grade_s:.1f} s  [budget {BUDGET_S:.0f} s]")
    print(f"  the same notebooks executed headless, no nbgrader: {floor_s:.1f} s "
          f"(autograde / headless = {grade_s / floor_s:.2f})")
    if len(aids) < COURSE_NOTEBOOKS:
        print(f"  {per_nb:.1f} s per notebook; at that rate {COURSE_NOTEBOOKS} notebooks take "
              f"~{per_nb * COURSE_NOTEBOOKS:.0f} s")
    print(f"  {result['machine']}, {result['date']}, torch {torch.__version__}, "
          f"nbgrader {nbgrader.__version__}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
