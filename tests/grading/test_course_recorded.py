"""Recorded-data mode and the helpers graded cells call."""

import os

import pytest

from conftest import assert_no_descendants
from dtlab import course
from dtlab.course import CourseError
from dtlab.course.recorded import data_root

# a synthetic capture, written per test: data/ holds only real ones
README = """# Synthetic capture for tests

- date (UTC): 2026-01-02 03:04
- **machine**: testbox, 8 CPU cores
- GPUs (name, driver): 2x Example GPU, 123.45
- command: `none, it is synthetic`
"""


def _capture(root, readme=README):
    folder = root / "synthetic-capture" / "run1"
    folder.mkdir(parents=True)
    (root / "synthetic-capture" / "README.md").write_text(readme)
    (folder / "bw.txt").write_text("size busbw\n8 0.01\n")
    return root


def test_recorded_loads_and_says_so(tmp_path, capsys):
    root = _capture(tmp_path)
    obs = course.recorded("synthetic-capture/run1/bw.txt", root=str(root))
    out = capsys.readouterr().out
    assert obs.text == "size busbw\n8 0.01\n"
    assert (obs.machine, obs.gpus, obs.date) == ("testbox, 8 CPU cores", "2x Example GPU, 123.45",
                                                 "2026-01-02 03:04")
    assert out.startswith("RECORDED, not measured here: synthetic-capture/run1/bw.txt")
    assert "machine: testbox, 8 CPU cores | GPUs: 2x Example GPU, 123.45 | date: 2026-01-02 03:04" in out
    assert "synthetic-capture/README.md" in out
    course.recorded("synthetic-capture/run1/bw.txt", root=str(root), show=False)
    assert capsys.readouterr().out == ""


def test_recorded_refuses_data_without_provenance(tmp_path):
    root = _capture(tmp_path, readme="# no machine, no date\n")
    with pytest.raises(CourseError, match="does not say machine or date: add a line 'machine: ...'"):
        course.recorded("synthetic-capture/run1/bw.txt", root=str(root))
    os.remove(root / "synthetic-capture" / "README.md")
    with pytest.raises(CourseError, match="no README.md describes synthetic-capture/run1/bw.txt"):
        course.recorded("synthetic-capture/run1/bw.txt", root=str(root))


def test_recorded_bad_names(tmp_path):
    root = _capture(tmp_path)
    with pytest.raises(CourseError, match=r"no such file .*it holds: synthetic-capture"):
        course.recorded("nope.txt", root=str(root))
    with pytest.raises(CourseError, match="give a path inside"):
        course.recorded("../outside.txt", root=str(root))


def test_recorded_real_capture_in_data():
    name = "h200x2-nccl-logs/default/vm.1071.log"
    if not os.path.isfile(os.path.join(data_root(), name)):
        pytest.skip(f"data/{name} is not in this checkout")
    obs = course.recorded(name, show=False)
    assert "H200" in obs.gpus and obs.date.startswith("2026-")
    assert "NCCL INFO" in obs.text


def test_backend_is_gloo_under_the_grader(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not course.grading()
    assert course.backend(nprocs=10_000) == "gloo"  # more ranks than any machine has GPUs
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert course.grading() and course.backend(nprocs=1) == "gloo"


@pytest.mark.slow
def test_run_graded_is_quiet_and_bounded(no_orphans, capfd, monkeypatch):
    import dtlab

    monkeypatch.setenv("DTLAB_OUTPUT", "lines")

    def noisy():
        import sys

        print("to stdout")
        print("to stderr", file=sys.stderr)
        return os.getpid()

    res = course.run_graded(noisy, nprocs=2)
    out, err = capfd.readouterr()
    assert "to stderr" not in err and "to stdout" not in out  # nothing relayed ...
    assert res[1].stderr == "to stderr\n" and res.values == [res[0].pid, res[1].pid]  # ... nothing lost
    assert os.environ["DTLAB_OUTPUT"] == "lines"  # restored

    def stuck():
        import time

        time.sleep(60)

    with pytest.raises(dtlab.HangError):
        course.run_graded(stuck, nprocs=2, timeout=3)
    assert_no_descendants()


def test_run_graded_keeps_launcher_notes_off_stderr(monkeypatch, capfd):
    # nbgrader scores a test cell with any stderr output as failed: what the launcher prints in
    # the kernel (a backend note, a diagnostic) must reach the learner on stdout instead
    from dtlab.runtime import launch

    def chatty_run(fn, *args, **kwargs):
        import sys

        print("dtlab: a note from the launcher", file=sys.stderr)
        return "results"

    monkeypatch.setattr(launch, "run", chatty_run)
    assert course.run_graded(os.getpid, nprocs=2) == "results"
    out, err = capfd.readouterr()
    assert "a note from the launcher" in out and err == ""
