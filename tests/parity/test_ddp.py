"""DDP vs one process on gloo: every classic bug caught by its own definition, every fix restores
parity, and what DDP guarantees by itself. One launch for all runs (~6 s on 2 CPU cores).

    pytest tests/parity/test_ddp.py --durations=0
"""

import pytest

from dtlab.parity import BUGS, TOLERANCE, broadcast_at_construction, compare_many, verdict
from dtlab.parity.ddp import STEPS_PER_EPOCH, train_single
from conftest import assert_no_descendants

RUNS = [("none", False)] + [(b, f) for b in BUGS[1:] for f in (False, True)]


@pytest.fixture(scope="module")
def reports():
    reps = compare_many(RUNS, nprocs=2, backend="gloo", steps=8, dtype="float64")
    assert_no_descendants()
    return {(r.bug, r.fixed): r for r in reps}


@pytest.mark.slow
def test_no_bug_is_parity_within_float64_tolerance(reports):
    r = reports[("none", False)]
    assert r.parity and r.backend == "gloo" and r.tolerance == TOLERANCE[("float64", "gloo")]
    assert r.max_abs_diff <= 1e-14       # float64: summation order only, far under tolerance
    assert len(r.loss_single) == len(r.loss_distributed) == 8
    assert r.loss_distributed[-1] < r.loss_distributed[0]     # it trains
    assert r.allreduce_calls == 8        # one bucket, one all-reduce per step


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS[1:])
def test_bug_is_caught_and_fix_restores_parity(reports, bug):
    ok, why = verdict(bug, reports[(bug, False)], reports[(bug, True)])
    assert ok, why
    assert reports[(bug, True)].parity


@pytest.mark.slow
def test_how_each_bug_shows(reports):
    assert reports[("no_set_epoch", False)].first_divergent_step == STEPS_PER_EPOCH  # epoch 2
    for bug in ("no_sampler", "batchnorm"):
        assert reports[(bug, False)].first_divergent_step == 0
    # sum instead of mean: the logged loss is right at step 0, the first update is not
    s = reports[("sum_loss", False)]
    assert abs(s.loss_distributed[0] - s.loss_single[0]) < 1e-12 and s.max_abs_diff > 1e-3
    assert reports[("no_sync_missing", False)].allreduce_calls == 16
    err = reports[("unused_param", False)].error
    assert "find_unused_parameters=True" in err and not reports[("unused_param", False)].parity


def test_single_reference_is_deterministic():
    a, sa = train_single("none", 2, 4, __import__("torch").float64)
    b, sb = train_single("none", 2, 4, __import__("torch").float64)
    assert a == b and all((x == y).all() for x, y in zip(sa, sb))


def test_ddp_broadcasts_rank0_at_construction(no_orphans):
    r = broadcast_at_construction(nprocs=2, backend="gloo")
    assert r[0]["before"] != r[1]["before"]
    assert r[0]["after"] == r[1]["after"] == r[0]["before"]
