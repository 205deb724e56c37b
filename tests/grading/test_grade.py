"""Grading one submission, self-contained (dtlab.course.grade): test cells restored from the
source and run in a kernel of the grader's, the learner's code in sandboxes, nbgrader's scoring
rule, limits that say what they mean, and the command line's one-line errors."""

import json
import os

import nbformat
import pytest

from dtlab import cli
from dtlab.course import grade as grade_mod
from dtlab.course.grade import Try, grade, restore, try_answers
from dtlab.course.layout import CourseError
from dtlab.runtime import sandbox

pytestmark = pytest.mark.sandbox

ANSWER = "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION"
CELLS = [
    ("import math", {"locked": True}),
    (ANSWER, {"solution": True, "grade_id": "answer"}),
    ("from dtlab import course\nmine = course.answer('answer')\nassert mine() == 42\n"
     "### BEGIN HIDDEN TESTS\nassert mine() + 1 == 43\n### END HIDDEN TESTS",
     {"grade": True, "points": 2, "grade_id": "answer_tests"}),
    ("import sys\nprint('a warning of the library the test uses', file=sys.stderr)",
     {"grade": True, "points": 1, "grade_id": "warns_tests"}),
]


def notebook(cells=CELLS):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, (src, meta) in enumerate(cells):
        m = {"grade": False, "solution": False, "locked": False, "task": False,
             "grade_id": f"c{i}", "schema_version": 3, **meta}
        if m["grade"]:
            m["locked"] = True
        nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"nbgrader": m}))
    return nb


@pytest.fixture
def course(tmp_path):
    src = tmp_path / "99_tiny.ipynb"
    nbformat.write(notebook(), str(src))
    return tmp_path, str(src)


def submit(tmp_path, nb, name="sub.ipynb"):
    path = tmp_path / name
    nbformat.write(nb, str(path))
    return str(path)


def cell(nb, gid):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


def _scratch():
    """What a grading may leave in the temp dir: none, since the grader kills its kernel (so no
    atexit there) -- the answers' inputs and the unsandboxed homes live in the grader's folder."""
    import glob
    import tempfile

    return {p for pattern in ("dtlab-inputs-*", "dtlab-unsandboxed-home-*")
            for p in glob.glob(os.path.join(tempfile.gettempdir(), pattern))}


@pytest.mark.slow
def test_the_solution_scores_full_and_the_results_are_written(course, no_orphans):
    tmp, src = course
    before = _scratch()
    r = grade(src, "99_tiny", source=src, out=str(tmp / "out"), student="alice")
    assert _scratch() == before
    assert (r.score, r.max_score) == (3.0, 3.0), r.scores
    assert r.sandbox.startswith("bwrap sandbox, cgroup")  # and what isolated it
    saved = json.load(open(tmp / "out" / "result.json"))
    assert saved["student"] == "alice" and saved["scores"]["answer_tests"]["score"] == 2.0
    graded = nbformat.read(str(tmp / "out" / "99_tiny.ipynb"), as_version=4)
    warns = cell(graded, "warns_tests").outputs
    assert warns and all(o.get("name") == "stdout" for o in warns)  # the grader's stderr, not theirs


def test_tampering_is_undone_and_a_wrong_answer_scores_zero(course, no_orphans):
    tmp, src = course
    nb = notebook()
    cell(nb, "answer").source = "def answer():\n    return 41\n"
    cell(nb, "answer_tests").source = "print('all tests pass')"          # edited: restored
    nb.cells.remove(cell(nb, "warns_tests"))                              # deleted: put back
    fake = nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "points": 100, "grade_id": "fake_tests",
        "schema_version": 3}})
    nb.cells.append(fake)                                                 # posing: not graded
    r = grade(submit(tmp, nb), "99_tiny", source=src)
    assert r.scores["answer_tests"]["score"] == 0.0
    assert "AssertionError" in r.scores["answer_tests"]["error"]
    assert r.scores["warns_tests"]["score"] == 1.0
    assert set(r.scores) == {"answer_tests", "warns_tests"} and r.max_score == 3.0


def test_metadata_that_is_not_what_nbgrader_writes_does_not_stop_grading(course, no_orphans):
    tmp, src = course
    nb = notebook()
    nb.cells.insert(0, nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": {"a": 1}}}))
    nb.cells.insert(0, nbformat.v4.new_code_cell("y = 1", metadata={"nbgrader": "nonsense"}))
    assert grade(submit(tmp, nb), "99_tiny", source=src).score == 3.0


def test_an_unreadable_notebook_scores_zero_with_the_reason(course, no_orphans):
    tmp, src = course
    path = tmp / "broken.ipynb"
    path.write_text('{"cells": [')
    r = grade(str(path), "99_tiny", source=src)
    assert r.score == 0 and "not a readable notebook" in r.error
    assert all(s["score"] == 0 for s in r.scores.values())


def test_restore_keeps_the_learners_own_cells():
    src = notebook()
    sub = notebook()
    sub.cells.insert(2, nbformat.v4.new_markdown_cell("my notes"))
    out = restore(sub, src)
    assert [c.source for c in out.cells][2] == "my notes"
    assert cell(out, "answer_tests").source == cell(src, "answer_tests").source


@pytest.mark.slow
def test_a_cell_past_the_timeout_is_stopped_and_grading_goes_on(tmp_path, no_orphans):
    cells = [("import time\ntime.sleep(60)", {"grade": True, "points": 1, "grade_id": "stuck_tests"}),
             ("assert 1 + 1 == 2", {"grade": True, "points": 1, "grade_id": "fine_tests"})]
    src = submit(tmp_path, notebook(cells), "98_stuck.ipynb")
    r = grade(src, "98_stuck", source=src, timeout=3)
    assert r.scores["stuck_tests"]["score"] == 0 and "CellTimeoutError" in r.scores["stuck_tests"]["error"]
    assert r.scores["fine_tests"]["score"] == 1.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "soon"])
def test_limits_that_mean_nothing_are_refused(bad, course):
    tmp, src = course
    with pytest.raises(CourseError, match="positive number of seconds"):
        grade(src, "99_tiny", source=src, timeout=bad)
    with pytest.raises(CourseError, match="positive number of seconds"):
        grade(src, "99_tiny", source=src, cpu_s=bad)


@pytest.mark.parametrize("argv", [["--timeout", "0"], ["--timeout", "nan"], ["--timeout", "inf"],
                                  ["--timeout", "-1"], ["--cpu-limit", "0"], ["--cpu-limit", "x"]])
def test_cli_refuses_a_meaningless_limit_in_one_line(argv, course, capsys):
    tmp, src = course
    assert cli.main(["course", "grade", src, "--assignment", "99_tiny", "--out", str(tmp / "o"),
                     *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err  # one line, no usage block
    assert err.startswith(f"dtlab course grade: argument {argv[0]}: ") and \
        "positive number of seconds" in err, err
    assert not (tmp / "o").exists()  # nothing graded


def test_cli_refuses_jobs_out_of_range(capsys):
    assert cli.main(["course", "autograde", "inbox", "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtlab course autograde: ") and "from 1 to 256" in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_without_a_sandbox_grading_refuses_unless_told_unsafe(course, monkeypatch, capsys, no_orphans):
    tmp, src = course
    monkeypatch.setattr(sandbox, "_PROBE", {"reason": "bubblewrap is not installed"})
    with pytest.raises(CourseError, match="bubblewrap is not installed.*--unsafe-no-sandbox"):
        grade(src, "99_tiny", source=src)
    assert cli.main(["course", "grade", src, "--assignment", "99_tiny", "--source", src,
                     "--out", str(tmp / "o")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    before = _scratch()
    r = grade(src, "99_tiny", source=src, isolate=False)
    assert r.score == 3.0 and r.unsafe and r.sandbox.startswith("UNSAFE")
    assert _scratch() == before
    assert cli.main(["course", "grade", src, "--assignment", "99_tiny", "--source", src,
                     "--out", str(tmp / "o"), "--unsafe-no-sandbox"]) == 0
    assert "[UNSAFE: graded without a sandbox]" in capsys.readouterr().out


def test_try_answers_runs_each_against_one_test_cell(course, no_orphans):
    tmp, src = course
    both = ("visible", "hidden")
    got = try_answers("99_tiny", [Try("answer", "right", "def answer():\n    return 42\n", both),
                                  Try("answer", "off by one", "def answer():\n    return 43\n", both)],
                      source=src)
    for version in both:
        assert got[("answer", "right")][version] == ""
        assert got[("answer", "off by one")][version].startswith("AssertionError")
    with pytest.raises(CourseError, match="no cell 'nope'"):
        try_answers("99_tiny", [Try("nope", "x", "")], source=src)


def test_visible_is_what_the_learners_copy_has():
    assert grade_mod.visible(CELLS[2][0]) == (
        "from dtlab import course\nmine = course.answer('answer')\nassert mine() == 42")


@pytest.mark.slow
def test_validate_names_a_test_that_fails_the_solution_and_one_that_passes_without(tmp_path, no_orphans):
    """validate grades the source (every test must pass) and the release (none may)."""
    from dtlab import course

    cells = [(ANSWER, {"solution": True, "grade_id": "answer"}),
             ("from dtlab import course\nassert course.answer('answer')() == 42",
              {"grade": True, "points": 1, "grade_id": "good_tests"}),
             ("assert True  # passes whatever the student does",
              {"grade": True, "points": 1, "grade_id": "lax_tests"}),
             ("from dtlab import course\nassert course.answer('answer')() == 41  # a wrong key",
              {"grade": True, "points": 1, "grade_id": "wrong_key_tests"})]
    (tmp_path / "nbs").mkdir()
    nbformat.write(notebook(cells), str(tmp_path / "nbs" / "97_tiny.ipynb"))
    source, release = course.validate(root=str(tmp_path / "c"), notebooks=str(tmp_path / "nbs"))
    assert (source.version, release.version) == ("source", "release")
    assert len(source.problems) == 1 and source.problems[0].startswith("wrong_key_tests fails")
    assert release.problems == ["lax_tests passes without the solution"]
