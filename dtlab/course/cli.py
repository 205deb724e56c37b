"""``dtlab course ...``: the instructor's commands, each a thin call into :mod:`dtlab.course.api`.

    dtlab course release [--out DIR] [--force]        student versions (solutions, hidden tests out)
    dtlab course validate [ASSIGNMENT...]             graded: source passes every test, release none
    dtlab course autograde SUBMISSIONS [--jobs N]     grade each submission (sandboxed), then merge
    dtlab course autograde SUBMISSIONS --slurm-script a Slurm array job doing the same on a cluster
    dtlab course grade NOTEBOOK --assignment A --out DIR    one submission, self-contained
    dtlab course merge [--results DIR] [--db URL]     graded results -> the gradebook (nbgrader)
    dtlab course feedback [ASSIGNMENT...] [--db URL]  HTML feedback per autograded submission
    dtlab course report [--db URL] [--csv FILE] [--json]   scores per student and exercise

All take --root DIR (course root, default build/course/) and --notebooks DIR (default notebooks/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from .grade import CPU_S, TIMEOUT_S


def _seconds(text: str) -> float:
    """A limit: a positive, finite number of seconds (argparse prints one line, exits 2)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return v


def _jobs(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= 256:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 256")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", metavar="DIR", help="course root (default build/course/, or "
                        "$DTLAB_COURSE_ROOT)")
    common.add_argument("--notebooks", metavar="DIR", help="nbgrader source notebooks (default "
                        "notebooks/)")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", metavar="URL", help="gradebook, any SQLAlchemy URL (default SQLite "
                    "in the course root)")
    limits = argparse.ArgumentParser(add_help=False)
    limits.add_argument("--cpu-limit", type=_seconds, default=CPU_S, metavar="S",
                        help=f"CPU seconds one call of a learner's function may use (default "
                             f"{CPU_S:g}); a busy machine does not change what it measures")
    limits.add_argument("--timeout", type=_seconds, default=TIMEOUT_S, metavar="S",
                        help=f"wall-clock backstop per test cell, the grader's own work "
                             f"included (default {TIMEOUT_S:g})")
    limits.add_argument("--unsafe-no-sandbox", action="store_true", help="grade without the "
                        "OS sandbox (where bubblewrap or user namespaces are missing): the "
                        "learner's code can then read and change anything you can; every "
                        "line reporting a grade says so")
    sub = parser.add_subparsers(dest="course_command", required=True, metavar="{release,"
                                "validate,autograde,grade,merge,feedback,report}")
    r = sub.add_parser("release", parents=[common], help="student versions: solutions and hidden "
                       "tests stripped")
    r.add_argument("--out", metavar="DIR", help="also copy them to DIR/<assignment>.ipynb; an "
                   "existing notebook there is kept (it may hold a learner's work)")
    r.add_argument("--force", action="store_true", help="with --out: overwrite existing notebooks")
    r.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    v = sub.add_parser("validate", parents=[common, limits], help="grade each assignment: the "
                       "source must pass every test, the release none")
    v.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    a = sub.add_parser("autograde", parents=[common, db, limits], help="grade submissions "
                       "(each in its own sandboxes) and record them in the gradebook")
    a.add_argument("submissions", metavar="SUBMISSIONS", help="folder laid out as nbgrader's "
                   "submitted/: SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb")
    a.add_argument("--jobs", type=_jobs, default=1, metavar="N", help="submissions graded at "
                   "once (default 1; each uses about one core)")
    a.add_argument("--slurm-script", action="store_true", help="print a Slurm batch script "
                   "that grades each submission as an array task and then merges, instead of "
                   "grading here")
    g = sub.add_parser("grade", parents=[common, limits], help="grade one submission, "
                       "self-contained: its notebook in, result.json and the graded notebook out")
    g.add_argument("notebook", metavar="NOTEBOOK")
    g.add_argument("--assignment", required=True, help="the assignment id (a notebook's stem)")
    g.add_argument("--out", required=True, metavar="DIR", help="where result.json and the graded "
                   "notebook go")
    g.add_argument("--student", default="", help="recorded in result.json")
    g.add_argument("--source", metavar="NOTEBOOK", help="the assignment's source notebook "
                   "(default: notebooks/<assignment>.ipynb)")
    m = sub.add_parser("merge", parents=[common, db], help="record graded results in the "
                       "gradebook (nbgrader autograde, replaying dtlab course grade's outputs)")
    m.add_argument("--results", metavar="DIR", help="graded results, <DIR>/<student>/"
                   "<assignment>/ (default <root>/graded)")
    m.add_argument("--submissions", metavar="DIR", help="collect these submissions into the "
                   "course root first (as autograde does)")
    f = sub.add_parser("feedback", parents=[common, db], help="HTML feedback for autograded submissions")
    f.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    p = sub.add_parser("report", parents=[common, db], help="scores per student, assignment and exercise")
    p.add_argument("--csv", metavar="FILE", help="write the table as CSV to FILE (and print a "
                   "one-line summary)")
    p.add_argument("--json", action="store_true", help="machine-readable output (one record per row)")


def check(args: argparse.Namespace) -> None:
    """Refuses, before anything runs, what would otherwise fail part-way: a course root, an
    output folder or a notebook that is not what the step needs (ValueError naming the flag)."""
    from ..paths import check_output_folder

    step = args.course_command
    if args.root is not None:
        if step == "report":  # only read: a folder, or nothing there yet
            if os.path.lexists(args.root) and not os.path.isdir(args.root):
                raise ValueError(f"--root {args.root!r} exists and is not a folder: give the "
                                 f"course root folder")
        else:
            check_output_folder(args.root, "--root")
    if step == "release" and args.out is not None:
        check_output_folder(args.out, "--out")
    if step == "grade":
        why = _unreadable_notebook(args.notebook)
        if why:
            raise ValueError(why)
        args.source = _source(args)
        check_output_folder(args.out, "--out")


def _source(args) -> str:
    """The assignment's source notebook, checked readable: --source, else the assignment's
    notebook in --notebooks (ValueError naming the flag)."""
    from ..paths import shown, unreadable
    from .layout import notebooks_dir

    hint = "give the assignment's source .ipynb file"
    if args.source is not None:
        why = unreadable(args.source)
        if why:
            raise ValueError(f"--source '{shown(args.source)}': {why}: {hint}")
        return args.source
    folder = notebooks_dir(args.notebooks)
    path = os.path.join(folder, args.assignment + ".ipynb")
    why = unreadable(path) if os.path.basename(path) == args.assignment + ".ipynb" \
        else "not a notebook's name"
    if why:
        raise ValueError(f"--assignment {args.assignment!r}: no source notebook "
                         f"{shown(path)} ({why}): give an assignment of {shown(folder)} "
                         f"(a notebook's stem), or --source NOTEBOOK")
    return path


def run(args: argparse.Namespace) -> int:
    from . import api
    from .layout import CourseError

    step = args.course_command
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
                           timeout=args.timeout, cpu_s=args.cpu_limit,
                           isolate=not args.unsafe_no_sandbox)
    for v in results:
        want = "every test passes" if v.version == "source" else "no test passes without solutions"
        print(f"{'ok  ' if v.ok else 'FAIL'} {v.assignment} {v.version}: {want}")
        for problem in v.problems:
            print("     " + problem.replace("\n", "\n     "))
    return 0 if all(v.ok for v in results) else 1


def _line(student: str, aid: str, score, max_score, sandbox: str) -> str:
    unsafe = "  [UNSAFE: graded without a sandbox]" if sandbox.startswith("UNSAFE") else ""
    return f"graded   {student}/{aid}: {score:g} / {max_score:g}{unsafe}"


def _autograde(api, args) -> int:
    if args.slurm_script:
        from .slurm import script

        print(script(args.submissions, root=args.root, db=args.db, notebooks=args.notebooks,
                     timeout=args.timeout, cpu_s=args.cpu_limit,
                     isolate=not args.unsafe_no_sandbox))
        return 0

    def progress(pair, result, why):
        if result is not None:
            print(_line(*pair, result.score, result.max_score, result.sandbox), flush=True)
        else:
            print(f"FAILED   {pair[0]}/{pair[1]}: {why}", flush=True)

    graded = api.autograde(args.submissions, db=args.db, root=args.root, notebooks=args.notebooks,
                           timeout=args.timeout, cpu_s=args.cpu_limit, jobs=args.jobs,
                           isolate=not args.unsafe_no_sandbox, on_graded=progress)
    for g in graded:
        if not g.ok:
            print(f"FAILED   {g.student}/{g.assignment}: not recorded: {g.error}")
    print(f"recorded {sum(g.ok for g in graded)} of {len(graded)} in the gradebook")
    return 0 if all(g.ok for g in graded) else 1


def _grade(api, args) -> int:
    from .grade import grade

    r = grade(args.notebook, args.assignment, out=args.out, student=args.student,
              source=args.source, cpu_s=args.cpu_limit, timeout=args.timeout,
              isolate=not args.unsafe_no_sandbox)
    print(_line(args.student or "-", args.assignment, r.score, r.max_score, r.sandbox))
    for gid, s in r.scores.items():
        if s["error"]:
            print(f"  {gid}: 0 / {s['max_score']:g}: {s['error'].splitlines()[0][:160]}")
    return 0


def _unreadable_notebook(path: str) -> str:
    """Why ``path`` is not a notebook to grade (missing, not a bounded regular file, not JSON
    nbformat reads), in one line; empty if it is one."""
    import nbformat

    from ..paths import read_bytes

    hint = "give the student's .ipynb file"
    try:
        raw = read_bytes(path, hint, limit=64 << 20)
    except (ValueError, OSError) as e:
        return " ".join(str(e).split())
    try:
        nbformat.reads(raw.decode("utf-8"), as_version=4)
    except Exception as e:  # noqa: BLE001 -- JSON, nesting, encoding, schema: not a notebook
        return f"{path} is not a notebook ({type(e).__name__}): {hint}"
    return ""


def _merge(api, args) -> int:
    from .layout import collect, course_root, scan_submissions, sync

    root = course_root(args.root)
    pairs = None
    if args.submissions:
        known = sync(root, args.notebooks)
        pairs = scan_submissions(os.path.abspath(args.submissions), known)
        collect(os.path.abspath(args.submissions), root, pairs)
    graded = api.merge(root, pairs, db=args.db, results=args.results)
    for g in graded:
        if g.ok:
            print(_line(g.student, g.assignment, g.score, g.max_score, g.sandbox))
        else:
            print(f"FAILED   {g.student}/{g.assignment}: not recorded: {g.error}")
    return 0 if all(g.ok for g in graded) else 1


def _feedback(api, args) -> int:
    for path in api.feedback(args.assignments, db=args.db, root=args.root, notebooks=args.notebooks):
        print(_show(path))
    return 0


def _report(api, args) -> int:
    from ..reporting import Plain

    df = api.report(db=args.db, root=args.root, csv=args.csv)
    if args.csv:
        text = (f"wrote {len(df)} rows ({df['student'].nunique()} students, "
                f"{df['assignment'].nunique()} assignments) to {args.csv}")
    else:
        text = df.to_string(index=False) if not df.empty else "no graded submissions yet"
    return Plain(json.loads(df.to_json(orient="records")), text), 0


_STEPS = {"release": _release, "validate": _validate, "autograde": _autograde,
          "grade": _grade, "merge": _merge, "feedback": _feedback, "report": _report}
