"""``Replay``: nbgrader's autograde step, fed with what ``dtlab course grade`` already ran.

Grading and recording grades are two steps. ``dtlab course grade`` runs one submission's test
cells in isolation and writes ``<results>/<student>/<assignment>/<assignment>.ipynb`` (the test
cells with their outputs) and ``result.json`` (:mod:`dtlab.course.grade`). Then nbgrader's own
autograde runs as it always does -- the submission copied in, locked and test cells restored
from the gradebook, scores saved, late penalties, feedback later -- with one change: in place of
executing the notebook, :class:`Replay` puts each test cell's graded outputs in. So the
gradebook, ``nbgrader formgrader`` and feedback see an ordinary nbgrader course, and nothing in
nbgrader's process runs a learner's code.

A submission's cell posing as a test the source does not have is not graded here, as in
``dtlab course grade`` (:class:`Posers`, before nbgrader's OverwriteCells, which would delete
its ``grade_id`` and then fail on the cell: nbgrader 0.9.6, ``KeyError: 'grade_id'``).

Enabled in grading/nbgrader_config.py::

    c.Autograde.sanitize_preprocessors = sanitize_preprocessors()
    c.Autograde.autograde_preprocessors = autograde_preprocessors()
    c.Replay.results = "<course root>/graded"      # set by dtlab course merge
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode


@contextlib.contextmanager
def environ(env: dict[str, str], also_restore: tuple[str, ...] = ()):
    """Set ``env`` in os.environ for a with block; afterwards restore those variables and
    ``also_restore`` as they were, whatever happened in the block."""
    # nbgrader.utils.setenv restores nothing when the body raises; this one always does.
    saved = {k: os.environ.get(k) for k in (*env, *also_restore)}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _error(message: str):
    return new_output("error", ename="NotGraded", evalue=message,
                      traceback=[f"\x1b[0;31mNotGraded\x1b[0m: {message}"])


class Replay(NbGraderPreprocessor):
    """Each test cell's outputs from ``dtlab course grade``'s result for this submission; a test
    cell it did not grade (or a result for other bytes than the submitted ones) gets an error
    output, which scores 0."""

    results = Unicode("", help="Folder of graded results: <results>/<student>/<assignment>/"
                      "<assignment>.ipynb and result.json").tag(config=True)
    submitted = Unicode("", help="The course root's submitted/ folder (checked against the "
                        "result's hash of what it graded)").tag(config=True)

    def preprocess(self, nb, resources):
        import nbformat

        info = resources["nbgrader"]
        student, aid, notebook = info["student"], info["assignment"], info["notebook"]
        folder = os.path.join(self.results, student, aid)
        graded, problem = {}, ""
        try:
            with open(os.path.join(folder, "result.json")) as f:
                result = json.load(f)
            sub = os.path.join(self.submitted, student, aid, notebook + ".ipynb")
            with open(sub, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != result.get("submission_sha256"):
                    problem = (f"the graded result in {folder} is for another version of this "
                               f"submission: grade it again")
            g = nbformat.read(os.path.join(folder, notebook + ".ipynb"), as_version=4)
            graded = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in g.cells
                      if c.cell_type == "code"}
        except (OSError, ValueError) as e:
            problem = f"no graded result for {student}/{aid} in {folder}: {e}"
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            if meta.get("grade") and not meta.get("solution"):
                done = graded.get(meta.get("grade_id"))
                if problem or done is None:
                    cell.outputs = [_error(problem or "this test cell was not graded")]
                else:
                    cell.outputs = done.outputs
                    cell.execution_count = done.execution_count
        return nb, resources


class Posers(NbGraderPreprocessor):
    """A cell marked as a test (or locked, or a task) whose grade_id the source notebook lacks
    is the learner's own cell: it keeps its text and loses the marks it claims."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            known = {c.name for c in gb.find_notebook(info["notebook"], info["assignment"]).source_cells}
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader")
            if meta is not None and meta.get("grade_id") not in known and (
                    meta.get("grade") or meta.get("locked") or meta.get("task")):
                self.log.warning("Cell %r is not in the source notebook: not graded",
                                 meta.get("grade_id"))
                del cell.metadata["nbgrader"]
        return nb, resources


class ShortErrors(NbGraderPreprocessor):
    """For feedback: an error in a test cell shows its type and message, not its traceback.
    A traceback prints the lines around the one that failed, and in a test cell those are the
    hidden tests' source: nbgrader's ClearHiddenTests clears the cell, not its outputs."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


HIDDEN_FAILED = ("a hidden test failed; what it said is for the instructor (it would show the "
                 "hidden inputs, or what your code made of them)")


class HiddenOutput(NbGraderPreprocessor):
    """For feedback: a test cell's output stops where its hidden tests began (the line
    :func:`dtlab.course.grade.mark_hidden` printed there; the first one, should the learner's
    code print it too: that hides only more), and an error after it says only that a hidden
    test failed (:data:`HIDDEN_FAILED`). What a hidden test prints or says -- the learner's code
    on hidden inputs, a value it returned, an exception it raised with its input in the message
    -- let a learner collect those inputs over resubmissions (fifth red team: a table of the
    hidden consoles' and logs' line counts, built from one grading's feedback, scored full in the
    next). The autograded notebook keeps all of it for the instructor."""

    def preprocess_cell(self, cell, resources, index):
        from .grade import HIDDEN_MARK

        if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("grade"):
            return cell, resources
        kept, hidden = [], False
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                if hidden:
                    out["ename"], out["evalue"] = "HiddenTestFailed", HIDDEN_FAILED
                    out["traceback"] = [f"HiddenTestFailed: {HIDDEN_FAILED}"]
                kept.append(out)
            elif hidden:
                continue
            elif out.get("output_type") == "stream" and HIDDEN_MARK in out.get("text", ""):
                out["text"] = out["text"][:out["text"].index(HIDDEN_MARK) + len(HIDDEN_MARK)] + "\n"
                kept.append(out)
                hidden = True
            else:
                kept.append(out)
        cell.outputs = kept
        return cell, resources


def feedback_preprocessors() -> list:
    """nbgrader's feedback pipeline with the hidden tests cleared: their source, what they
    printed, and tracebacks."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import ClearHiddenTests, GetGrades

    return [GetGrades, ClearHiddenTests, HiddenOutput, ShortErrors, CSSHTMLHeaderPreprocessor]


def sanitize_preprocessors() -> list:
    """nbgrader's sanitize pipeline with :class:`Posers` before OverwriteCells."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import OverwriteCells

    steps = list(Autograde.class_traits()["sanitize_preprocessors"].default())
    if OverwriteCells not in steps:
        raise RuntimeError("nbgrader's pipeline has no OverwriteCells step; dtlab.course.execute "
                           f"was written for nbgrader 0.9 (got {steps}).")
    at = steps.index(OverwriteCells)
    return steps[:at] + [Posers] + steps[at:]


def autograde_preprocessors() -> list:
    """nbgrader's autograde pipeline, in its order, with Execute replaced by :class:`Replay`."""
    from nbgrader.converters import Autograde

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    if Execute not in steps:
        raise RuntimeError("nbgrader's pipeline has no Execute step to replace; dtlab.course.execute "
                           f"was written for nbgrader 0.9 (got {steps}).")
    return [Replay if p is Execute else p for p in steps]
