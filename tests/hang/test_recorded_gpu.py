"""diagnose on the real evidence recorded on 2x H200 with NCCL (data/h200x2-hang, see its README)."""

import json
import os
import shutil

import pytest

from dtlab.hang import KINDS, diagnose

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "data", "h200x2-hang")
# with two ranks a mismatch cannot single one out; a missing collective blames the rank that
# issued fewer; death, OOM and lag name the rank itself
EXPECTED = {
    "size_mismatch": ([0, 1], 3), "dtype_mismatch": ([0, 1], 3), "op_mismatch": ([0, 1], 3),
    "skipped_collective": ([1], 5), "extra_collective": ([0], 6), "rank_exit": ([1], 3),
    "rank_killed": ([1], 3), "oom": ([1], 3), "p2p_deadlock": ([0, 1], None),
    "straggler": ([1], None),
}


def test_every_kind_was_recorded():
    assert sorted(os.listdir(ROOT)) == sorted([*KINDS, "README.md"])


@pytest.mark.parametrize("kind", list(KINDS))
def test_recorded_gpu_evidence(kind, tmp_path):
    src = os.path.join(ROOT, kind)
    ev = shutil.copytree(src, tmp_path / kind, ignore=shutil.ignore_patterns("diagnosis.json"))
    info = json.load(open(ev / "run.json"))
    info.pop("reproducer")  # diagnose must not lean on what the reproducer knew
    json.dump(info, open(ev / "run.json", "w"))
    d = diagnose(str(ev))
    culprits, seq = EXPECTED[kind]
    assert (d.failure_class, d.culprit_ranks, d.collective_seq) == \
        (KINDS[kind].failure_class, culprits, seq), d.summary
    if kind in ("size_mismatch", "dtype_mismatch", "op_mismatch", "skipped_collective"):
        assert any(e["kind"] in ("flight_recorder", "nccl_log") for e in d.evidence)


@pytest.mark.parametrize("kind, reason", [("size_mismatch", "count"), ("dtype_mismatch", "dtype"),
                                          ("op_mismatch", "op")])
def test_torch_flight_recorder_analyzer_agrees(kind, reason):
    from dtlab.hang.diagnose.facts import gather
    from dtlab.hang.diagnose.load import load
    from dtlab.hang.diagnose.traces import first_divergence, torch_match

    d = first_divergence(gather(load(os.path.join(ROOT, kind))).traces)
    calls = [c for c in d.calls.values() if c is not None]
    assert all(c.entry is not None for c in calls)  # both sides are Flight Recorder entries
    assert (d.reason, d.seq) == (reason, 3)
    assert torch_match(calls, 2) == reason
