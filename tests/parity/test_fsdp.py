"""FSDP2 (fully_shard) vs DDP on gloo -- fully_shard runs on torch 2.13 CPU/gloo, so this is not
GPU-only -- and memory per rank, predicted vs measured. One launch (~6 s on 2 CPU cores).

    pytest tests/parity/test_fsdp.py --durations=0
"""

import pytest

from dtlab.parity import TOLERANCE
from dtlab.parity.fsdp import (LAYERS, PARTS, SETTINGS, ZERO_STAGES, fsdp_vs_ddp, memory_table,
                               predict_memory)
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


def test_memory_shards_follow_the_chunks_and_storage_is_padded(reports):
    """The vocabulary's 35 rows split 18 + 17 over 2 ranks: rank 1's shard views are shorter,
    together they are DDP's copy; FSDP2 allocates parameter and gradient storage padded to
    rank 0's chunk, so that storage is equal on both ranks; the optimizer's momentum is made
    from the views and follows them."""
    for r in reports.values():
        ddp, (r0, r1) = r.memory["measured_ddp"][0], r.memory["measured"]
        for part in ("params", "grads", "optimizer"):
            assert r0[part] + r1[part] == ddp[part] and r0[part] > r1[part]
            assert r0[part] > r.memory["predicted"][part] > r1[part]  # the even split: neither
        for part in ("params", "grads"):
            assert r0["storage"][part] == r1["storage"][part] == r0[part]
        assert r1["storage"]["optimizer"] == r1["optimizer"]
        table = memory_table(r).splitlines()
        assert table[0].split() == ["rank", "DDP", "FSDP2", "shards", "FSDP2", "allocated",
                                    "even", "split"]
        assert [int(x) for x in table[2].split()[1:4]] == [
            sum(ddp[p] for p in PARTS), sum(r1[p] for p in PARTS),
            sum(r1["storage"][p] for p in PARTS)]


def test_predict_memory_by_zero_stage():
    n, w = 1_000_000, 4
    full = predict_memory(n, w, shard=(), optim_states=2)
    assert full == {"params": 4e6, "grads": 4e6, "optimizer": 8e6, "total": 16e6}
    z1 = predict_memory(n, w, shard=ZERO_STAGES["zero1"][0], optim_states=2)
    assert z1["optimizer"] == 2e6 and z1["params"] == 4e6
    z3 = predict_memory(n, w, shard=ZERO_STAGES["zero3"][0], optim_states=2)
    assert z3["total"] == full["total"] / w
