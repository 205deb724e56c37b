"""GuardedExecute on tiny notebooks: what a student cell can do to the grading kernel; the
per-cell limits (cell_timeouts); 08's broken_runs refusing a bad spec before it starts."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import assert_no_descendants
from dtlab.course.execute import GuardedExecute, autograde_preprocessors, validate_preprocessors


def run(tmp_path, *sources, timeout=3):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    ep = GuardedExecute(timeout=timeout, iopub_timeout=3, kernel_name="python3")
    ep.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb.cells


def errors(cell):
    return [(o.ename, o.evalue) for o in cell.outputs if o.output_type == "error"]


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_timeout_interrupts_and_grading_goes_on(tmp_path):
    cells = run(tmp_path,
                "import os; print(os.environ['DTLAB_OUTPUT'], repr(os.environ['CUDA_VISIBLE_DEVICES']))",
                "while True:\n    pass",
                "print('next cell ran')")
    assert text(cells[0]).strip() == "lines ''"  # the grading kernel's environment
    names = [e[0] for e in errors(cells[1])]
    assert names == ["KeyboardInterrupt", "CellTimeoutError"]
    # the message names this cell's limit (cell_timeouts may give a test cell another)
    assert "more than 3 s, the grader's limit for it" in errors(cells[1])[1][1]
    assert text(cells[2]) == "next cell ran\n" and not errors(cells[2])
    assert_no_descendants()


def test_dead_kernel_fails_this_cell_and_the_rest(tmp_path):
    cells = run(tmp_path, "x = 1\nprint('before')", "import os\nos._exit(3)", "print(x)", "")
    assert text(cells[0]) == "before\n"
    assert [e[0] for e in errors(cells[1])] == ["DeadKernelError"]
    assert errors(cells[2]) == [("NotRun", "not run: the kernel died in an earlier cell "
                                 "(the one beginning 'import os').")]
    assert cells[3].outputs == []  # an empty cell has nothing to fail
    assert_no_descendants()


def test_kernel_that_ignores_the_interrupt_is_killed(tmp_path):
    cells = run(tmp_path,
                "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
                "print('never')")
    assert [e[0] for e in errors(cells[0])] == ["CellTimeoutError"]
    assert "kernel was killed" in errors(cells[0])[0][1]
    assert [e[0] for e in errors(cells[1])] == ["NotRun"]
    assert_no_descendants()


def test_pipelines_keep_nbgrader_order_with_execute_swapped():
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    upstream = Autograde.class_traits()["autograde_preprocessors"].default()
    ours = autograde_preprocessors()
    assert [GuardedExecute if p is Execute else p for p in upstream] == ours
    assert GuardedExecute in validate_preprocessors()


def test_graded_cells_score_zero_when_not_run(tmp_path):
    # nbgrader's own rule: a grade cell with an error output scores 0, one without scores full
    from nbgrader.utils import determine_grade

    cells = run(tmp_path, "import os\nos._exit(1)", "assert True")
    cells[1].metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                     "points": 2, "grade_id": "t", "schema_version": 3}
    assert determine_grade(cells[1]) == (0, 2)
    nbformat.validate(nbformat.v4.new_notebook(cells=cells))


def _cell(grade_id=None):
    cell = new_code_cell("pass")
    if grade_id is not None:
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                     "points": 1, "grade_id": grade_id, "schema_version": 3}
    return cell


def test_cell_timeouts_by_grade_id_else_timeout():
    ep = GuardedExecute(timeout=30, cell_timeouts={"postmortem_tests": 150})
    assert ep.timeout_func(_cell("postmortem_tests")) == 150
    assert ep.timeout_func(_cell("other_tests")) == 30
    assert ep.timeout_func(_cell()) == 30                 # no nbgrader metadata
    # nbclient asks through _get_timeout for every cell it runs
    assert ep._get_timeout(_cell("postmortem_tests")) == 150
    assert ep._get_timeout(_cell()) == 30
    assert GuardedExecute(timeout=7).timeout_func(_cell("postmortem_tests")) == 7  # none set


def test_course_config_gives_the_postmortem_cell_its_own_limit():
    import os

    from traitlets.config.loader import PyFileConfigLoader

    root = os.path.join(os.path.dirname(__file__), "..", "..", "grading")
    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    assert config.GuardedExecute.cell_timeouts == {"postmortem_tests": 150}
    ep = GuardedExecute(config=config)
    assert ep.timeout == config.Execute.timeout < 150
    assert ep.timeout_func(_cell("postmortem_tests")) == 150
    assert ep.timeout_func(_cell("any_other_cell")) == ep.timeout


# 08's postmortem cell gets that limit because it runs course.broken_runs; a bad spec must fail
# at once, before any job (or temporary folder) exists.
BAD_SPECS = {
    "unknown key": ({"bug": "extra_metric", "rank": 1}, r"unknown keys \['rank'\]"),
    "bad bug": ({"bug": "uneven_batch"}, "'uneven_batch' is not one of"),
    "culprit out of range": ({"bug": "stuck_loader", "culprit": 3},
                             "culprit=3 must be a rank from 0 to 2"),
    "at_step out of range": ({"bug": "skip_metric", "at_step": 9}, "at_step=9 must be a step"),
}


@pytest.mark.parametrize("case", BAD_SPECS)
def test_broken_runs_rejects_a_bad_spec_before_starting_anything(case, monkeypatch, no_orphans):
    import tempfile

    from dtlab.course.broken import broken_runs
    from dtlab.runtime import agents

    def started(*args, **kwargs):
        raise AssertionError("broken_runs went on past a bad spec")

    monkeypatch.setattr(agents, "Agents", started)
    monkeypatch.setattr(tempfile, "mkdtemp", started)
    spec, words = BAD_SPECS[case]
    good = {"bug": "extra_metric", "culprit": 0, "at_step": 2}
    with pytest.raises(ValueError, match=words):
        broken_runs([good, spec], nprocs=3)
