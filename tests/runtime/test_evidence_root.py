"""Where evidence goes when a tool is not told: beside the learner's notebooks (the current
folder's dtlab-evidence/), or $DTLAB_EVIDENCE_ROOT; a temporary folder only while nbgrader grades,
so nothing lands in a submission."""

import os
import tempfile

from dtlab.runtime.evidence import new_folder


def test_beside_the_notebooks_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("DTLAB_EVIDENCE_ROOT", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.chdir(tmp_path)
    a, b = new_folder("hang-size_mismatch"), new_folder("hang-size_mismatch")
    assert a != b and os.path.dirname(a) == str(tmp_path / "dtlab-evidence")
    assert os.path.basename(a).startswith("hang-size_mismatch-") and os.listdir(a) == []


def test_the_root_can_be_chosen_and_grading_keeps_out_of_the_submission(tmp_path, monkeypatch):
    monkeypatch.setenv("DTLAB_EVIDENCE_ROOT", str(tmp_path / "mine"))
    assert os.path.dirname(new_folder("x")) == str(tmp_path / "mine")
    monkeypatch.delenv("DTLAB_EVIDENCE_ROOT")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.chdir(tmp_path)
    folder = new_folder("x")
    assert folder.startswith(tempfile.gettempdir()) and not (tmp_path / "dtlab-evidence").exists()
