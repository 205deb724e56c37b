"""Checkpoint and resume (dtlab.parity.checkpoint), for real on gloo: DCP saved on 2 ranks and
loaded on 2 continues bitwise; loaded on 1 it reshards FSDP2's shards exactly and continues within
float32's tolerance; each thing left out of the checkpoint shows as a difference far above it.
Four launches (~25 s on 2 busy CPU cores).

    pytest tests/parity/test_checkpoint.py --durations=0 -p no:cacheprovider
"""

import os
import tempfile

import pytest

from dtlab.parity import TOLERANCE, resume
from dtlab.parity.checkpoint import MODES
from conftest import assert_no_descendants

TOL = TOLERANCE[("float32", "gloo")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def rows(folder):
    got = resume(backend="gloo", folder=folder)   # 2 -> 2 ranks, 8 steps, saved at step 6
    assert_no_descendants()
    return {r["mode"]: r for r in got}


@pytest.mark.slow
def test_resume_on_the_same_ranks_is_bitwise(rows):
    assert list(rows) == list(MODES)
    full = rows["full"]
    assert full["verdict"] == full["expected"] == "bitwise" and full["ok"], full
    assert full["max_abs_diff"] == 0 and full["loss_diff"] == [0.0, 0.0]
    assert full["load_max_abs_diff"] == full["momentum_load_max_abs_diff"] == 0
    assert full["rng_restored"] == [True, True] and full["tolerance"] == TOL
    assert full["losses"] == full["reference_losses"][6:]


@pytest.mark.slow
def test_every_broken_mode_differs_far_above_the_tolerance(rows):
    for mode in MODES[1:]:
        r = rows[mode]
        assert r["verdict"] == r["expected"] == "differs" and r["ok"], r
        assert r["max_abs_diff"] > 100 * TOL, r
        assert r["load_max_abs_diff"] == 0        # the parameters always load exactly
    # other data from the first step after resume on
    assert rows["no_sampler_epoch"]["loss_diff"][0] > 100 * TOL
    # the corruption draws differ from the first step on; only its streams were not restored
    assert rows["no_rng"]["loss_diff"][0] > 100 * TOL
    assert rows["no_rng"]["rng_restored"] == [False, False]
    # momentum lost: the first loss is computed before any step, the second one differs
    nopt = rows["no_optimizer"]
    assert nopt["momentum_load_max_abs_diff"] is None
    assert nopt["loss_diff"][0] == 0 and nopt["loss_diff"][1] > 100 * TOL


@pytest.mark.slow
def test_the_checkpoint_lands_in_the_given_folder_one_file_per_saving_rank(rows, folder):
    ckpt = rows["full"]["checkpoint"]
    assert ckpt["path"] == os.path.join(folder, "step6-2ranks")
    assert os.listdir(folder) == ["step6-2ranks"]
    assert sorted(os.listdir(ckpt["path"])) == sorted(ckpt["files"]) == \
        [".metadata", "__0_0.distcp", "__1_0.distcp"]


@pytest.mark.slow
def test_reshard_2_to_1_loads_exactly_and_continues_within_tolerance(tmp_path, monkeypatch,
                                                                     no_orphans):
    """2 -> 1 here (1 rank loads every shard); 2 -> 3 and 1 -> 2 are recorded on 2x H200
    (data/h200x2-checkpoint/) and shown in section 05."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # where the temporary folder goes
    full, = resume(("full",), save_ranks=2, load_ranks=1, backend="gloo")
    assert full["augment"] is False and full["expected"] == "within tolerance" and full["ok"]
    assert full["load_max_abs_diff"] == full["momentum_load_max_abs_diff"] == 0   # bitwise
    assert 0 < full["max_abs_diff"] <= TOL        # 1 rank sums the batch in another order than 2
    assert full["rng_restored"] == [True]
    assert full["checkpoint"]["path"] is None and not any(
        p.name.startswith("dtlab-ckpt-") for p in tmp_path.iterdir())   # temporary: removed


@pytest.mark.parametrize("kw, word", [
    ({"save_ranks": 2, "load_ranks": 3, "augment": True}, "augment"),
    ({"modes": ("no_rng",), "augment": False}, "no_rng"),
    ({"modes": ("no_sampler_epoch",), "stop_at": 3}, "no_sampler_epoch"),
    ({"load_ranks": 5}, "load_ranks"),
    ({"modes": ("full", "no_epoch")}, "modes"),
    ({"steps": 6, "stop_at": 6}, "stop_at"),
])
def test_bad_arguments_are_refused_before_anything_starts(kw, word):
    with pytest.raises(ValueError, match=word):
        resume(**kw)
