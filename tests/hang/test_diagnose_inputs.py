"""diagnose on evidence it did not make: synthetic fixtures of each message shape, and bad folders."""

import json
import os
import pickle

import pytest

from dtlab.hang import NoEvidence, diagnose
from dtlab.hang.diagnose import main
from dtlab.hang.diagnose.load import plain_pickle

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def test_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(NoEvidence, match="no evidence"):
        diagnose(str(tmp_path))
    assert main(str(tmp_path)) == 2


def test_missing_folder_and_garbage(tmp_path):
    with pytest.raises(NoEvidence, match="not a folder"):
        diagnose(str(tmp_path / "nope"))
    (tmp_path / "notes.txt").write_text("shopping list: eggs, milk\n")
    (tmp_path / "blob.bin").write_bytes(os.urandom(512))
    with pytest.raises(NoEvidence, match="distributed"):
        diagnose(str(tmp_path))


def test_two_runs_in_one_folder_are_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps(
            {"nprocs": 2, "backend": "gloo", "ranks": [], "outcome": "ok"}))
    with pytest.raises(NoEvidence, match="2 separate runs"):
        diagnose(str(tmp_path))


def test_flight_recorder_pickles_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    blob = pickle.dumps({"version": "2.10", "entries": [Evil()]})
    with pytest.raises(pickle.UnpicklingError, match="plain data"):
        plain_pickle(blob)
    (tmp_path / "fr_trace_0").write_bytes(blob)
    (tmp_path / "rank0.stderr.txt").write_text("Traceback (most recent call last):\nRuntimeError: x\n")
    diagnose(str(tmp_path))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name, cls, culprit, seq", [
    ("synthetic_nccl_watchdog_skip", "missing_collective", [1], 5),
    ("synthetic_torchrun_sigkill", "rank_died", [2], None),
    ("synthetic_cuda_oom", "oom", [0], None),
    ("synthetic_detail_dtype", "dtype_mismatch", [2], 4),
    ("synthetic_fr_json_size", "size_mismatch", [1], 3),
    ("synthetic_pyspy_p2p", "p2p_deadlock", [0, 1], None),
    ("synthetic_straggler_steps", "straggler", [2], None),
    ("synthetic_clean_run", "no_failure", [], None),
])
def test_synthetic_evidence(name, cls, culprit, seq):
    d = diagnose(os.path.join(FIX, name))
    assert (d.failure_class, d.culprit_ranks, d.collective_seq) == (cls, culprit, seq), d.summary
