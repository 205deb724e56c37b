"""``dtlab capstone train`` with bad input: one line, exit status 2, nothing launched."""

import subprocess
import sys

import pytest

from dtlab.cli import main

CASES = {
    "size": (["--size", "huge"], "--size 'huge' is not one of: tiny, small, 1b"),
    "steps": (["--steps", "0"], "--steps 0 must be a whole number >= 1"),
    "nprocs": (["--nprocs", "0"], "--nprocs 0: give at least 1"),
    "backend": (["--backend", "foo"], "--backend 'foo' is not one of"),
    "data": (["--data", "words"], "--data 'words' is not one of: text, random"),
    "seq": (["--seq", "-4"], "--seq -4 must be a whole number >= 1"),
    "1b_on_gloo": (["--size", "1b", "--backend", "gloo"],
                   "--size 1b needs GPUs (the NCCL backend): on CPU (gloo) it runs for many "
                   "minutes; use --size tiny on CPU."),
    "small_on_gloo": (["--size", "small", "--backend", "gloo", "--nprocs", "1"],
                      "--size small needs GPUs"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, capsys, no_orphans):
    argv, words = CASES[case]
    assert main(["capstone", "train", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("dtlab capstone train: ") and words in err, err


@pytest.mark.slow
def test_the_parser_needs_no_torch_and_train_stays_the_function():
    """Every dtlab command builds a parser that lists the capstone's: it imported torch (2.7 s
    of CPU) until the package's names became lazy; and `train` must stay the function even when
    the submodule of that name is imported first (08's notebook got the module)."""
    code = ("import sys, types\nimport dtlab.cli\ndtlab.cli.build_parser(only='capstone')\n"
            "assert 'torch' not in sys.modules, 'the parser imported torch'\n"
            "import dtlab.capstone.train\nfrom dtlab.capstone import train\n"
            "assert callable(train) and not isinstance(train, types.ModuleType), train\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _summary(steps):
    return {"size": "tiny", "n_params": 1e6, "world": 1, "backend": "gloo", "data": "text",
            "config": {"batch": 2, "seq": 8}, "losses": [1.0] * steps,
            "ranks": [{"rank": 0, "device": "cpu", "step_s": 0.01, "tokens_per_s": 1600.0,
                       "peak_bytes": None, "matmul_flops": None}]}


def test_the_summary_says_when_its_step_time_is_from_warm_up_steps_only():
    from dtlab.capstone.train import WARMUP_STEPS, format_summary

    few = format_summary(_summary(WARMUP_STEPS))
    assert "ms/step: from warm-up steps only" in few and "median after" not in few, few
    assert f"ms/step: median after {WARMUP_STEPS} warm-up steps" in \
        format_summary(_summary(WARMUP_STEPS + 1))


@pytest.mark.parametrize("sub", ["train", "baseline", "hang"])
def test_help_has_a_description_an_exit_status_and_says_where_out_goes(sub, capsys):
    assert main(["capstone", sub, "--help"]) == 0
    out = capsys.readouterr().out
    first = out.split("\n\n")[1]  # after the usage block
    assert not first.startswith("options:"), out
    assert "exit status: 0 done, 2 bad input" in out
    if sub != "train":
        flat = " ".join(out.split())
        assert "temporary" not in flat and "under ./dtlab-evidence/" in flat, out
