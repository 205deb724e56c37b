"""``dtlab capstone baseline``: a clean run kept as an evidence folder, and ``compare()`` of a
broken run against it. One real gloo baseline (2 ranks, 4 steps, about 5 s on 2 CPU cores,
shared with test_capstone_hang.py); compare() on the 2x H200 recording
(data/h200x2-capstone-run: an NCCL baseline and ``make hang`` folders) and on synthetic evidence
made from it (slower steps, a changed NCCL variable)."""

import json
import os
import re
from pathlib import Path

import pytest
from conftest import assert_no_descendants

from dtlab.capstone.baseline import (SLOWER, baseline, compare, format_baseline,
                                     format_comparison, step_phases, topology)
from dtlab.cli import main

RECORDED = Path(__file__).resolve().parents[2] / "data" / "h200x2-capstone-run"
NCCL_BASELINE = RECORDED / "baseline-tiny"       # 2 NCCL ranks, 10 steps, 15.2 ms/step
STEPS = 4

_clean: dict = {}


def clean_gloo_baseline(tmp_path_factory) -> tuple[str, dict]:
    """One real gloo baseline per test session (test_capstone_hang.py passes it to hang())."""
    if not _clean:
        out = str(tmp_path_factory.mktemp("capstone") / "baseline")
        b = baseline("tiny", steps=STEPS, nprocs=2, backend="gloo", out=out)
        assert_no_descendants()
        _clean.update(folder=out, b=b)
    return _clean["folder"], _clean["b"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return clean_gloo_baseline(tmp_path_factory)


# --- a real baseline on gloo ---------------------------------------------------------------------

def test_baseline_json_holds_throughput_losses_and_why_no_nccl(clean):
    folder, b = clean
    with open(os.path.join(folder, "baseline.json")) as f:
        assert json.load(f) == json.loads(json.dumps(b))
    assert (b["size"], b["steps"], b["world"], b["backend"]) == ("tiny", STEPS, 2, "gloo")
    assert b["folder"] == os.path.abspath(folder)
    assert len(b["losses"]) == STEPS and b["losses"][-1] < b["losses"][0]
    assert [r["rank"] for r in b["throughput"]] == [0, 1]
    for r in b["throughput"]:
        assert r["device"] == "cpu" and r["step_s"] > 0 and r["tokens_per_s"] > 0
        assert r["peak_bytes"] is None and r["mfu"] is None   # CPU: no allocator peak, no MFU
    # gloo: no NCCL log to read, and the baseline says so rather than leaving a blank
    assert b["nccl"] is None and b["nccl_note"] == "no NCCL log: the ranks ran on gloo"
    assert not os.path.exists(os.path.join(folder, "nccl"))


def test_baseline_folder_is_evidence_that_diagnose_reads_as_no_failure(clean):
    from dtlab.hang.diagnose import diagnose

    folder, b = clean
    with open(os.path.join(folder, "run.json")) as f:
        run = json.load(f)
    assert run["outcome"] == "ok" and run["baseline"]["steps"] == STEPS
    assert {f"rank{r}.{s}.txt" for r in (0, 1) for s in ("stdout", "stderr")} <= set(
        os.listdir(folder))
    d = diagnose(folder)
    assert d.failure_class == "no_failure" and d.confident is True
    assert d.culprit_ranks == [] and d.root_ranks == []


def test_format_baseline_on_gloo(clean):
    folder, b = clean
    lines = format_baseline(b).splitlines()
    assert lines[0].startswith(f"baseline: capstone tiny, 2 ranks (gloo), {STEPS} steps, loss ")
    assert lines[1].split() == ["rank", "device", "ms/step", "tok/s", "peak", "MiB", "MFU"]
    for r, line in zip((0, 1), lines[2:4]):
        cols = line.split()
        assert cols[:2] == [str(r), "cpu"] and cols[-2:] == ["-", "-"]
        assert float(cols[2]) == pytest.approx(b["throughput"][r]["step_s"] * 1e3, abs=0.05)
    assert lines[4:] == ["NCCL: no NCCL log: the ranks ran on gloo", f"folder: {b['folder']}"]


def test_format_baseline_reprints_the_recorded_nccl_table():
    with open(NCCL_BASELINE / "baseline.json") as f:
        b = json.load(f)
    table = format_baseline(b, gpu="NVIDIA H200").splitlines()
    printed = (RECORDED / "baseline-tiny.txt").read_text().splitlines()[-len(table):]
    # line 4 (NCCL) was reworded after the recording (c577012); the MFU column is recomputed
    # against the datasheet peak (it divided by a measured matmul rate then); the rest is as
    # printed then
    assert printed[:2] + printed[5:] == table[:2] + table[5:]
    for was, now in zip(printed[2:4], table[2:4]):
        assert was.split()[:-1] == now.split()[:-1] and now.split()[-1] == "0.0%"
    assert format_baseline(b).splitlines()[2].split()[-1] == "-"   # GPU unknown: no MFU
    assert table[4].startswith("NCCL 2.28.9: 24 rings, e.g. 0 -> 1; ")
    assert "rank 0: 1:P2P/CUMEM; rank 1: 0:P2P/CUMEM" in table[4] and "Socket" in table[4]
    assert table[5] == "NCCL variables: NCCL_NVLS_ENABLE=0, NCCL_SOCKET_IFNAME=lo"


CASES = {
    "size": (["--size", "huge"], "--size 'huge' is not one of: tiny, small, 1b"),
    "steps": (["--steps", "0"], "--steps 0 must be a whole number >= 1"),
    "out": (["--out", os.path.dirname(__file__)], "exists and is not an empty folder"),
    "backend": (["--backend", "foo"], "--backend 'foo' is not one of"),
    "warm_up_only": (["--steps", "2"], "--steps 2: a baseline needs at least 3 steps"),
    "1b_on_gloo": (["--size", "1b", "--backend", "gloo"], "--size 1b needs GPUs"),
}


def test_the_library_refuses_a_baseline_of_warm_up_steps_only():
    from dtlab.capstone.baseline import check_args

    with pytest.raises(ValueError, match="steps=2: a baseline needs at least 3 steps"):
        check_args("tiny", 2, 1, "gloo", None)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, capsys, no_orphans):
    argv, words = CASES[case]
    assert main(["capstone", "baseline", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("dtlab capstone baseline: ") and words in err, err


# --- compare() on the recorded NCCL runs ---------------------------------------------------------

def test_recorded_extra_metric_hang_did_not_slow_down_and_nccl_built_the_same():
    c = compare(str(RECORDED / "hang" / "extra_metric"), str(NCCL_BASELINE))
    # culprit rank 1 at step 3: on NCCL its extra all_reduce is queued, so both print step 3
    assert c["last_step"] == {0: 3, 1: 3}
    assert c["baseline_step_ms"] == pytest.approx(15.22, abs=0.01)
    assert c["step_ms"] is not None and c["slower"] is False
    assert c["nccl"] == {"same_rings": True, "transports": {}, "env": {}}
    assert c["lines"] == [
        "steps finished: rank 0: 0-3, rank 1: 0-3",
        f"good steps (1-3) ran at {c['step_ms']:.1f} ms (median) vs the baseline's 15.2 ms: "
        f"within {SLOWER}x of it: the job did not slow down before it stopped",
        "NCCL: same rings; same transports; same NCCL variables"]
    text = format_comparison(c).splitlines()
    assert text[0] == f"against the baseline ({NCCL_BASELINE}):"
    assert text[1:] == [f"  {ln}" for ln in c["lines"]]


def test_step_phases_reads_the_recorded_consoles():
    phases = step_phases(str(RECORDED / "hang" / "extra_metric"))
    assert sorted(phases) == [0, 1]
    assert set(phases[0][3]) == {"data", "compute", "done"}
    assert "done" not in phases[0][4]     # step 4 began, and never finished
    assert phases[0][1]["data"] <= phases[0][1]["compute"] <= phases[0][1]["done"]


# --- compare() on synthetic evidence -------------------------------------------------------------

def _write_steps(folder, ms_per_step, finished=3, world=2):
    """rankN.stderr.txt with [dtlab-step] lines as rank_hang prints them: steps 0..finished
    done, each compute -> done taking ms_per_step, then one more step that never finishes."""
    for r in range(world):
        t, lines = 1795700000.0, []
        for s in range(finished + 2):
            lines.append(f"[dtlab-step] rank={r} step={s} phase=data t={t:.6f}")
            lines.append(f"[dtlab-step] rank={r} step={s} phase=compute t={t + 0.001:.6f}")
            t += 0.001 + ms_per_step / 1e3
            if s <= finished:
                lines.append(f"[dtlab-step] rank={r} step={s} phase=done loss=4.0000 t={t:.6f}")
        (Path(folder) / f"rank{r}.stderr.txt").write_text("\n".join(lines) + "\n")


def test_slower_good_steps_are_called_a_slowdown(tmp_path):
    _write_steps(tmp_path, ms_per_step=100.0)
    c = compare(str(tmp_path), str(NCCL_BASELINE))
    assert c["last_step"] == {0: 3, 1: 3}
    assert c["step_ms"] == pytest.approx(100.0, abs=0.01) and c["slower"] is True
    assert c["lines"][1].startswith("good steps (1-3) ran at 100.0 ms (median) vs the "
                                    "baseline's 15.2 ms: 6.6x slower: the job slowed down")
    # the baseline has NCCL topology, this run has no log: said, not compared
    assert c["nccl"] is None
    assert c["lines"][2] == "NCCL: the broken run has no NCCL log to compare"


def _nccl_evidence(folder, extra_env: dict, shm: bool = False):
    """The recorded baseline's NCCL logs, with extra 'set by environment' lines after the
    recorded ones (and, with shm, the P2P channels rewritten as NCCL prints SHM ones)."""
    os.makedirs(folder / "nccl")
    for src in sorted((NCCL_BASELINE / "nccl").glob("*.log")):
        out = []
        for line in src.read_text().splitlines():
            if shm:
                line = re.sub(r"(Channel \d+)/\d+ : (.*) via P2P/CUMEM\S*",
                              r"\1 : \2 via SHM/direct/direct", line)
            out.append(line)
            if "NCCL_NVLS_ENABLE set by environment" in line:
                prefix = line.split(" NCCL INFO ")[0]
                out += [f"{prefix} NCCL INFO {k} set by environment to {v}."
                        for k, v in extra_env.items()]
        (folder / "nccl" / src.name).write_text("\n".join(out) + "\n")


def test_a_changed_nccl_variable_and_transport_are_named(tmp_path):
    _write_steps(tmp_path, ms_per_step=16.0)
    _nccl_evidence(tmp_path, {"NCCL_P2P_DISABLE": "1"}, shm=True)
    assert topology(str(tmp_path / "nccl"))["env"]["NCCL_P2P_DISABLE"] == "1"
    c = compare(str(tmp_path), str(NCCL_BASELINE))
    assert c["slower"] is False
    assert c["nccl"] == {"same_rings": True,
                         "transports": {"0": (["1:P2P/CUMEM"], ["1:SHM"]),
                                        "1": (["0:P2P/CUMEM"], ["0:SHM"])},
                         "env": {"NCCL_P2P_DISABLE": (None, "1")}}
    assert c["lines"][-1].startswith("NCCL: same rings; transports differ: ")
    assert c["lines"][-1].endswith("; variables differ: NCCL_P2P_DISABLE: None -> 1")


def test_nccl_debug_variables_are_not_a_difference(tmp_path):
    # the broken run logs with other subsystems (hang: INIT,ENV,COLL; baseline: INIT,ENV,GRAPH)
    _nccl_evidence(tmp_path, {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,COLL"})
    assert {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"} <= set(topology(str(tmp_path / "nccl"))["env"])
    c = compare(str(tmp_path), str(NCCL_BASELINE))
    assert c["nccl"] == {"same_rings": True, "transports": {}, "env": {}}
    assert c["lines"] == ["too few good steps to compare their speed with the baseline's",
                          "NCCL: same rings; same transports; same NCCL variables"]


def test_a_gloo_baseline_has_no_nccl_to_compare(clean, tmp_path):
    folder, _ = clean
    _write_steps(tmp_path, ms_per_step=1.0)
    _nccl_evidence(tmp_path, {})   # even with a log on the broken side
    c = compare(str(tmp_path), folder)
    assert c["nccl"] is None and c["slower"] is False
    assert c["lines"][-1] == "NCCL: nothing to compare (no NCCL log: the ranks ran on gloo)"

