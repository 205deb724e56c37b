"""The instructor's operations, as Python, over nbgrader's ``NbGraderAPI`` (no subprocesses).

A term, end to end (the same as the ``dtlab course ...`` commands, see grading/README.md)::

    from dtlab import course
    course.release(out="handout")                 # student versions -> handout/00_launch.ipynb
    assert all(v.ok for v in course.validate())   # source passes every test; release fails them
    course.autograde("inbox")                     # inbox/<student>/<assignment>/<assignment>.ipynb
    course.feedback()                             # build/course/feedback/<student>/<assignment>/*.html
    course.report(csv="grades.csv")               # one row per student and assignment

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

from . import review
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
    ok: bool  # nbgrader finished the submission (a failing test still counts as ok)
    score: float | None = None
    max_score: float | None = None
    error: str = ""  # why nbgrader could not grade it (the exception), when not ok
    log: str = ""  # nbgrader's log of this submission
    # what the submission's code does that no answer needs (dtlab.course.review): for a person
    flags: list[str] = field(default_factory=list)


def _config(root: str, db: str | None = None, timeout: float | None = None):
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=GRADING_DIR).load_config()
    cfg.CourseDirectory.root = root
    cfg.CourseDirectory.db_url = db = db or default_db_url(root)
    folder = os.path.dirname(db[len("sqlite:///"):]) if db.startswith("sqlite:///") else ""
    if folder and not os.path.isdir(folder):
        # nbgrader would blame a gradebook schema upgrade; the folder is what is missing
        raise CourseError(f"the gradebook's folder {folder} does not exist (--db {db}): "
                          f"create it, or pass another --db.")
    if timeout is not None:
        cfg.Execute.timeout = int(timeout)
    return cfg


@contextlib.contextmanager
def _nbgrader(root: str, db: str | None = None, timeout: float | None = None):
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
        yield NbGraderAPI(config=_config(root, db, timeout))


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
             notebooks: str | None = None, timeout: float | None = None) -> list[Validation]:
    """nbgrader validate on the source (every test passes) and validate --invert on the
    release (no test passes without the solutions), per assignment.

    >>> from dtlab import course
    >>> [(v.assignment, v.version, v.ok) for v in course.validate(["00_launch"])]  # doctest: +SKIP
    [('00_launch', 'source', True), ('00_launch', 'release', True)]
    """
    from nbgrader.validator import Validator

    from .execute import validate_preprocessors

    root = course_root(root)
    aids = select(assignments, sync(root, notebooks))
    results = []
    with _nbgrader(root, timeout=timeout) as api:
        _generate(api, aids)
        cwd = os.getcwd()  # Validator chdirs into each notebook's folder
        try:
            for aid in aids:
                for version, invert in (("source", False), ("release", True)):
                    v = Validator(config=api.config, invert=invert)
                    v.preprocessors = validate_preprocessors()
                    found = v.validate(os.path.join(root, version, aid, aid + ".ipynb"))
                    results.append(Validation(aid, version, _problems(found)))
        finally:
            os.chdir(cwd)
    return results


def _problems(found: dict) -> list[str]:
    problems = [f"a cell changed type ({c['old_type']} -> {c['new_type']}):\n{c['source']}"
                for c in found.get("type_changed", [])]
    problems += [f"a locked cell changed:\n{c['source']}" for c in found.get("changed", [])]
    problems += [f"a test fails:\n{c['source']}\n--- error ---\n{c['raw_error']}"
                 for c in found.get("failed", [])]
    problems += [f"a test passes without the solution:\n{c['source']}" for c in found.get("passed", [])]
    return problems


def autograde(submissions: str, *, db: str | None = None, root: str | None = None,
              notebooks: str | None = None, timeout: float | None = None) -> list[Graded]:
    """Grade every submission in ``submissions/<student>/<assignment>/<assignment>.ipynb`` into
    the gradebook (``db``: SQLAlchemy URL, default SQLite in the course root).

    Test cells are restored from the source before running; each cell is bounded by the
    per-cell timeout (grading/nbgrader_config.py, or ``timeout=``); a crash fails the rest of
    that notebook only. A layout problem raises :class:`CourseError` before anything runs.
    Each :class:`Graded` carries the submission's review flags (:mod:`dtlab.course.review`).

    >>> from dtlab import course
    >>> [(g.student, g.score) for g in course.autograde("inbox")]      # doctest: +SKIP
    [('alice', 8.0), ('bob', 3.0)]
    """
    root = course_root(root)
    known = sync(root, notebooks)
    submissions = os.path.abspath(submissions)
    pairs = scan_submissions(submissions, known)
    collect(submissions, root, pairs)
    graded = []
    with _nbgrader(root, db, timeout) as api:
        _generate(api, sorted({aid for _, aid in pairs}))
        for student, aid in pairs:
            result = api.autograde(aid, student, force=True, create=True)
            ok = bool(result.get("success"))
            path = os.path.join(submissions, student, aid, aid + ".ipynb")
            graded.append(Graded(student, aid, ok, log=result.get("log") or "",
                                 error="" if ok else _reason(result),
                                 flags=review.notebook_flags(path)))
        with contextlib.closing(api.gradebook) as gb:
            for g in graded:
                if g.ok:
                    sub = gb.find_submission(g.assignment, g.student)
                    g.score, g.max_score = sub.score, sub.max_score
    return graded


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
    if db.startswith("sqlite:///") and not os.path.isfile(db[len("sqlite:///"):]):
        raise CourseError(f"no gradebook at {db[len('sqlite:///'):]}: run "
                          f"`dtlab course autograde SUBMISSIONS` first (or pass --db URL).")
    rows, exercises = [], []
    with _nbgrader(root, db) as api, contextlib.closing(api.gradebook) as gb:
        for assignment in gb.assignments:
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
