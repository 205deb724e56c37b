"""diagnose on evidence it did not make: synthetic fixtures of each message shape, and bad folders."""

import json
import os
import pickle
import re

import pytest

from dtlab.hang import NoEvidence, diagnose
from dtlab.cli import main as dtlab
from dtlab.hang.diagnose.load import plain_pickle

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def test_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(NoEvidence, match="no evidence"):
        diagnose(str(tmp_path))
    assert dtlab(["diagnose", str(tmp_path)]) == 2


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


def test_exit_statuses(tmp_path, capsys):
    assert dtlab(["diagnose", os.path.join(FIX, "synthetic_clean_run")]) == 0  # no failure
    assert dtlab(["diagnose", os.path.join(FIX, "synthetic_cuda_oom")]) == 1  # failure found
    assert dtlab(["diagnose", str(tmp_path)]) == 2  # no usable evidence
    assert "no evidence" in capsys.readouterr().err


def test_render_is_the_diagnosis_own_and_says_why_it_is_unsure():
    from dtlab.hang.diagnose import Diagnosis, render

    d = diagnose(os.path.join(FIX, "synthetic_fr_json_size"))
    text = d.render()
    assert text == render(d)  # the name notebook 07 and dtlab hang use
    assert text.splitlines()[:4] == ["failure class : size_mismatch", "culprit ranks : 1",
                                     "collective    : #3 (all_reduce)", "confident     : yes"]
    tie = Diagnosis("p2p_deadlock", [0, 1], None, "send", "s", [], confident=False)
    assert "collective    : send (which one: unknown)" in tie.render()
    assert "confident     : no: no majority singles a rank out" in tie.render()
    assert "(none that points anywhere)" in tie.render()
    launch = Diagnosis("stalled", [], None, None, "unsure: s", [], confident=False, about="launch")
    assert launch.render().splitlines()[:2] == [
        "failure class : stalled", "confident     : no: the evidence is thin; see the summary"]
    assert launch.to_dict()["about"] == "launch" and d.to_dict()["about"] == "ranks"


def test_evidence_is_clipped_at_a_word_boundary():
    from dtlab.hang.diagnose.notes import clip

    assert clip("Connection closed by peer [127.0.0.1]:2345", 30) == "Connection closed by peer…"
    assert clip("short", 30) == "short"
    d = diagnose(os.path.join(FIX, "captured_torchrun_raise"))
    raw = open(os.path.join(FIX, "captured_torchrun_raise", "console.txt")).read()
    clipped = [e["finding"].split("…")[0] for e in d.evidence if "…" in e["finding"]]
    assert clipped
    for finding in clipped:  # the last word kept is a whole word of the console
        last = finding.split()[-1]
        assert re.search(re.escape(last) + r"\s", raw), finding


def test_one_vocabulary_for_op_and_dtype_names():
    from dtlab.hang.diagnose import traces

    assert not hasattr(traces, "_OPS") and not hasattr(traces, "_DTYPES")
    entries = [{"collective_seq_id": i + 1, "profiling_name": name, "input_sizes": [[4]],
                "input_dtypes": [dt], "process_group": ("0", "default_pg")}
               for i, (name, dt) in enumerate([("nccl:all_to_all_single", "BFloat16"),
                                               ("gloo:alltoall_base", "Half"),
                                               ("nccl:_reduce_scatter_base", "Float")])]
    calls = traces.from_flight_recorder({"version": "2.10", "entries": entries})
    assert [(c.op, c.dtype) for c in calls] == [("all_to_all", "bfloat16"), ("all_to_all", "float16"),
                                                ("reduce_scatter", "float32")]


def test_same_divergence_rule_as_nccl_log():
    from dtlab.hang.diagnose.traces import Call as HCall
    from dtlab.hang.diagnose.traces import first_divergence
    from dtlab.nccl_log.divergence import divergence
    from dtlab.nccl_log.model import Call as NCall

    def call(op):
        return NCall(op, 0, 1024, 7, 0, 0, "0x1", 2)

    ops = {0: ["all_reduce", "all_reduce"], 1: ["all_reduce", "all_gather"], 2: ["all_reduce"]}
    nccl = {r: [call(op=o) for o in seq] for r, seq in ops.items()}
    hang = {r: [HCall(i + 1, o, 1024, "float32") for i, o in enumerate(seq)]
            for r, seq in ops.items()}
    a, b = divergence(nccl), first_divergence(hang)
    assert (a["position"], a["ranks"], a["confident"]) == (b.position, b.ranks, b.confident) \
        == (2, [0, 1, 2], False)

