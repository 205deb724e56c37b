"""The instructor's operations, as Python, over nbgrader's ``NbGraderAPI`` (no subprocesses).

A term, end to end (the same as the ``dtlab course ...`` commands, see grading/README.md)::

    from dtlab import course
    course.release(out="handout")                 # student versions -> handout/00_launch.ipynb
    assert all(v.ok for v in course.validate())   # source passes every test; release fails them
    course.autograde("inbox", jobs=2)             # inbox/<student>/<assignment>/<assignment>.ipynb
    course.feedback()                             # build/course/feedback/<student>/<assignment>/*.html
    course.report(csv="grades.csv")               # one row per student and assignment

Autograding is two steps: **grade** each submission on its own (:func:`dtlab.course.grade.grade`,
the learner's code in sandboxes, ``jobs`` at a time, or one task each on a cluster), then
**merge** the results into the gradebook with nbgrader's autograde (:func:`merge`).

Each call first refreshes the course root from notebooks/ (:mod:`dtlab.course.layout`). Every
function takes ``root=`` (the course root, default build/course/) and, where a gradebook is
involved, ``db=`` (any SQLAlchemy URL; default SQLite in the course root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass, field

from .grade import CPU_S, TIMEOUT_S, Result, check_limit
from .layout import (GRADING_DIR, CourseError, collect, course_root, default_db_url, scan_submissions,
                     select, sync)


@dataclass
class Released:
    assignment: str
    path: str
    status: str  # "generated" (course root), "new", "kept" (an existing copy left alone), "replaced"


@dataclass
class Validation:
    assignment: str
    version: str  # "source": every test must pass; "release": every test must fail
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Graded:
    student: str
    assignment: str
    ok: bool  # graded and recorded (a failing test still counts as ok)
    score: float | None = None
    max_score: float | None = None
    error: str = ""  # why it could not be graded or recorded, when not ok
    log: str = ""  # nbgrader's log of this submission's merge
    sandbox: str = ""  # how the learner's code was isolated ("UNSAFE: ..." without a sandbox)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def unsafe(self) -> bool:
        return self.sandbox.startswith("UNSAFE")


def _config(root: str, db: str | None = None, results: str | None = None):
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=GRADING_DIR).load_config()
    cfg.CourseDirectory.root = root
    cfg.CourseDirectory.db_url = db = db or default_db_url(root)
    folder = os.path.dirname(db[len("sqlite:///"):]) if db.startswith("sqlite:///") else ""
    if folder and not os.path.isdir(folder):
        # nbgrader would blame a gradebook schema upgrade; the folder is what is missing
        raise CourseError(f"the gradebook's folder {folder} does not exist (--db {db}): "
                          f"create it, or pass another --db.")
    cfg.Replay.results = results or results_dir(root)
    cfg.Replay.submitted = os.path.join(root, "submitted")
    return cfg


def results_dir(root: str) -> str:
    """Where ``dtlab course grade`` leaves each submission's result: <root>/graded/."""
    return os.path.join(root, "graded")


@contextlib.contextmanager
def _nbgrader(root: str, db: str | None = None, results: str | None = None):
    """An NbGraderAPI on the course root. nbgrader's markers (NBGRADER_EXECUTION, which
    nbgrader.utils.setenv leaves set when a step raises) are restored afterwards."""
    from nbformat.warnings import MissingIDFieldWarning
    from nbgrader.apps import NbGraderAPI
    from sqlalchemy.exc import SAWarning

    from .execute import environ

    # nbgrader runs the `alembic` command to stamp a new gradebook; it sits beside this
    # interpreter, which may not be on PATH (.venv/bin/dtlab run without activating the venv)
    path = {} if shutil.which("alembic") else {
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    with environ(path, also_restore=("NBGRADER_EXECUTION", "NBGRADER_VALIDATING")), \
            warnings.catch_warnings():
        # upstream noise an instructor can do nothing about: nbgrader's gradebook code trips
        # SQLAlchemy's autoflush warnings, and a test cell it restores has no cell id
        warnings.filterwarnings("ignore", category=MissingIDFieldWarning)
        warnings.filterwarnings("ignore", category=SAWarning)
        yield NbGraderAPI(config=_config(root, db, results))


def _check(result: dict, what: str) -> None:
    if not result.get("success"):
        tail = "\n".join((result.get("log") or "").strip().splitlines()[-15:])
        raise CourseError(f"{what} failed in nbgrader:\n{result.get('error') or ''}\n{tail}".rstrip())


def _generate(api, aids: list[str]) -> None:
    # nbgrader's generate_assignment: the release/ version plus the gradebook's record of every
    # grade cell and checksum, which autograde needs to restore tests.
    for aid in aids:
        _check(api.generate_assignment(aid, force=True, create=True),
               f"generating the student version of {aid}")


def release(out: str | None = None, *, assignments: list[str] | None = None, force: bool = False,
            root: str | None = None, notebooks: str | None = None,
            db: str | None = None) -> list[Released]:
    """Generate the student version of each assignment (solutions and hidden tests stripped),
    in the course root's release/<assignment>/, and copy it to ``out/<assignment>.ipynb``.

    A notebook already in ``out`` is never overwritten unless ``force=True``: it may hold a
    learner's work (``make lab`` runs this on every start).

    >>> from dtlab import course
    >>> [(r.assignment, r.status) for r in course.release(out="release")]   # doctest: +SKIP
    [('00_launch', 'new')]
    """
    root = course_root(root)
    aids = select(assignments, sync(root, notebooks))
    with _nbgrader(root, db) as api:
        _generate(api, aids)
    made = [Released(a, os.path.join(root, "release", a, a + ".ipynb"), "generated") for a in aids]
    if out is None:
        return made
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    copied = []
    for r in made:
        dest = os.path.join(out, r.assignment + ".ipynb")
        status = "new" if not os.path.exists(dest) else ("replaced" if force else "kept")
        if status != "kept":
            shutil.copyfile(r.path, dest)
        copied.append(Released(r.assignment, dest, status))
    return copied


def validate(assignments: list[str] | None = None, *, root: str | None = None,
             notebooks: str | None = None, timeout: float = TIMEOUT_S, cpu_s: float = CPU_S,
             isolate: bool = True) -> list[Validation]:
    """Each assignment graded as a submission would be (:func:`dtlab.course.grade.grade`): the
    source, with its solutions, must pass every test; the release, without them, must pass none.

    >>> from dtlab import course
    >>> [(v.assignment, v.version, v.ok) for v in course.validate(["00_launch"])]  # doctest: +SKIP
    [('00_launch', 'source', True), ('00_launch', 'release', True)]
    """
    from .grade import grade

    root = course_root(root)
    aids = select(assignments, sync(root, notebooks))
    with _nbgrader(root) as api:
        _generate(api, aids)
    results = []
    for aid in aids:
        source = os.path.join(root, "source", aid, aid + ".ipynb")
        for version, must_pass in (("source", True), ("release", False)):
            r = grade(os.path.join(root, version, aid, aid + ".ipynb"), aid, source=source,
                      timeout=timeout, cpu_s=cpu_s, isolate=isolate)
            problems = [f"{gid} fails: {s['error']}" if must_pass else
                        f"{gid} passes without the solution"
                        for gid, s in r.scores.items() if (s["score"] == s["max_score"]) != must_pass]
            if r.error:
                problems.insert(0, r.error)
            results.append(Validation(aid, version, problems))
    return results


def autograde(submissions: str, *, db: str | None = None, root: str | None = None,
              notebooks: str | None = None, timeout: float = TIMEOUT_S, cpu_s: float = CPU_S,
              jobs: int = 1, isolate: bool = True, on_graded=None) -> list[Graded]:
    """Grade every submission in ``submissions/<student>/<assignment>/<assignment>.ipynb``,
    ``jobs`` at a time, each on its own (:func:`dtlab.course.grade.grade`, in a process of its
    own), then record them in the gradebook (:func:`merge`; ``db``: SQLAlchemy URL, default
    SQLite in the course root). ``on_graded(result)`` is called as each one is graded. A layout
    problem raises :class:`CourseError` before anything runs.

    >>> from dtlab import course
    >>> [(g.student, g.score) for g in course.autograde("inbox", jobs=2)]      # doctest: +SKIP
    [('alice', 8.0), ('bob', 3.0)]
    """
    timeout, cpu_s = check_limit(timeout, "--timeout"), check_limit(cpu_s, "--cpu-limit")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= 256:
        raise CourseError(f"--jobs must be a whole number from 1 to 256, got {jobs!r}")
    if isolate:
        from ..runtime.sandbox import unavailable

        if why := unavailable():
            raise CourseError(f"no sandbox: {why}; grade on a machine that has one, or pass "
                              f"--unsafe-no-sandbox to grade without isolation (every report "
                              f"line will say so)")
    root = course_root(root)
    if db:  # a gradebook that cannot be written is refused now, not after the grading (the
        _config(root, db)  # default one's folder is the course root, which sync makes)
    known = sync(root, notebooks)
    submissions = os.path.abspath(submissions)
    pairs = scan_submissions(submissions, known)
    collect(submissions, root, pairs)
    out = results_dir(root)
    failed = grade_all(root, pairs, out, jobs=jobs, timeout=timeout, cpu_s=cpu_s,
                       isolate=isolate, on_graded=on_graded)
    graded = merge(root, pairs, db=db)
    for g in graded:
        if (g.student, g.assignment) in failed:
            g.ok, g.error = False, failed[(g.student, g.assignment)]
    return graded


def grade_all(root: str, pairs: list[tuple[str, str]], out: str, *, jobs: int = 1,
              timeout: float = TIMEOUT_S, cpu_s: float = CPU_S, isolate: bool = True,
              on_graded=None) -> dict[tuple[str, str], str]:
    """``dtlab course grade`` for each (student, assignment) of the course root's submitted/,
    ``jobs`` processes at a time; results in ``out/<student>/<assignment>/``. Returns the
    submissions that could not be graded at all, with why."""
    import secrets
    import subprocess
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from .graded import CACHE_ENV, SEED_ENV

    # one session: hidden inputs drawn once (the seed), made once and shared (the cache); a
    # session already set in the environment (a harness grading several runs as one) is kept
    seed = os.environ.get(SEED_ENV) or secrets.token_hex(8)
    owned = not os.environ.get(CACHE_ENV)
    session = {SEED_ENV: seed, CACHE_ENV: os.environ.get(CACHE_ENV) or
               os.path.join(out, f".session-{seed}")}

    def one(pair):
        student, aid = pair
        dest = os.path.join(out, student, aid)
        shutil.rmtree(dest, ignore_errors=True)
        argv = [sys.executable, "-m", "dtlab", "course", "grade",
                os.path.join(root, "submitted", student, aid, aid + ".ipynb"),
                "--assignment", aid, "--student", student, "--out", dest,
                "--source", os.path.join(root, "source", aid, aid + ".ipynb"),
                "--timeout", repr(timeout), "--cpu-limit", repr(cpu_s)]
        if not isolate:
            argv.append("--unsafe-no-sandbox")
        p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **session})
        path = os.path.join(dest, "result.json")
        if p.returncode != 0 or not os.path.isfile(path):
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            return pair, None, f"dtlab course grade failed (exit {p.returncode}): {tail[0]}"
        return pair, Result.load(path), ""

    failed = {}
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for done in as_completed([pool.submit(one, pair) for pair in pairs]):
                pair, result, why = done.result()
                if why:
                    failed[pair] = why
                if on_graded is not None:
                    on_graded(pair, result, why)
    finally:
        if owned:
            shutil.rmtree(session[CACHE_ENV], ignore_errors=True)
    return failed


def merge(root: str, pairs: list[tuple[str, str]] | None = None, *, db: str | None = None,
          results: str | None = None) -> list[Graded]:
    """Record graded submissions in the gradebook: nbgrader's autograde of each submission in
    the course root's submitted/, with the test outputs ``dtlab course grade`` left in
    ``results`` (default <root>/graded) instead of executing anything. ``pairs``: (student,
    assignment) to record; default every one with a result."""
    root = course_root(root)
    sync(root)
    results = os.path.abspath(results or results_dir(root))
    if pairs is None:
        pairs = sorted((s, a) for s in _dirs(results) for a in _dirs(os.path.join(results, s))
                       if os.path.isfile(os.path.join(results, s, a, "result.json")))
    if not pairs:
        raise CourseError(f"no graded results in {results}: run dtlab course grade (or "
                          f"autograde) first")
    missing = [f"{s}/{a}" for s, a in pairs
               if not os.path.isfile(os.path.join(root, "submitted", s, a, a + ".ipynb"))]
    if missing:
        raise CourseError(f"no submission in {root}/submitted for {', '.join(missing[:5])}: "
                          f"merge the results where the submissions were collected")
    graded = []
    with _nbgrader(root, db, results) as api:
        _generate(api, sorted({aid for _, aid in pairs}))
        for student, aid in pairs:
            r = _result(results, student, aid)
            out = api.autograde(aid, student, force=True, create=True)
            ok = bool(out.get("success"))
            graded.append(Graded(student, aid, ok, log=out.get("log") or "",
                                 error="" if ok else _reason(out),
                                 sandbox=r.sandbox if r else "", wall_s=r.wall_s if r else 0.0,
                                 cpu_s=r.cpu_s if r else 0.0))
        with contextlib.closing(api.gradebook) as gb:
            for g in graded:
                if g.ok:
                    sub = gb.find_submission(g.assignment, g.student)
                    g.score, g.max_score = sub.score, sub.max_score
    return graded


def _dirs(path: str) -> list[str]:
    try:
        return sorted(d for d in os.listdir(path)
                      if os.path.isdir(os.path.join(path, d)) and not d.startswith("."))
    except OSError:
        return []


def _result(results: str, student: str, aid: str) -> Result | None:
    try:
        return Result.load(os.path.join(results, student, aid, "result.json"))
    except (OSError, ValueError, TypeError):
        return None


def _reason(result: dict) -> str:
    """The exception behind a failed nbgrader step, from its log (nbgrader's own error only
    says "see the above traceback")."""
    lines = [ln.strip() for ln in (result.get("log") or "").splitlines()]
    raised = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*:", ln)
              and "NbGraderException" not in ln]
    tail = (result.get("error") or "").strip().splitlines()
    return raised[-1] if raised else (tail[-1] if tail else "no error recorded; see Graded.log")


def feedback(assignments: list[str] | None = None, *, db: str | None = None,
             root: str | None = None, notebooks: str | None = None) -> list[str]:
    """HTML feedback for every autograded submission; returns the files
    (course root's feedback/<student>/<assignment>/<assignment>.html).

    >>> from dtlab import course
    >>> course.feedback()                       # doctest: +SKIP
    ['.../build/course/feedback/alice/00_launch/00_launch.html', ...]
    """
    root = course_root(root)
    aids = select(assignments, sync(root, notebooks))
    done = [a for a in aids if glob.glob(os.path.join(root, "autograded", "*", a))]
    if not done:
        raise CourseError(f"nothing autograded yet in {root}/autograded for "
                          f"{', '.join(aids)}: run `dtlab course autograde SUBMISSIONS` first.")
    with _nbgrader(root, db) as api:
        for aid in done:
            _check(api.generate_feedback(aid, force=True), f"generating feedback for {aid}")
    return sorted(p for a in done for p in glob.glob(os.path.join(root, "feedback", "*", a, "*.html")))


SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file


def check_gradebook(db: str) -> None:
    """A gradebook :func:`report` can read, else CourseError in one line naming ``db`` (--db):
    a URL SQLAlchemy has no driver for, or an SQLite file that is not there, not a regular
    readable file (dtlab.paths) or not an SQLite database -- nbgrader would make a new gradebook
    in its place, and a report only reads."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from ..paths import check_readable, shown

    example = "e.g. sqlite:////abs/path/gradebook.db or postgresql://host/db"
    try:
        url = make_url(db)
        url.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise CourseError(f"--db {db!r}: not a database URL SQLAlchemy can open ({why}): give "
                          f"one, {example}.") from None
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path, hint = url.database, "run `dtlab course autograde SUBMISSIONS` first (or pass --db URL)"
    if not os.path.lexists(path):
        raise CourseError(f"no gradebook at {shown(path)}: {hint}.")
    try:
        check_readable(path, hint, limit=1 << 62)
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except (OSError, ValueError) as e:
        raise CourseError(f"gradebook {e}") from None
    if head != SQLITE_MAGIC:
        what = "empty" if not head else "not an SQLite database"
        raise CourseError(f"gradebook {shown(path)}: {what}, not a gradebook: {hint}.")


def report(*, db: str | None = None, root: str | None = None, csv: str | None = None):
    """Scores from the gradebook as a pandas DataFrame: one row per student and assignment,
    columns ``student, assignment, score, max_score, needs_manual_grade`` and then one per
    graded test cell (its grade_id, e.g. ``gather_pids_tests``; NaN where nbgrader never scored
    it, e.g. a submission it could not read); written to ``csv`` as well when given.

    >>> from dtlab import course
    >>> course.report()[["student", "score", "max_score"]]      # doctest: +SKIP
      student  score  max_score
    0   alice    8.0        8.0
    """
    import pandas as pd

    root = course_root(root)
    db = db or default_db_url(root)
    check_gradebook(db)
    rows, exercises = [], []
    with _nbgrader(root, db) as api, contextlib.closing(api.gradebook) as gb:
        for assignment in gb.assignments:
            if not assignment.submissions:
                continue  # released, never graded: no columns for it
            for nb in assignment.notebooks:
                exercises += [c.name for c in nb.grade_cells if c.name not in exercises]
            for sub in assignment.submissions:
                row = {"student": sub.student.id, "assignment": assignment.name,
                       "score": sub.score, "max_score": sub.max_score,
                       "needs_manual_grade": sub.needs_manual_grade}
                for nb in sub.notebooks:
                    # never scored (nbgrader could not run the notebook) is NaN, not a zero
                    row.update({g.name: g.score if (g.auto_score, g.manual_score) != (None, None)
                                else None for g in nb.grades})
                rows.append(row)
    df = pd.DataFrame(rows, columns=["student", "assignment", "score", "max_score",
                                     "needs_manual_grade", *exercises])
    df[exercises] = df[exercises].astype(float)  # None -> NaN
    df = df.sort_values(["assignment", "student"], ignore_index=True)
    if csv:
        df.to_csv(csv, index=False)
    return df
