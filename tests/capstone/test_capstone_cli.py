"""``dtlab capstone train`` with bad input: one line, exit status 2, nothing launched."""

import subprocess
import sys

import pytest

from dtlab.cli import main

CASES = {
    "size": (["--size", "huge"], "--size 'huge' is not one of: tiny, small, 1b"),
    "steps": (["--steps", "0"], "--steps 0 must be a whole number >= 1"),
    "nprocs": (["--nprocs", "0"], "--nprocs 0 must be at least 1"),
    "backend": (["--backend", "foo"], "--backend 'foo' is not one of"),
    "data": (["--data", "words"], "--data 'words' is not one of: text, random"),
    "seq": (["--seq", "-4"], "--seq -4 must be a whole number >= 1"),
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
