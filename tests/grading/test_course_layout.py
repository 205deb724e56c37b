"""The course root and bad input: each mistake is one clear error, before anything runs."""

import os

import nbformat
import pytest

from dtlab import cli
from dtlab.course import CourseError, layout


def _notebook(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), path)


def test_assignments_are_the_notebook_stems():
    ids = layout.assignment_ids()
    assert ids[0] == "00_launch"
    assert ids == sorted(ids)


def test_sync_builds_the_course_root_from_notebooks(tmp_path):
    root = tmp_path / "course"
    ids = layout.sync(str(root))
    assert ids == layout.assignment_ids()
    src = root / "source" / "00_launch" / "00_launch.ipynb"
    assert src.read_bytes() == open(os.path.join(layout.REPO, "notebooks", "00_launch.ipynb"), "rb").read()
    shim = (root / "nbgrader_config.py").read_text()
    assert 'load_subconfig("nbgrader_config.py"' in shim and repr(str(root)) in shim
    src.write_text("stale")  # an edited copy is refreshed from notebooks/
    layout.sync(str(root))
    assert src.read_text() != "stale"


def test_no_notebooks_is_a_clear_error(tmp_path):
    with pytest.raises(CourseError, match="no notebooks in"):
        layout.assignment_ids(str(tmp_path))


def test_unknown_assignment_names_the_known_ones():
    with pytest.raises(CourseError, match=r"unknown assignment '99_nope'.*00_launch"):
        layout.select(["99_nope"], layout.assignment_ids())


def test_missing_submissions_folder(tmp_path):
    with pytest.raises(CourseError, match=r"does not exist.*<student>/<assignment>/<assignment>.ipynb"):
        layout.scan_submissions(str(tmp_path / "inbox"), ["00_launch"])


def test_every_layout_problem_is_listed_at_once(tmp_path):
    inbox = tmp_path / "inbox"
    _notebook(str(inbox / "ada" / "00_launch" / "00_launch.ipynb"))           # fine
    _notebook(str(inbox / "00_launch" / "bob" / "00_launch.ipynb"))           # swapped levels
    _notebook(str(inbox / "cleo" / "00_launch.ipynb"))                        # one level short
    _notebook(str(inbox / "dan" / "01_nope" / "01_nope.ipynb"))               # unknown assignment
    _notebook(str(inbox / "eve" / "00_launch" / "my copy.ipynb"))             # renamed notebook
    with pytest.raises(CourseError) as err:
        layout.scan_submissions(str(inbox), ["00_launch"])
    msg = str(err.value)
    assert "not <assignment>/<student>/" in msg
    assert "cleo/00_launch.ipynb: a file directly in the student folder" in msg
    assert "unknown assignment '01_nope'; this course has 00_launch" in msg
    assert "expected 00_launch.ipynb, found my copy.ipynb" in msg
    assert "ada/00_launch" not in msg


def test_good_layout_lists_pairs(tmp_path):
    inbox = tmp_path / "inbox"
    for s in ("bob", "ada"):
        _notebook(str(inbox / s / "00_launch" / "00_launch.ipynb"))
    assert layout.scan_submissions(str(inbox), ["00_launch"]) == [("ada", "00_launch"),
                                                                  ("bob", "00_launch")]


def test_collect_copies_into_submitted(tmp_path):
    inbox, root = tmp_path / "inbox", tmp_path / "course"
    _notebook(str(inbox / "ada" / "00_launch" / "00_launch.ipynb"))
    (inbox / "ada" / "00_launch" / "timestamp.txt").write_text("2026-11-26 10:00:00 UTC")
    stale = root / "submitted" / "ada" / "00_launch" / "old.ipynb"
    _notebook(str(stale))
    layout.collect(str(inbox), str(root), [("ada", "00_launch")])
    got = sorted(os.listdir(root / "submitted" / "ada" / "00_launch"))
    assert got == ["00_launch.ipynb", "timestamp.txt"]


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    rc = cli.main(["course", "autograde", str(tmp_path / "missing"), "--root", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("dtlab course autograde: submissions folder") and "does not exist" in err
    rc = cli.main(["course", "validate", "99_nope", "--root", str(tmp_path / "c")])
    assert rc == 2 and "unknown assignment '99_nope'" in capsys.readouterr().err
    rc = cli.main(["course", "report", "--root", str(tmp_path / "c")])
    assert rc == 2 and "no gradebook at" in capsys.readouterr().err


def test_gradebook_folder_must_exist(tmp_path, capsys):
    inbox = tmp_path / "inbox"
    _notebook(str(inbox / "ada" / "00_launch" / "00_launch.ipynb"))
    rc = cli.main(["course", "autograde", str(inbox), "--root", str(tmp_path / "c"),
                   "--db", f"sqlite:///{tmp_path}/no/such/dir/g.db"])
    assert rc == 2 and "the gradebook's folder" in capsys.readouterr().err


def test_cli_without_a_step_is_refused_in_one_line_naming_the_steps(capsys):
    assert cli.main(["course"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "release" in err and "report" in err, err


def test_the_student_lab_links_the_files_the_notebooks_cite(tmp_path):
    from dtlab.course.lab import COURSE_FILES, link_course_files
    from dtlab.course.layout import REPO

    (tmp_path / "README.md").write_text("the learner's own")
    made = link_course_files(str(tmp_path))
    assert "README.md" not in made and (tmp_path / "README.md").read_text() == "the learner's own"
    assert set(made) == set(COURSE_FILES) - {"README.md"}
    assert (tmp_path / "data" / "h200x2-first-call" / "README.md").exists()
    assert os.path.realpath(tmp_path / "dtlab") == os.path.join(REPO, "dtlab")
    assert link_course_files(str(tmp_path)) == []  # once is enough
