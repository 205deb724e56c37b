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
