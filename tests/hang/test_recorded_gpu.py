"""diagnose on the real evidence recorded on 2x H200 with NCCL (data/h200x2-hang, see its README)."""

import json
import os
import shutil

import pytest

from dtlab.hang import KINDS, diagnose

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "data", "h200x2-hang")
# with two ranks no majority singles one out: a mismatch or a missing collective names both
# candidates, unsure (the rank that returned while the other waited is the root rank, not
# necessarily the one with the bug); death, OOM and lag name the rank itself
EXPECTED = {  # culprits, seq, confident, root ranks
    "size_mismatch": ([0, 1], 3, False, []), "dtype_mismatch": ([0, 1], 3, False, []),
    "op_mismatch": ([0, 1], 3, False, []), "skipped_collective": ([0, 1], 5, False, [1]),
    "extra_collective": ([0, 1], 6, False, [0]), "rank_exit": ([1], 3, True, [1]),
    "rank_killed": ([1], 3, True, [1]), "oom": ([1], 3, True, [1]),
    "p2p_deadlock": ([0, 1], None, True, []), "straggler": ([1], None, True, []),
}
# re-recordings of a kind, in folders of their own: folder -> kind
AGAIN = {"p2p_deadlock_separate_buffers": "p2p_deadlock"}
# kinds added after the H200 recording, with why a GPU recording adds nothing to their live test
NOT_RECORDED = {"host_oom": "host memory in a cgroup: the same on any Linux machine, recorded "
                            "live by tests/hang/test_reproduce_diagnose.py"}
RECORDED = [k for k in KINDS if k not in NOT_RECORDED]


def test_every_kind_was_recorded():
    assert sorted(os.listdir(ROOT)) == sorted([*RECORDED, *AGAIN, "README.md"])


@pytest.mark.parametrize("folder", [*RECORDED, *AGAIN])
def test_recorded_gpu_evidence(folder, tmp_path):
    kind = AGAIN.get(folder, folder)
    src = os.path.join(ROOT, folder)
    ev = shutil.copytree(src, tmp_path / folder, ignore=shutil.ignore_patterns("diagnosis.json"))
    info = json.load(open(ev / "run.json"))
    info.pop("reproducer")  # diagnose must not lean on what the reproducer knew
    json.dump(info, open(ev / "run.json", "w"))
    d = diagnose(str(ev))
    culprits, seq, confident, root = EXPECTED[kind]
    assert (d.failure_class, d.culprit_ranks, d.collective_seq, d.confident, d.root_ranks) == \
        (KINDS[kind].failure_class, culprits, seq, confident, root), d.summary
    if not confident:
        assert "any of ranks 0, 1 may be the odd one out" in d.summary
        assert "is the odd one out" not in d.summary
    if kind in ("size_mismatch", "dtype_mismatch", "op_mismatch", "skipped_collective"):
        assert any(e["kind"] in ("flight_recorder", "nccl_log") for e in d.evidence)


@pytest.mark.parametrize("kind, reason", [("size_mismatch", "count"), ("dtype_mismatch", "dtype"),
                                          ("op_mismatch", "op")])
def test_torch_flight_recorder_analyzer_agrees(kind, reason):
    from dtlab.hang.diagnose.facts import gather
    from dtlab.hang.diagnose.load import load
    from dtlab.hang.diagnose.traces import first_divergence, torch_match

    d = first_divergence(gather(load(os.path.join(ROOT, kind))).traces)
    calls = [c for c in d.items.values() if c is not None]
    assert all(c.entry is not None for c in calls)  # both sides are Flight Recorder entries
    assert (d.reason, d.position, d.ranks, d.confident) == (reason, 3, [0, 1], False)
    assert torch_match(calls, 2) == reason
