"""The whole term on the pilot assignment, 00_launch: release, validate, autograde, feedback, report.

Four synthetic students and a corrupt upload (tests/grading/synthetic_submissions.py) go through one
`dtlab course autograde` call, started in the background when the module begins so its
~2-3 minutes (two cell timeouts among them) overlap with release and validate in the
foreground. Release/validate and autograde use separate course roots, so nothing is shared
but notebooks/.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import nbformat
import pandas as pd
import psutil
import pytest

from conftest import assert_no_descendants
from dtlab import cli, course
from synthetic_submissions import ASSIGNMENT, CORRUPT, EXPECTED, POINTS, solutions, write_submissions

pytestmark = pytest.mark.slow
# The grader's limit per cell, here: 20 s instead of grading/nbgrader_config.py's 30 (ava's two
# stuck cells cost 2 x this). The slowest cell of a correct 00_launch takes 5-7 s on 2 cores.
CELL_TIMEOUT = 20
PR_SET_CHILD_SUBREAPER = 36


def _subreaper(on: bool) -> None:
    # Ranks orphaned by a dead kernel would be re-parented to init and escape the descendant
    # checks; as a subreaper this test process inherits them instead.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _live_descendants():
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_nothing_left_beside(proc, timeout=5.0):
    """No descendant of this process is left, except the background grader and its own."""
    deadline = time.monotonic() + timeout
    while True:
        mine = _live_descendants()
        try:
            grader = {proc.pid} | {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            grader = {proc.pid}
        left = [p for p in mine if p.pid not in grader]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError("left behind: " + ", ".join(f"{p.pid} {p.name()}" for p in left))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    base = tmp_path_factory.mktemp("term")
    t = SimpleNamespace(base=base, root=str(base / "course"), grading_root=str(base / "grading"),
                        db="sqlite:///" + str(base / "grades.db"), handout=str(base / "handout"))
    t.released = course.release(out=t.handout, assignments=[ASSIGNMENT], root=t.root)
    write_submissions(str(base / "inbox"),
                      release_path=os.path.join(t.root, "release", ASSIGNMENT, ASSIGNMENT + ".ipynb"),
                      source_path=os.path.join(t.root, "source", ASSIGNMENT, ASSIGNMENT + ".ipynb"))
    _subreaper(True)
    t.log = open(base / "autograde.log", "w+")
    t.started = time.monotonic()
    t.proc = subprocess.Popen(
        [sys.executable, "-m", "dtlab", "course", "autograde", str(base / "inbox"),
         "--root", t.grading_root, "--db", t.db, "--timeout", str(CELL_TIMEOUT)],
        stdout=t.log, stderr=subprocess.STDOUT, start_new_session=True)
    yield t
    if t.proc.poll() is None:
        os.killpg(t.proc.pid, signal.SIGKILL)
        t.proc.wait()
    t.log.close()
    _subreaper(False)


def graded(t, limit=420):
    """Wait for the background autograde; its output."""
    try:
        t.proc.wait(timeout=max(1, limit - (time.monotonic() - t.started)))
    except subprocess.TimeoutExpired:
        os.killpg(t.proc.pid, signal.SIGKILL)
        t.proc.wait()
        raise AssertionError(f"autograde took over {limit} s")
    t.log.seek(0)
    return t.log.read()


def test_release_strips_solutions_and_hidden_tests(term):
    assert [(r.assignment, r.status) for r in term.released] == [(ASSIGNMENT, "new")]
    path = os.path.join(term.handout, ASSIGNMENT + ".ipynb")
    text = open(path).read()
    for leaked in ("BEGIN SOLUTION", "HIDDEN TESTS", "dist.all_gather(everyone, mine)",
                   "lost_partner", "nan_loss", "predict(64)"):
        assert leaked not in text, f"{leaked!r} is in the student version"
    nb = nbformat.read(path, as_version=4)
    meta = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}
    for gid in ("gather_pids", "predict", "root_cause"):
        assert meta[gid].source.rstrip().endswith("raise NotImplementedError()")
    for gid, points in POINTS.items():
        cell = meta[gid]
        assert cell.metadata.nbgrader["points"] == points and cell.metadata.editable is False
        assert "course.run_graded(" in cell.source  # the visible tests stay
    # students can import dtlab from the folder they work in
    done = subprocess.run([sys.executable, "-c", "import dtlab, dtlab.course; print(dtlab.run)"],
                          cwd=term.handout, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_release_never_overwrites_a_learners_notebook(term):
    path = os.path.join(term.handout, ASSIGNMENT + ".ipynb")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("my notes"))
    nbformat.write(nb, path)
    again = course.release(out=term.handout, assignments=[ASSIGNMENT], root=term.root)
    assert [r.status for r in again] == ["kept"]
    assert "my notes" in open(path).read()
    forced = course.release(out=term.handout, assignments=[ASSIGNMENT], root=term.root,
                            force=True)
    assert [r.status for r in forced] == ["replaced"] and "my notes" not in open(path).read()


@pytest.mark.timeout(400)
def test_validate_source_passes_and_release_fails(term):
    results = course.validate([ASSIGNMENT], root=term.root)
    assert [(v.version, v.problems) for v in results] == [("source", []), ("release", [])]
    assert_nothing_left_beside(term.proc)


def test_validate_reports_a_broken_assignment(term, tmp_path):
    """A test that passes without the solution, and one the solution fails: both named."""
    cells = [
        ("def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
         {"solution": True, "grade": False}),
        ("assert answer() == 42", {"grade": True, "points": 1}),
        ("assert True  # passes whatever the student does", {"grade": True, "points": 1}),
        ("assert answer() == 41  # a wrong answer key", {"grade": True, "points": 1}),
    ]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, (src, meta) in enumerate(cells):
        m = {"grade": False, "solution": False, "locked": not meta.get("solution"), "task": False,
             "grade_id": f"c{i}", "schema_version": 3, **meta}
        nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"nbgrader": m}))
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, str(tmp_path / "nbs" / "99_tiny.ipynb"))
    source, release = course.validate(root=str(tmp_path / "c"), notebooks=str(tmp_path / "nbs"))
    assert not source.ok and len(source.problems) == 1 and "answer() == 41" in source.problems[0]
    assert not release.ok and len(release.problems) == 1
    assert "passes without the solution" in release.problems[0] and "assert True" in release.problems[0]
    assert_nothing_left_beside(term.proc)


@pytest.mark.timeout(480)
def test_autograde_scores_every_student(term):
    out = graded(term)
    for student, cells in EXPECTED.items():
        assert f"graded   {student}/{ASSIGNMENT}: {sum(cells.values()):g} / 8" in out, out
    # the broken upload is named with its reason, the others are graded regardless, exit 1
    assert (f"FAILED   {CORRUPT}/{ASSIGNMENT}: nbgrader could not grade it: "
            f"nbformat.reader.NotJSONError") in out, out
    assert term.proc.returncode == 1, out
    # the one submission that peeks at interpreter frames is flagged, and only that one
    assert [ln for ln in out.splitlines() if ln.startswith("review")] == [
        f"review   cleo/{ASSIGNMENT}: cell root_cause line {root_cause_lines(term) + 4}: reads "
        "interpreter frames (_getframe)",
        f"review   cleo/{ASSIGNMENT}: cell root_cause line {root_cause_lines(term) + 4}: reads "
        "interpreter frames (f_locals)"], out
    assert_no_descendants()  # every kernel and rank of every student is gone


def root_cause_lines(term) -> int:
    """Lines of the source's root_cause solution, as a student hands it in."""
    return len(solutions(os.path.join(term.root, "source", ASSIGNMENT,
                                      ASSIGNMENT + ".ipynb"))["root_cause"].splitlines())


def test_gradebook_has_every_exercise(term):
    graded(term)
    df = course.report(root=term.grading_root, db=term.db)
    assert list(df.columns[:5]) == ["student", "assignment", "score", "max_score", "needs_manual_grade"]
    got = {row.student: {g: getattr(row, g) for g in POINTS} for row in df.itertuples()
           if row.student != CORRUPT}
    assert got == EXPECTED  # ava's crash cost the students graded after her nothing
    assert (df.max_score == 8).all()
    assert df.set_index("student").needs_manual_grade.to_dict() == {
        **dict.fromkeys(EXPECTED, False), CORRUPT: True}  # the unreadable one waits for a human
    assert df[df.student == CORRUPT][list(POINTS)].isna().all(axis=None)  # not scored, not 0


def test_stuck_and_crashed_cells_are_graded_as_failed(term):
    graded(term)

    def cells(student):
        path = os.path.join(term.grading_root, "autograded", student, ASSIGNMENT, ASSIGNMENT + ".ipynb")
        nb = nbformat.read(path, as_version=4)
        return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}

    def enames(cell):
        return [o.ename for o in cell.outputs if o.output_type == "error"]

    ava = cells("ava")
    assert enames(ava["gather_pids"])[-1] == "CellTimeoutError"  # the distributed hang
    assert enames(ava["predict"])[-1] == "CellTimeoutError"  # the endless loop
    assert f"more than {CELL_TIMEOUT} s" in ava["predict"].outputs[-1].evalue  # --timeout applies
    assert enames(ava["gather_pids_tests"]) == []  # ranks stopped; the next launch works
    assert enames(ava["predict_tests"]) == ["NameError"]  # ran after the loop: grading went on
    assert enames(ava["root_cause"]) == ["DeadKernelError"]  # os._exit
    assert enames(ava["root_cause_tests"]) == ["NotRun"]
    assert all(enames(ava[c]) == ["NotRun"] for c in ("c14", "c15", "c17"))  # the narrative after it
    cleo, source = cells("cleo"), nbformat.read(
        os.path.join(term.grading_root, "source", ASSIGNMENT, ASSIGNMENT + ".ipynb"), as_version=4)
    key = {c.metadata.nbgrader["grade_id"]: c.source for c in source.cells if "nbgrader" in c.metadata}
    assert cleo["predict_tests"].source == key["predict_tests"]  # edited: restored, hidden tests too
    assert key["root_cause_tests"] in cleo["root_cause_tests"].source  # deleted: put back


def test_feedback_and_report_from_the_cli(term, tmp_path, capsys):
    graded(term)
    assert cli.main(["course", "feedback", "--root", term.grading_root, "--db", term.db]) == 0
    pages = capsys.readouterr().out.split()
    assert len(pages) == len(EXPECTED)
    page = {p.split(os.sep)[-3]: open(p).read() for p in pages}
    assert "Score: 8.0 / 8.0" in page["dora"] and "Score: 0.0 / 8.0" in page["eli"]
    assert "DeadKernelError" in page["ava"] and "CellTimeoutError" in page["ava"]  # told why
    csv = tmp_path / "grades.csv"
    assert cli.main(["course", "report", "--root", term.grading_root, "--db", term.db,
                     "--csv", str(csv)]) == 0
    table = capsys.readouterr().out
    assert "gather_pids_tests" in table and "cleo" in table
    df = pd.read_csv(csv)
    assert dict(zip(df.student, df.score)) == {**{s: sum(c.values()) for s, c in EXPECTED.items()},
                                               CORRUPT: 0}
    assert cli.main(["course", "report", "--root", term.grading_root, "--db", term.db, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["student"]: r["root_cause_tests"] for r in records} == {
        **{s: c["root_cause_tests"] for s, c in EXPECTED.items()}, CORRUPT: None}
