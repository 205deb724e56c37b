"""dtlab.parity.unused on gloo: what ``find_unused_parameters=True`` makes DDP do, counted with
the profiler (one graph search and one more all-reduce per step), the warning DDP prints, and
bad input (one ValueError, nothing launched). Structure and counts only: the time ratio is a
measurement, not a test. One launch, the small MLP (~4 s on 2 CPU cores).

    .venv/bin/python -m pytest tests/parity/test_find_unused.py -q --durations=0
"""

import pytest

from dtlab.parity import scaling, unused
from conftest import assert_no_descendants


@pytest.fixture(scope="module")
def measured():
    out = unused.cost(2, model="mlp-small", steps=3, warmup=1, per_rank_batch=8, backend="gloo")
    assert_no_descendants()
    return out


def test_rows_and_ratios(measured):
    rows = {r["variant"]: r for r in measured["rows"]}
    assert list(rows) == list(unused.VARIANTS) == ["plain", "find_unused", "dead_head"]
    assert measured["backend"] == "gloo" and measured["nranks"] == 2
    for r in rows.values():
        assert r["step_ms"] > 0 and r["forward_ms"] > 0 and r["backward_ms"] > 0
        # the parts fit in the whole (the step also holds the optimizer, and on a busy machine
        # whatever else the scheduler put between them: a step may be far longer than its parts)
        assert r["forward_ms"] + r["backward_ms"] <= r["step_ms"] * 1.5
    assert set(measured["ratio"]) == {"find_unused", "dead_head"}
    for v, ratio in measured["ratio"].items():
        assert ratio == pytest.approx(rows[v]["step_ms"] / rows["plain"]["step_ms"])


def test_what_ddp_does_extra(measured):
    rows = {r["variant"]: r for r in measured["rows"]}
    plain, on, dead = rows["plain"], rows["find_unused"], rows["dead_head"]
    assert plain["searches_per_step"] == 0 and plain["search_ms"] == 0
    assert on["searches_per_step"] == dead["searches_per_step"] == 1     # one graph search a step
    # "mlp-small" fits one bucket: 1 gradient all-reduce; the flag adds the used-parameter map's
    assert plain["allreduces_per_step"] == 1
    assert on["allreduces_per_step"] == dead["allreduces_per_step"] == 2
    width = scaling.MODELS["mlp-small"][0]
    assert dead["dead_params"] == width * scaling.CLASSES + scaling.CLASSES
    assert plain["dead_params"] == on["dead_params"] == 0
    assert "extra traversal of the autograd graph" in measured["warning"]


@pytest.mark.parametrize("kw, says", [
    ({"nprocs": 1}, "needs 2\\+ ranks"),
    ({"nprocs": 0}, "nranks_list"),
    ({"model": "resnet"}, "model="),
    ({"steps": 0}, "steps="),
    ({"profiled": 0}, "profiled="),
    ({"backend": "mpi"}, "backend="),
])
def test_bad_input_is_one_value_error(monkeypatch, kw, says):
    import dtlab.runtime.launch as launch

    monkeypatch.setattr(launch, "run", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(ValueError, match=says):
        unused.cost(**kw)
