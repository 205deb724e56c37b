"""00's hand-written DDP script: DDP's arithmetic (dtlab.byhand.expected) against a real DDP run
of the course's reference script, the judge's messages for each classic mistake, the recorded
GPU evidence, and the runner that runs a learner's script as torchrun would
(dtlab.course.script), leaving nothing behind."""

import os
import random
import sys

import pytest

from dtlab import byhand
from dtlab.course import ScriptRun, script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "grading"))
from answers import reference  # noqa: E402  (the notebook's own solution cell)


def _reference_script(folder) -> str:
    src = reference("00_launch", "train_ddp")
    first, _, rest = src.partition("\n")
    assert first.split() == ["%%writefile", "train_ddp.py"]
    path = os.path.join(folder, "train_ddp.py")
    with open(path, "w") as f:
        f.write(rest)
    return path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASE = dict(nprocs=3, n=41, d=5, epochs=3, batch_size=4, lr=0.1, seed=123)


@pytest.mark.slow
def test_a_real_ddp_run_matches_the_arithmetic_within_float32_rounding(in_tmp, no_orphans):
    _reference_script(in_tmp)
    data, want, hints = byhand.prepare(CASE, str(in_tmp))   # each rank's copy with decoys
    run = script("train_ddp.py", nprocs=3, inputs=[{"data.pt": p} for p in data],
                 args=byhand.args_of(CASE))
    assert run.ok, run.failure()
    assert byhand.problems(run, want, hints) == []   # the gradients each rank sent included
    diff = byhand.max_diff(byhand.load_state(run.files["model.pt"]), want["state"])
    assert diff <= byhand.WEIGHT_TOL / 20, diff   # measured 3e-8; the tolerance is 1e-5
    # 3 ranks, 41 samples: the sampler pads to 42, 14 a rank, batches of 4: 4 steps (4+4+4+2)
    assert [e for e, _ in byhand.logged(run)[0]] == [0, 1, 2] and 1 not in byhand.logged(run)


def test_each_rank_holds_only_what_it_reads(tmp_path):
    import torch

    data, _, _ = byhand.prepare(CASE, str(tmp_path))
    true = torch.load(os.path.join(tmp_path, "data.pt"))
    seen = byhand.read_by(CASE["n"], CASE["nprocs"], CASE["epochs"], CASE["seed"])
    for r, path in enumerate(data):
        mine = torch.load(path)
        same = {i for i in range(CASE["n"]) if torch.equal(mine["x"][i], true["x"][i])}
        assert same == seen[r] and len(seen[r]) < CASE["n"]   # decoys everywhere else


def test_traffic_beyond_ddp_is_refused():
    from dtlab.runtime.relay import Message

    grads = [Message(i, 0, "all_reduce", dtype="float32", shapes=[[81]]) for i in range(3)]
    cast = [Message(9, 0, "broadcast", dtype="float32", shapes=[[81]], root=1)]
    assert "broadcast" in byhand._beyond_ddp(0, grads + cast, 81, 3, 1)
    smuggled = [Message(20 + i, 0, "all_reduce", dtype="float32", shapes=[[8]]) for i in range(2)]
    assert "besides the gradients" in byhand._beyond_ddp(0, grads + smuggled, 81, 3, 1)
    assert byhand._beyond_ddp(0, grads, 81, 3, 1) == ""


def test_the_hidden_data_separates_the_usual_mistakes():
    rng = random.Random(7)
    for _ in range(3):
        case = byhand.hidden_case(rng)
        assert case["nprocs"] in (2, 3) and case["n"] % (case["nprocs"] * case["batch_size"])
        assert case["epochs"] >= 2   # set_epoch changes nothing in epoch 0
    want = byhand.expected(byhand.make_data("/tmp/dtlab-byhand-test", 30, 3, 1), 2, 2, 4, 0.1, 1)
    other = byhand.expected("/tmp/dtlab-byhand-test/data.pt", 2, 2, 4, 0.1, 1, set_epoch=False)
    assert want["losses"][0] == other["losses"][0] != 0          # epoch 0: the same order
    assert byhand.max_diff(want["state"], other["state"]) > 1e-4  # epoch 1: another one


def _run(lines0=(), lines1=(), files=None, codes=(0, 0)):
    console = "".join(f"[default0]:{ln}\n" for ln in lines0) + \
        "".join(f"[default1]:{ln}\n" for ln in lines1)
    return ScriptRun(list(codes), console, files or {})


def _saved(state) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def want(tmp_path_factory):
    """Two expectations, without the per-step gradients: these runs are made up here, with no
    traffic to check (the real run above checks it)."""
    path = byhand.make_data(str(tmp_path_factory.mktemp("d")), 30, 3, 1)
    return [{**byhand.expected(path, 2, 2, 4, 0.1, 1, set_epoch=s), "sent": [[], []]}
            for s in (True, False)]


def test_the_judge_names_each_mistake(want):
    good, no_epoch = want
    log = [f"epoch {e} loss {v:.6f}" for e, v in enumerate(good["losses"])]
    model = {"model.pt": _saved(good["state"])}
    assert byhand.problems(_run(log, files=model), good) == []
    said = " ".join(byhand.problems(_run(log, log, model), good))
    assert "rank 1 printed" in said
    own = [f"epoch {e} loss {v:.6f}" for e, v in enumerate(good["rank0_losses"])]
    assert "rank 0's own batches" in " ".join(byhand.problems(_run(own, files=model), good))
    wrapped = {"model.pt": _saved({"module." + k: v for k, v in good["state"].items()})}
    assert "model.module" in " ".join(byhand.problems(_run(log, files=wrapped), good))
    stale = {"model.pt": _saved(no_epoch["state"])}
    said = byhand.problems(_run(log, files=stale), good, {"a sampler without set_epoch": no_epoch})
    assert "a sampler without set_epoch" in said[0]
    assert "no model.pt" in byhand.problems(_run(log), good)[0]
    assert "could not be read" in byhand.problems(_run(log, files={"model.pt": b"junk"}), good)[0]
    failed = byhand.problems(_run(["Traceback ...", "ValueError: x"], codes=(1, -15)), good)
    assert "rank 0" in failed[0] and "ValueError: x" in failed[0]


@pytest.mark.slow
def test_a_script_that_hangs_or_skips_the_collectives_is_caught(in_tmp, no_orphans):
    (in_tmp / "hang.py").write_text(
        "import time, torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n    dist.all_reduce(torch.ones(1))\nelse:\n    time.sleep(3600)\n")
    run = script("hang.py", nprocs=2, idle_s=3)
    assert "no CPU and sent nothing for 3 s" in run.stopped and run.codes == [None, None]
    assert "still running" in run.failure()
    # one rank doing every rank's arithmetic, with no collective: right numbers, no traffic
    (in_tmp / "alone.py").write_text("print('epoch 0 loss 1.0')\n")
    got = {**byhand.expected(byhand.make_data(str(in_tmp), 30, 3, 1), 2, 1, 4, 0.1, 1)}
    assert "all-reduced all 81 gradients at once 0 times" in byhand.synced(script("alone.py").traffic, got)[0]


def test_what_the_ranks_write_comes_back_bounded_and_a_missing_script_is_named(in_tmp, no_orphans):
    with pytest.raises(AssertionError, match="run the cell that writes it"):
        script("absent.py")
    (in_tmp / "w.py").write_text(
        "import os, sys\nout = sys.argv[1]\nos.makedirs(out, exist_ok=True)\n"
        "open(os.path.join(out, f'r{os.environ[\"RANK\"]}.txt'), 'w').write(os.environ['WORLD_SIZE'])\n"
        "if os.environ['RANK'] == '0':\n    open(os.path.join(out, 'big'), 'wb').write(b'x' * (9 << 20))\n")
    run = script("w.py", nprocs=2, args=["{out}"])
    assert run.ok and run.files == {"r0.txt": b"2", "r1.txt": b"2"}   # 'big': past 8 MiB a rank


def test_recorded_gpu_evidence_is_shown_without_gpus(capsys):
    rec = byhand.run_mistake("no_set_device")   # this machine has no GPU: the recording
    shown = capsys.readouterr().out
    assert "RECORDED, not measured here" in shown and "Duplicate GPU detected" in shown
    assert "Traceback" not in shown and rec.text.startswith("$ torchrun")
    table = byhand.data_parallel_table()
    assert list(table["mode"]) == ["one GPU", "DataParallel", "DDP"]
    assert table.set_index("mode").speedup["DataParallel"] < 1 < table.set_index("mode").speedup["DDP"]
    with pytest.raises(ValueError, match="one of"):
        byhand.run_mistake("typo")
