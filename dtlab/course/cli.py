"""``dtlab course ...``: the instructor's commands, each a thin call into :mod:`dtlab.course.api`.

    dtlab course release [--out DIR] [--force]        student versions (solutions, hidden tests out)
    dtlab course validate [ASSIGNMENT...]             source passes every test; release fails them
    dtlab course autograde SUBMISSIONS [--db URL]     SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb
    dtlab course feedback [ASSIGNMENT...] [--db URL]  HTML feedback per autograded submission
    dtlab course report [--db URL] [--csv FILE] [--json]   scores per student and exercise

All take --root DIR (course root, default build/course/) and --notebooks DIR (default notebooks/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", metavar="DIR", help="course root (default build/course/, or "
                        "$DTLAB_COURSE_ROOT)")
    common.add_argument("--notebooks", metavar="DIR", help="nbgrader source notebooks (default "
                        "notebooks/)")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", metavar="URL", help="gradebook, any SQLAlchemy URL (default SQLite "
                    "in the course root)")
    sub = parser.add_subparsers(dest="course_command", metavar="STEP")
    r = sub.add_parser("release", parents=[common], help="student versions: solutions and hidden "
                       "tests stripped")
    r.add_argument("--out", metavar="DIR", help="also copy them to DIR/<assignment>.ipynb; an "
                   "existing notebook there is kept (it may hold a learner's work)")
    r.add_argument("--force", action="store_true", help="with --out: overwrite existing notebooks")
    r.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    v = sub.add_parser("validate", parents=[common], help="the source passes every test and the "
                       "release fails them (nbgrader validate, validate --invert)")
    v.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    v.add_argument("--timeout", type=float, help="seconds per cell (default: grading/nbgrader_config.py)")
    a = sub.add_parser("autograde", parents=[common, db], help="grade submissions into the gradebook")
    a.add_argument("submissions", metavar="SUBMISSIONS", help="folder laid out as nbgrader's "
                   "submitted/: SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb")
    a.add_argument("--timeout", type=float, help="seconds per cell (default: grading/nbgrader_config.py)")
    f = sub.add_parser("feedback", parents=[common, db], help="HTML feedback for autograded submissions")
    f.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    p = sub.add_parser("report", parents=[common, db], help="scores per student, assignment and exercise")
    p.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    p.add_argument("--json", action="store_true", help="machine-readable output (one record per row)")
    parser.set_defaults(course_parser=parser)


def run(args: argparse.Namespace) -> int:
    from . import api
    from .layout import CourseError

    step = getattr(args, "course_command", None)
    if not step:
        args.course_parser.print_help()
        return 2
    try:
        return _STEPS[step](api, args)
    except CourseError as e:
        print(f"dtlab course {step}: {e}", file=sys.stderr)
        return 2


def _show(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _release(api, args) -> int:
    done = api.release(args.out, assignments=args.assignments, force=args.force, root=args.root,
                       notebooks=args.notebooks)
    for r in done:
        path = _show(r.path)
        if r.status == "kept":
            print(f"kept     {path}  (already there, maybe with your work: not overwritten; "
                  f"delete it, or pass --force, for a fresh copy)")
        else:
            print(f"{r.status:<8} {path}")
    return 0


def _validate(api, args) -> int:
    results = api.validate(args.assignments, root=args.root, notebooks=args.notebooks,
                           timeout=args.timeout)
    for v in results:
        want = "every test passes" if v.version == "source" else "no test passes without solutions"
        print(f"{'ok  ' if v.ok else 'FAIL'} {v.assignment} {v.version}: {want}")
        for problem in v.problems:
            print("     " + problem.replace("\n", "\n     "))
    return 0 if all(v.ok for v in results) else 1


def _autograde(api, args) -> int:
    graded = api.autograde(args.submissions, db=args.db, root=args.root, notebooks=args.notebooks,
                           timeout=args.timeout)
    for g in graded:
        if g.ok:
            print(f"graded   {g.student}/{g.assignment}: {g.score:g} / {g.max_score:g}")
        else:
            print(f"FAILED   {g.student}/{g.assignment}: nbgrader could not grade it: {g.error}")
        for flag in g.flags:  # the score stands until a person has looked (dtlab.course.review)
            print(f"review   {g.student}/{g.assignment}: {flag}")
    return 0 if all(g.ok for g in graded) else 1


def _feedback(api, args) -> int:
    for path in api.feedback(args.assignments, db=args.db, root=args.root, notebooks=args.notebooks):
        print(_show(path))
    return 0


def _report(api, args) -> int:
    df = api.report(db=args.db, root=args.root, csv=args.csv)
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=1))
    elif df.empty:
        print("no graded submissions yet")
    else:
        print(df.to_string(index=False))
    return 0


_STEPS = {"release": _release, "validate": _validate, "autograde": _autograde,
          "feedback": _feedback, "report": _report}
