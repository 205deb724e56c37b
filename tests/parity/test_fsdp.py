"""FSDP2 (fully_shard) vs DDP on gloo -- fully_shard runs on torch 2.13 CPU/gloo, so this is not
GPU-only -- and memory per rank, predicted vs measured. One launch (~6 s on 2 CPU cores).

    pytest tests/parity/test_fsdp.py --durations=0
"""

import pytest

from dtlab.parity import TOLERANCE
from dtlab.parity.fsdp import LAYERS, SETTINGS, ZERO_STAGES, fsdp_vs_ddp, predict_memory
from conftest import assert_no_descendants


@pytest.fixture(scope="module")
def reports():
    reps = fsdp_vs_ddp(nprocs=2, backend="gloo", steps=3)
    assert_no_descendants()
    return {r.bug: r for r in reps}


def test_every_setting_matches_ddp_within_its_dtype_tolerance(reports):
    assert set(reports) == set(SETTINGS)
    for name, r in reports.items():
        assert r.parity, str(r)
        assert r.tolerance == TOLERANCE[(SETTINGS[name][1], "gloo")]
        assert r.allreduce_calls == 3 * (LAYERS + 1)    # one reduce-scatter per unit per step


def test_float32_is_bitwise_on_two_gloo_ranks_and_bf16_is_not(reports):
    assert reports["fsdp2_fp32"].max_abs_diff == 0
    assert reports["fsdp2_fp32_keep_gathered"].max_abs_diff == 0
    assert 0 < reports["fsdp2_bf16_mixed"].max_abs_diff < TOLERANCE[("bfloat16", "gloo")]


def test_memory_measured_is_predicted_and_half_of_ddp(reports):
    for r in reports.values():
        pred, ddp = r.memory["predicted"], r.memory["measured_ddp"][0]
        for rank_bytes in r.memory["measured"]:
            for part in ("params", "grads", "optimizer"):
                assert rank_bytes[part] == pred[part] == ddp[part] / 2


def test_predict_memory_by_zero_stage():
    n, w = 1_000_000, 4
    full = predict_memory(n, w, shard=(), optim_states=2)
    assert full == {"params": 4e6, "grads": 4e6, "optimizer": 8e6, "total": 16e6}
    z1 = predict_memory(n, w, shard=ZERO_STAGES["zero1"][0], optim_states=2)
    assert z1["optimizer"] == 2e6 and z1["params"] == 4e6
    z3 = predict_memory(n, w, shard=ZERO_STAGES["zero3"][0], optim_states=2)
    assert z3["total"] == full["total"] / w
