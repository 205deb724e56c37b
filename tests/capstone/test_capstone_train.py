"""The tiny Llama trains under FSDP2 on 2 gloo ranks and its loss falls (one launch, ~9 s on
2 CPU cores).

    .venv/bin/python -m pytest tests/capstone -q --durations=10

Measured (torch 2.13 CPU, Python 3.11 stdlib as text, seed 0): the rank-averaged loss goes from
~5.6 (ln 256 = 5.55: uniform over bytes) to ~3.0 in 30 steps; mean of the first 5 steps 4.96,
of the last 5 steps 3.00. The test asks for a drop of at least 1.0 nat.

The same launch runs the notebook's view: rank 0's steps go to the bar (``progress="bar"``)
instead of its stderr, and a GPU panel with a fake reader (no GPU here) polls around it.
"""

import io
import math
import statistics

import pytest

from conftest import assert_no_descendants
from dtlab.capstone import CONFIGS, n_params, train
from dtlab.monitor import GpuPanel

pytestmark = pytest.mark.slow  # every test shares one 2-rank training run

STEPS = 30


class FakeGpus:
    source = "fake"

    def read(self):
        return [{"gpu": g, "name": "fake GPU", "util": 50.0, "mem_used": 1024.0 * (g + 1),
                 "mem_total": 8192.0} for g in (0, 1)]

    def close(self):
        pass


@pytest.fixture(scope="module")
def run():
    panel = GpuPanel(interval=0.2, reader=FakeGpus(), notebook=False, stream=io.StringIO())
    s = train("tiny", STEPS, nprocs=2, backend="gloo", timeout=120, progress="bar", panel=panel)
    assert_no_descendants()
    return s, panel


@pytest.fixture(scope="module")
def summary(run):
    return run[0]


def test_loss_falls(summary):
    losses = summary["losses"]
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(256), abs=0.3)   # a fresh model: uniform bytes
    first, last = statistics.mean(losses[:5]), statistics.mean(losses[-5:])
    assert last < first - 1.0, (first, last)


def test_ranks_see_different_data_and_log_the_mean(summary):
    r0, r1 = (r["local_losses"] for r in summary["ranks"])
    assert r0 != r1
    for step in (0, STEPS // 2, STEPS - 1):
        assert summary["losses"][step] == pytest.approx((r0[step] + r1[step]) / 2, rel=1e-6)


def test_parameters_are_sharded_across_the_two_ranks(summary):
    total = n_params(CONFIGS["tiny"])
    assert summary["n_params"] == total
    held = [r["local_numel"] for r in summary["ranks"]]
    assert sum(held) == total and max(held) < 0.6 * total    # FSDP2: about half each


def test_measurements_per_rank(summary):
    cfg = summary["config"]
    assert summary["world"] == 2 and summary["backend"] == "gloo"
    for r in summary["ranks"]:
        assert r["step_s"] > 0
        assert r["tokens_per_s"] == pytest.approx(cfg["batch"] * cfg["seq"] / r["step_s"])
        assert r["peak_bytes"] is None and r["matmul_flops"] is None and r["mfu"] is None  # CPU
        assert r["gpu"] is None and r["of_matmul"] is None


def test_the_bar_saw_every_step_and_the_panel_stopped(run):
    s, panel = run
    bar = panel.progress
    assert bar.last["step"] == bar.last["steps"] == STEPS
    assert bar.last["loss"] == pytest.approx(s["losses"][-1])
    assert bar.first_loss == pytest.approx(s["losses"][0])
    # the bar ends on the table's figure: one definition of ms/step (median after the warm-up)
    assert bar.last["ms"] == pytest.approx(s["ranks"][0]["step_s"] * 1e3)
    assert bar.last["tok_s"] == pytest.approx(s["ranks"][0]["tokens_per_s"])
    assert not bar.last["warmup"]
    assert not panel.running
    last = panel.stream.getvalue().splitlines()[-1]    # the terminal's final compact line
    assert last.startswith(f"step {STEPS}/{STEPS} [") and "gpu 1 50% 2.0/8.0 GiB" in last
    gpus = s["gpu_panel"]["gpus"]
    assert s["gpu_panel"]["polls"] >= 1 and [g["mem_peak_mib"] for g in gpus] == [1024, 2048]
