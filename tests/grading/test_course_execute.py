"""GuardedExecute on tiny notebooks: what a student cell can do to the grading kernel."""

import nbformat
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
    assert "more than 3 s" in errors(cells[1])[1][1]
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
