"""Mixed precision (dtlab.parity.precision), for real on gloo: the float32 code path is bitwise
the reference; bf16 (autocast, FSDP2 bf16 parameters) and fp16 with GradScaler drift from it --
really, not bitwise -- within the tolerance derived from each format's unit roundoff; reducing
gradients in bf16 costs a rounding the fp32 reduce does not; the scaler skips the steps that
overflow float16, backs off, then grows. One launch (~12 s on 2 busy CPU cores).

    pytest tests/parity/test_precision.py --durations=0 -p no:cacheprovider
"""

import pytest

from dtlab.parity import mixed_precision
from dtlab.parity.precision import FP16_MAX, INIT_SCALE, MODES, UNIT_ROUNDOFF, line
from conftest import assert_no_descendants

LOW = ("ddp_bf16", "ddp_fp16_scaler", "fsdp2_bf16_reduce_fp32", "fsdp2_bf16_reduce_bf16")


@pytest.fixture(scope="module")
def rows():
    got = mixed_precision(backend="gloo")          # 2 ranks, 8 steps, every mode
    assert_no_descendants()
    return {r["mode"]: r for r in got}


@pytest.mark.slow
def test_float32_on_the_same_code_path_is_bitwise(rows):
    assert list(rows) == list(MODES)
    for mode in ("fp32", "fsdp2_fp32"):            # 2 ranks: DDP and FSDP2 add the same 2 numbers
        r = rows[mode]
        assert r["verdict"] == "bitwise" and r["ok"], r
        assert r["losses"] == r["reference_losses"] and set(r["max_abs_diff"]) == {0.0}


@pytest.mark.slow
def test_low_precision_drifts_really_but_within_its_derived_tolerance(rows):
    for mode in LOW:
        r = rows[mode]
        assert r["verdict"] == r["expected"] == "within tolerance" and r["ok"], r
        assert r["param_l2_diff"][-1] > 0 and max(r["loss_diff"]) > 0    # precision loss is real
        assert all(d <= t for d, t in zip(r["param_l2_diff"], r["tolerance"])), r
        assert all(m <= d for m, d in zip(r["max_abs_diff"], r["param_l2_diff"]))
        # the first step's gradient error, in units of u |g|_2: about one rounding, under the 3
        assert 0.2 < r["gradient_error_u"] < 3, r
    assert rows["ddp_bf16"]["unit_roundoff"] == UNIT_ROUNDOFF["bfloat16"] == 2**-8
    assert rows["ddp_fp16_scaler"]["unit_roundoff"] == 2**-11
    # the tolerance grows with the steps: every step's gradient error adds up
    tol = rows["ddp_bf16"]["tolerance"]
    assert all(a < b for a, b in zip(tol, tol[1:]))


@pytest.mark.slow
def test_reducing_in_bf16_rounds_where_fp32_does_not(rows):
    r16, r32 = rows["fsdp2_bf16_reduce_bf16"], rows["fsdp2_bf16_reduce_fp32"]
    assert r16["reduce_dtype"] == "bfloat16" and r32["reduce_dtype"] == "float32"
    assert min(r16["reduce_error"]) > 100 * max(r32["reduce_error"] + [1e-7])
    assert max(r16["reduce_error"]) < r16["reduce_bound"] == pytest.approx(2 * 2**-8, rel=0.01)
    assert r16["reduce_within_bound"] and r32["reduce_within_bound"]
    assert rows["fsdp2_fp32"]["reduce_within_bound"]
    drift = r16["drift_vs_reduce_fp32"]            # the bf16 reduce moves the parameters
    assert 0 < drift[0] < drift[-1] <= r16["tolerance"][-1]


@pytest.mark.slow
def test_the_scaler_skips_overflowing_steps_backs_off_and_grows(rows):
    r = rows["ddp_fp16_scaler"]
    scales, skipped = r["scales"], r["skipped"]
    # 2^22 / 32 tokens per rank: the first step's target-logit gradient is past float16's range
    assert scales[0] == INIT_SCALE and INIT_SCALE / 32 * 0.98 > FP16_MAX
    assert skipped[0] == 0 and scales[1] == scales[0] / 2             # skipped, backed off
    ok = [s for s in range(len(scales)) if s not in skipped]
    assert ok, r                                                      # it does train
    grew = [s for s in range(len(scales) - 1) if scales[s + 1] == 2 * scales[s]]
    assert grew and all(s - 1 in ok and s in ok for s in grew), r     # 2 clean steps, then x2
    assert r["reference"] == f"float32 DDP, skipping steps {skipped}"
    assert r["max_abs_diff"][skipped[0]] == 0                         # a skipped step moves nothing
    assert r["vs_unskipped_max_abs_diff"] > 100 * r["max_abs_diff"][-1]   # what skipping cost


@pytest.mark.slow
def test_one_line_per_mode_says_its_verdict_and_what_the_mode_adds(rows):
    said = {m: line(r) for m, r in rows.items()}
    assert said["fp32"].startswith("fp32: bitwise (max |dp| 0,")
    assert "gradient error" in said["ddp_bf16"] and "skipped steps [0" in said["ddp_fp16_scaler"]
    assert "reduce error" in said["fsdp2_bf16_reduce_bf16"] and "NOT AS EXPECTED" not in "".join(said.values())
    wrong = dict(rows["ddp_bf16"], ok=False)
    assert line(wrong).endswith("NOT AS EXPECTED (within tolerance)")


@pytest.mark.parametrize("kw, word", [
    ({"modes": ("fp32", "bf16")}, "modes"), ({"modes": ()}, "modes"),
    ({"modes": ("fp32", "fp32")}, "modes"), ({"nprocs": 1}, "nprocs"), ({"steps": 0}, "steps"),
    ({"init_scale": 3.0}, "init_scale"), ({"growth_interval": 0}, "growth_interval"),
])
def test_bad_arguments_are_refused_before_anything_starts(kw, word, no_orphans):
    with pytest.raises(ValueError, match=word):
        mixed_precision(**kw)
