"""Autograding cost: one student's submission of the whole course, graded as instructors do it,
on an idle machine and on one whose cores are oversubscribed; and ``--jobs`` scaling.

What is timed is ``dtlab course autograde`` (grading each submission in isolation, then merging
into the gradebook) on submissions whose every answer is right, so every test runs to the end.
``--busy N`` starts N busy loops beside it (the oversubscribed machine); the scores must be full
either way -- a grade must not depend on what else the machine does.

    python benchmarks/autograde.py                           # one student, nine notebooks, idle
    python benchmarks/autograde.py --busy 6                  # the same, 6 busy loops on the cores
    python benchmarks/autograde.py --students 4 --jobs 1,2,4 --notebooks 02_bandwidth,03_topology,04_multinode,06_nccl
    python benchmarks/autograde.py --json out.json           # the figures, for BENCHMARKS.md
    git worktree add /tmp/before 44a5f48 && python benchmarks/autograde.py --tree /tmp/before
                                                        # the same with an earlier commit's dtlab

Pinned to 2 cores (``--cores``), as CI and the goal (<= 10 min idle for nine notebooks) assume.
"""

from __future__ import annotations

import argparse
import inspect
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "grading"))  # students.solved


def class_of(root: str, inbox: str, students: int, aids: list[str]) -> None:
    """``students`` copies of a student who answers every exercise of ``aids`` right."""
    import nbformat

    from students import solved

    for k in range(students):
        for aid in aids:
            nb = solved(os.path.join(root, "release", aid, aid + ".ipynb"),
                        os.path.join(root, "source", aid, aid + ".ipynb"))
            path = os.path.join(inbox, f"student{k}", aid, aid + ".ipynb")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            nbformat.write(nb, path)


def timed(inbox: str, root: str, jobs: int, busy: int) -> tuple[float, list]:
    from dtlab import course

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        shutil.rmtree(os.path.join(root, "graded"), ignore_errors=True)
        t0 = time.perf_counter()
        db = "sqlite:///" + os.path.join(root, f"gb-{jobs}-{busy}.db")
        if jobs == 1 and "jobs" not in inspect.signature(course.autograde).parameters:
            graded = course.autograde(inbox, root=root, db=db)   # a dtlab from before --jobs
        else:
            graded = course.autograde(inbox, root=root, jobs=jobs, db=db)
        return time.perf_counter() - t0, graded
    finally:
        for p in loops:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2, help="pin to this many CPU cores (0: all)")
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside the grading")
    ap.add_argument("--students", type=int, default=1)
    ap.add_argument("--jobs", default="1", help="comma-separated --jobs values to time")
    ap.add_argument("--notebooks", default="", help="comma-separated assignments (default: all)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--tree", default=ROOT, help="the checkout whose dtlab grades (default: this one)")
    args = ap.parse_args()
    # stopped with SIGTERM (kill, a job scheduler): end the busy loops too, in timed()'s finally
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not os.path.isfile(os.path.join(args.tree, "dtlab", "__init__.py")):
        ap.error(f"--tree {args.tree}: no dtlab/ there; give a checkout of this repository")
    sys.path.insert(0, os.path.abspath(args.tree))
    # and for every process it starts (kernels, ranks): that tree's dtlab, not the installed one
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.abspath(args.tree)] +
                                               [p for p in [os.environ.get("PYTHONPATH")] if p])
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])  # children inherit
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    import nbgrader
    import torch

    from dtlab import course

    runs = []
    with tempfile.TemporaryDirectory(prefix="dtlab-bench-autograde-") as tmp:
        root = os.path.join(tmp, "course")
        aids = [a for a in args.notebooks.split(",") if a] or None
        released = course.release(root=root, assignments=aids)
        aids = [r.assignment for r in released]
        class_of(root, os.path.join(tmp, "inbox"), args.students, aids)
        for jobs in [int(j) for j in args.jobs.split(",")]:
            wall, graded = timed(os.path.join(tmp, "inbox"), root, jobs, args.busy)
            wrong = [g for g in graded if not g.ok or g.score != g.max_score]
            for g in wrong:
                print(f"{g.student}/{g.assignment}: {g.score} / {g.max_score} {g.error}", file=sys.stderr)
            runs.append({"jobs": jobs, "wall_s": round(wall, 1), "all_full": not wrong,
                         "cpu_s_learner_code": round(sum(getattr(g, "cpu_s", 0.0) for g in graded), 1),
                         "scores": {g.assignment: [g.score, g.max_score] for g in graded}})
            print(f"{args.students} student(s) x {len(aids)} notebook(s), --jobs {jobs}, "
                  f"{args.busy} busy loop(s), {cores} core(s): {wall:.1f} s; every score full: "
                  f"{not wrong}; CPU of the learners' code (sandboxes): "
                  f"{runs[-1]['cpu_s_learner_code']} s")
    commit = subprocess.run(["git", "-C", args.tree, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    result = {"what": "dtlab course autograde of correct submissions", "notebooks": aids,
              "tree": args.tree, "commit": commit,
              "students": args.students, "busy_loops": args.busy, "cores": cores, "runs": runs,
              "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "nbgrader": nbgrader.__version__}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(r["all_full"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
