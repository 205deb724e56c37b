"""Feedback shows a failed test's error, never the hidden tests' source: nbgrader's ClearHiddenTests
clears the cell, and dtlab.course.execute.ShortErrors keeps the traceback (which prints the lines
around the failing one) out of the outputs."""

import nbformat

from dtlab.course.execute import ShortErrors, feedback_preprocessors


def test_a_test_cells_error_shows_its_message_only():
    tb = ["\x1b[31mAssertionError\x1b[39m Traceback", "   13 def matrix(n, base): # hidden",
          "### BEGIN HIDDEN TESTS", "AssertionError: example matrix: got None"]
    test = nbformat.v4.new_code_cell("check()", metadata={"nbgrader": {"grade": True, "grade_id": "t"}})
    test.outputs = [nbformat.v4.new_output("error", ename="AssertionError",
                                           evalue="example matrix: got None", traceback=tb)]
    mine = nbformat.v4.new_code_cell("1/0")
    mine.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                           traceback=["one", "two"])]
    nb = nbformat.v4.new_notebook(cells=[test, mine])
    nb, _ = ShortErrors().preprocess(nb, {})
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: example matrix: got None"]
    assert nb.cells[1].outputs[0]["traceback"] == ["one", "two"]  # the learner's own cell: whole


def test_feedback_clears_hidden_tests_then_shortens_errors():
    names = [p.__name__ for p in feedback_preprocessors()]
    assert names.index("ClearHiddenTests") < names.index("ShortErrors")
    assert names[0] == "GetGrades"


def test_what_hidden_tests_print_stays_out_of_the_feedback():
    """Fifth red team: a learner's function printed the hidden inputs it was given, and a table
    built from one grading's feedback answered the next (04 name_fault, 06 transport 3/3)."""
    from dtlab.course.execute import HIDDEN_FAILED, HiddenOutput
    from dtlab.course.grade import HIDDEN_MARK, mark_hidden

    source = mark_hidden("check(visible)\nwith x:\n    ### BEGIN HIDDEN TESTS\n    check(hidden)")
    compile(source, "cell", "exec")  # the mark sits inside the block, at its indentation
    test = nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": "t"}})
    test.outputs = [
        nbformat.v4.new_output("stream", name="stdout",
                               text=f"visible ok\n{HIDDEN_MARK}\nhidden input: 10.0.0.1 ...\n"),
        nbformat.v4.new_output("stream", name="stdout", text="more of the hidden input\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "a hidden frame"}),
        nbformat.v4.new_output("error", ename="AssertionError", evalue="hidden case 2 of 5",
                               traceback=["..."]),
    ]
    mine = nbformat.v4.new_code_cell("print(1)")
    mine.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{HIDDEN_MARK}\nmine\n")]
    nb = nbformat.v4.new_notebook(cells=[test, mine])
    nb, _ = HiddenOutput().preprocess(nb, {})
    outs = nb.cells[0].outputs
    assert [o["output_type"] for o in outs] == ["stream", "error"]
    assert outs[0]["text"] == f"visible ok\n{HIDDEN_MARK}\n"
    # a hidden test's message may hold what the learner's code returned or raised: not shown
    assert outs[1]["evalue"] == HIDDEN_FAILED and "hidden case" not in str(outs[1])
    assert "mine" in nb.cells[1].outputs[0]["text"]  # the learner's own cell: untouched
    names = [p.__name__ for p in feedback_preprocessors()]
    assert names.index("ClearHiddenTests") < names.index("HiddenOutput")
