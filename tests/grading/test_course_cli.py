"""``dtlab course``'s bad input: one line on stderr naming what is wrong, exit status 2, and
nothing graded, released or written (no sandbox needed: nothing runs)."""

import os

import nbformat
import pytest

from dtlab import cli


def _one_line(capsys, start):
    out, err = capsys.readouterr()
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(start), err
    return err


def _notebook(path):
    nbformat.write(nbformat.v4.new_notebook(), str(path))
    return str(path)


def test_course_without_a_step_is_refused_in_one_line(capsys):
    assert cli.main(["course"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("dtlab course: "), (out, err)
    assert "{release,validate,autograde,grade,merge,feedback,report}" in err


def test_grade_refuses_an_assignment_without_a_source(tmp_path, capsys):
    sub = _notebook(tmp_path / "sub.ipynb")
    (tmp_path / "nb").mkdir()
    assert cli.main(["course", "grade", sub, "--assignment", "nosuch", "--notebooks",
                     str(tmp_path / "nb"), "--out", str(tmp_path / "o")]) == 2
    err = _one_line(capsys, "dtlab course grade: --assignment 'nosuch': no source notebook")
    assert "--source" in err
    assert not (tmp_path / "o").exists()


def test_grade_refuses_a_missing_source(tmp_path, capsys):
    sub = _notebook(tmp_path / "sub.ipynb")
    assert cli.main(["course", "grade", sub, "--assignment", "a", "--source",
                     str(tmp_path / "missing.ipynb"), "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, "dtlab course grade: --source ")
    assert not (tmp_path / "o").exists()


def test_grade_refuses_an_out_that_is_a_file_before_grading(tmp_path, capsys):
    sub = _notebook(tmp_path / "sub.ipynb")
    (tmp_path / "o").write_text("x")
    assert cli.main(["course", "grade", sub, "--assignment", "a", "--source", sub,
                     "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, "dtlab course grade: --out ")
    assert (tmp_path / "o").read_text() == "x"


def test_release_refuses_an_out_that_is_a_file(tmp_path, capsys):
    (tmp_path / "o").write_text("x")
    assert cli.main(["course", "release", "--root", str(tmp_path / "root"),
                     "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, "dtlab course release: --out ")
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_feedback_refuses_a_root_that_is_not_a_folder(kind, tmp_path, capsys):
    root = tmp_path / "root"
    if kind == "fifo":
        os.mkfifo(root)
    else:
        root.write_text("x")
    assert cli.main(["course", "feedback", "--root", str(root)]) == 2
    _one_line(capsys, "dtlab course feedback: --root ")
