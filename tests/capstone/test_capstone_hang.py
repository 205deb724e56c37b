"""``dtlab capstone hang``: the capstone's FSDP2 job broken for a real reason on gloo ranks, the
evidence collected by dtlab.run, the diagnosis right (or honestly unsure), nothing left running.
Each run is bounded by a 5 s collective timeout: about 5-12 s per run on 2 CPU cores. The bug
placed on another rank and step (--culprit, --at-step) and the comparison with a baseline reuse
two 3-rank runs; on NCCL, the 2x H200 recording is replayed (data/h200x2-capstone-run)."""

import json
import os
import shutil

import capstone_runs
import pytest
from conftest import assert_no_descendants
from test_capstone_baseline import NCCL_BASELINE, RECORDED, clean_gloo_baseline

from dtlab.capstone.hang import BUGS, CULPRIT, FIXES, bug_site, format_report, hang
from dtlab.cli import main


def _run(bug, nprocs, tmp_path, **placed):
    if nprocs == 3:   # shared with the 08 shortcut suite (tests/capstone_runs.py)
        r = capstone_runs.run(bug, **placed)
        out = r["evidence_dir"]
    else:
        out = str(tmp_path / bug)
        r = hang(bug, nprocs=nprocs, backend="gloo", out=out, **placed)
    assert_no_descendants()
    assert r["evidence_dir"] == out and r["wall_s"] < 60
    assert os.path.exists(os.path.join(out, "run.json"))
    with open(os.path.join(out, "diagnosis.json")) as f:
        assert json.load(f)["failure_class"] == r["diagnosis"]["failure_class"]
    assert r["expected"]["failure_class"] == BUGS[bug].expect_class
    assert r["expected"]["fix"] == FIXES[bug] and r["expected"]["behaviour"] == BUGS[bug].behaviour
    return r, r["diagnosis"]


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 3])
def test_extra_metric_is_an_op_mismatch_at_fsdp2s_all_gather(nprocs, tmp_path):
    r, d = _run("extra_metric", nprocs, tmp_path)
    assert r["outcome"] != "ok"
    assert d["failure_class"] == "op_mismatch"
    assert d["op"] == "all_gather" and d["collective_seq"]   # Flight Recorder position
    if nprocs == 2:   # no majority: both candidates, and it says it is unsure
        assert d["culprit_ranks"] == [0, 1] and d["confident"] is False
    else:
        assert d["culprit_ranks"] == [CULPRIT] and d["confident"] is True
    assert d["sites"][str(CULPRIT)].startswith("hang.py:")   # the culprit's extra all_reduce


@pytest.mark.slow
def test_gather_shapes_fails_at_once_as_a_size_mismatch(tmp_path):
    r, d = _run("gather_shapes", 3, tmp_path, culprit=2)
    # on gloo: no hang; the culprit (shorter buffers) is aborted by gloo's size check
    assert r["outcome"] == "RankError" and "SIGABRT" in r["error"]
    assert r["wall_s"] < 30
    assert d["failure_class"] == "size_mismatch"
    assert 2 in d["culprit_ranks"]
    assert d["confident"] is False or d["culprit_ranks"] == [2]
    assert d["sites"]["2"] == bug_site("gather_shapes")   # its fatal error's dump


@pytest.mark.slow
def test_stuck_loader_hangs_the_others_in_fsdp2s_all_gather(tmp_path):
    r, d = _run("stuck_loader", 3, tmp_path, culprit=0)
    assert r["outcome"] != "ok"
    # what is true, and the evidence shows it: the culprit is stuck in the loader, the others
    # timed out inside FSDP2's all-gather of the next forward (train_step's model(x))
    assert d["sites"]["0"] == bug_site("stuck_loader")
    assert d["sites"]["1"].startswith("train.py:") and d["sites"]["2"] == d["sites"]["1"]
    # FSDP2's frame (distributed_c10d.all_gather_single) reads as all_gather: ranks 1, 2 in a
    # collective, rank 0 outside any -> the one that never reached it
    assert d["failure_class"] == BUGS["stuck_loader"].expect_class
    assert 0 in d["culprit_ranks"]


# --- the bug placed: --culprit, --at-step; --baseline ---------------------------------------------

@pytest.fixture(scope="module")
def skip_on_2(tmp_path_factory):
    # skip_metric, culprit rank 2 of 3, at the default step
    return _run("skip_metric", 3, None, culprit=2)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return clean_gloo_baseline(tmp_path_factory)   # shared with test_capstone_baseline.py


@pytest.fixture(scope="module")
def extra_on_0(tmp_path_factory, clean):
    # extra_metric, culprit rank 0 of 3, at step 2, compared with the clean gloo baseline
    return _run("extra_metric", 3, None, culprit=0, at_step=2, baseline=clean[0])


@pytest.mark.slow
def test_skip_metric_culprit_is_the_rank_that_went_ahead(skip_on_2):
    r, d = skip_on_2
    assert r["outcome"] != "ok" and (r["culprit_rank"], r["at_step"]) == (2, 3)
    assert d["failure_class"] == "op_mismatch"
    # ranks 0, 1 wait in the loss all_reduce that rank 2 skipped; the position names their op
    assert d["culprit_ranks"] == [2] and d["confident"] is True and d["op"] == "all_reduce"
    # the culprit's stack is in FSDP2's all-gather of its next forward, not on a line of the bug
    assert d["sites"]["2"].startswith("train.py:")
    assert d["sites"]["0"].startswith("hang.py:") and d["sites"]["1"] == d["sites"]["0"]
    assert r["baseline"] is None and "against the baseline" not in format_report(r)


def test_recorded_nccl_sites_say_which_evidence_each_comes_from():
    """On 2x H200 the quiet-spell snapshot put rank 1 in the data loader (data.py) while its
    Flight Recorder's last collective was issued from hang.py: both are shown, each labelled."""
    from dtlab.capstone.hang import _format_sites, site_sources

    src = site_sources(str(RECORDED / "hang" / "extra_metric"), range(2))
    assert src["1"][0] == {"site": "data.py:85", "source": "its stack at the quiet-spell snapshot"}
    assert src["1"][1]["source"] == "Flight Recorder: its last collective, #41 all_reduce"
    text = _format_sites({"sites": {}, "site_sources": src})
    assert "rank 1: data.py:85 (its stack at the quiet-spell snapshot); hang.py:195 (Flight " \
           "Recorder: its last collective, #41 all_reduce)" in text


def test_skip_metric_plants_no_statement():
    with pytest.raises(ValueError, match="plants no statement"):
        bug_site("skip_metric")


@pytest.mark.slow
def test_extra_metric_placed_on_rank_0_at_step_2(extra_on_0):
    r, d = extra_on_0
    assert (r["culprit_rank"], r["at_step"]) == (0, 2)
    with open(os.path.join(r["evidence_dir"], "run.json")) as f:
        reproducer = json.load(f)["reproducer"]
    assert (reproducer["culprit_rank"], reproducer["at_step"]) == (0, 2)
    assert d["failure_class"] == "op_mismatch" and d["op"] == "all_gather"
    assert d["culprit_ranks"] == [0] and d["confident"] is True
    assert d["sites"]["0"] == bug_site("extra_metric")   # the extra all_reduce itself
    # every site says where it comes from; the report prints each with its source
    src = d["site_sources"]
    assert {s["site"] for s in src["0"]} >= {bug_site("extra_metric")}
    assert all(s["source"].startswith(("its traceback", "its stack at the", "Flight Recorder: "))
               for seen in src.values() for s in seen)
    text = format_report(r)
    assert f"rank 0: {src['0'][0]['site']} ({src['0'][0]['source']})" in text
    # gloo's all_reduce blocks: rank 0 never finishes step 2, the others finish it and wait
    # in step 3's forward
    assert r["baseline"]["last_step"] == {0: 1, 1: 2, 2: 2}


@pytest.mark.slow
def test_hang_against_a_baseline_says_what_differed(extra_on_0, clean):
    r, _ = extra_on_0
    c = r["baseline"]
    assert c["baseline"] == os.path.abspath(clean[0])
    assert c["baseline_step_ms"] > 0 and c["nccl"] is None
    assert c["lines"] == [
        "steps finished: rank 0: 0-1, rank 1: 0-2, rank 2: 0-2",
        "the baseline ran on 2 ranks, this run on 3: their step times are not comparable",
        "NCCL: nothing to compare (no NCCL log: the ranks ran on gloo)"]
    text = format_report(r)
    assert f"against the baseline ({c['baseline']}):" in text
    assert text.endswith("\n".join(f"  {ln}" for ln in c["lines"]))


def test_on_nccl_gather_shapes_is_expected_to_hang(tmp_path, monkeypatch):
    """The 2x H200 recording replayed through hang(): what it expects on NCCL, the diagnosis
    of the real evidence, the comparison with the real NCCL baseline. No GPU, nothing launched."""
    from dtlab.runtime import HangError
    from dtlab.runtime import launch as launch_module
    from dtlab.runtime import plan as plan_module

    recorded = RECORDED / "hang" / "gather_shapes"

    def replay(*args, evidence_dir, **kwargs):
        shutil.copytree(recorded, evidence_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("diagnosis.json"))
        raise HangError(45.0, {})

    monkeypatch.setattr(plan_module, "resolve", lambda nprocs, backend, *a, **k: plan_module.Plan(
        2, "nccl", ["cuda:0", "cuda:1"]))
    monkeypatch.setattr(launch_module, "launch", replay)
    r = hang("gather_shapes", nprocs=2, backend="nccl", out=str(tmp_path / "ev"),
             baseline=str(NCCL_BASELINE))
    assert BUGS["gather_shapes"].behaviour == "error"          # on gloo
    assert r["backend"] == "nccl" and r["outcome"] == "HangError"
    assert r["expected"] == {"behaviour": "hang", "failure_class": "size_mismatch",
                             "looks_like": BUGS["gather_shapes"].on_nccl, "fix": "same_shapes"}
    d = r["diagnosis"]
    assert d["failure_class"] == "size_mismatch" and d["op"] == "all_gather"
    assert d["culprit_ranks"] == [0, 1] and d["confident"] is False
    assert r["baseline"]["nccl"] == {"same_rings": True, "transports": {}, "env": {}}
    assert r["baseline"]["slower"] is False


CASES = {
    "bug": (["--bug", "uneven_batch"], "--bug 'uneven_batch' is not one of: extra_metric"),
    "nprocs": (["--nprocs", "1"], "--nprocs 1: a hang needs at least 2 ranks"),
    "backend": (["--backend", "foo"], "--backend 'foo' is not one of"),
    "out": (["--out", __file__], "exists and is not a folder"),
    "culprit": (["--culprit", "5", "--nprocs", "2"], "--culprit 5: give a rank from 0 to 1"),
    "at_step_0": (["--at-step", "0"], "--at-step 0 must be a whole number >= 1 and <= 8 (at least one good"),
    "at_step_99": (["--at-step", "99"], "--at-step 99 must be a whole number >= 1 and <= 8"),
    "baseline": (["--baseline", os.path.dirname(__file__)], "holds no baseline.json"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, capsys, no_orphans):
    argv, words = CASES[case]
    assert main(["capstone", "hang", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("dtlab capstone hang: ") and words in err, err


FLAGS = {"culprit": ["--culprit", "5", "--nprocs", "2"], "at_step": ["--at-step", "99"],
         "baseline": ["--baseline", os.path.dirname(__file__)]}


@pytest.mark.parametrize("name", FLAGS)
def test_bad_input_names_the_flag(name, capsys, no_orphans):
    assert main(["capstone", "hang", *FLAGS[name]]) == 2
    err = capsys.readouterr().err
    flag = FLAGS[name][0]
    assert f"{flag} " in err and f"{name}=" not in err, err
