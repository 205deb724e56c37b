"""Every notebook runs top to bottom headless, as a learner who solved its exercises runs it (in
their kernel: the visible tests call the learner's functions in plain child processes), and none
is committed with outputs."""

import glob
import os
import re
import shutil
import tempfile

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import assert_no_descendants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
WRITTEN = [os.path.join(ROOT, "notebooks", "train_ddp.py")]  # files a notebook's cells write


# a cell that calls one of these at its top level (not under an `if GPUS >= 2:`) promises a
# picture, and must show one
PICTURE = re.compile(r"^(?![\s#]).*\b(?:draw|plot|plot_\w+|heatmap)\(", re.MULTILINE)


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{os.path.basename(path)} cell {cell.get('id')} has outputs: clear them")


def execute(path, timeout=600):
    """The notebook as a learner who solved it runs it: solutions in, hidden tests out (those
    run under the grader: tests/grading)."""
    from dtlab.course.grade import visible

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = visible(cell.source)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(path)}})
    client.execute()
    return nb


def text_of(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", ""))
            out.append(str(o.get("data", {}).get("text/plain", "")))
            if o.get("output_type") == "error":
                out.append(o.get("ename", "") + ": " + o.get("evalue", ""))
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 05 takes ~70 s alone, three times that beside the grading term
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_headless(path, monkeypatch):
    monkeypatch.setenv("DTLAB_OUTPUT", "lines")
    def folders():  # 07's evidence folders, 08's baseline and evidence, in the temp dir
        return {p for pattern in ("dtlab-hang-*", "dtlab-08-*", "ddp-by-hand-*")
                for p in glob.glob(os.path.join(tempfile.gettempdir(), pattern))}

    kept = folders()
    written = [f for f in WRITTEN if not os.path.exists(f)]  # 00's %%writefile train_ddp.py
    try:
        nb = execute(path)
    finally:  # what a learner keeps is not ours to keep
        for new in folders() - kept:
            shutil.rmtree(new, ignore_errors=True)
        for f in written:
            if os.path.exists(f):
                os.remove(f)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        test = cell.metadata.get("nbgrader", {}).get("grade")
        if "raises-exception" in cell.metadata.get("tags", []) and not test:
            assert errors, f"cell {cell.id} is tagged raises-exception but raised nothing"
        else:  # a test cell is tagged too (Run All goes past an unsolved exercise): solved, it passes
            assert not errors, f"cell {cell.id}: {errors[0].ename}: {errors[0].evalue}"
        if test:
            assert "raises-exception" in cell.metadata.get("tags", []), \
                f"test cell {cell.id} is not tagged raises-exception: Run All would stop there"
        if PICTURE.search(cell.source):
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
                f"cell {cell.id} draws a picture but shows none: {cell.source[:80]!r}"
    assert_no_descendants()
    if os.path.basename(path) == "00_launch.ipynb":
        text = text_of(nb)
        assert "[rank 1] I am rank 1 of" in text
        assert "root cause: rank 1" in text
        assert "HangError" in text and "dist.recv(t, src=0)" in text
