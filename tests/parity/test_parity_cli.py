"""``dtlab parity``: bad input is one line and exit 2 with nothing launched; --json has the keys
the issue names. ``pytest tests/parity/test_cli.py``"""

import json

import pytest

from dtlab import cli


@pytest.mark.parametrize("argv, says", [
    (["--bug", "sum_los"], "--bug 'sum_los' is not one of: none, no_sampler"),
    (["--nprocs", "1"], "--nprocs 1: parity compares 2 to 8 ranks with one process: give 2"),
    (["--steps", "0"], "--steps 0 must be a whole number >= 1"),
    (["--dtype", "float16"], "--dtype 'float16'"),
    (["--fsdp", "--bug", "batchnorm"], "--fsdp takes no --bug/--fix"),
    (["--backend", "nccl"], "needs CUDA GPUs"),
])
def test_bad_input_is_one_line_exit_2(capsys, monkeypatch, argv, says):
    import dtlab.runtime.launch as launch

    monkeypatch.setattr(launch, "launch", lambda *a, **k: pytest.fail("launched"))
    assert cli.main(["parity", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtlab parity: ") and says in err and err.count("\n") == 1


@pytest.mark.slow
def test_json_keys_and_a_caught_bug_in_float32(capsys, no_orphans):
    assert cli.main(["parity", "--bug", "no_sync_missing", "--backend", "gloo", "--steps", "3",
                     "--dtype", "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("parity", "max_abs_diff", "tolerance", "loss_single", "loss_distributed",
                "allreduce_calls", "error"):
        assert key in out
    assert out["parity"] is True and out["allreduce_calls"] == 6 and out["error"] is None
    assert out["tolerance"] == 1e-5 and out["max_abs_diff"] < 1e-6 and out["dtype"] == "float32"
    assert len(out["loss_single"]) == len(out["loss_distributed"]) == 3
