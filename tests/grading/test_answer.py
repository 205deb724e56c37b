"""A learner's function called from a test cell (dtlab.course.answer), rebuilt in a process of its
own -- in a sandbox from the submission's source when graded, in a plain child in JupyterLab --
in a world without the exercise's modules (dtlab.course.world)."""

import linecache
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from dtlab.course import context, world
from dtlab.course.answer import Answer, folder
from dtlab.course.learner import NotPlain

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CELLS = {
    "imports": "import os\nimport re\nimport dtlab.bench as bench\n",
    "slow": "def slow(m, f=0.75):\n    print('thinking', len(m))\n"
            "    return sorted([i, j] for i, r in enumerate(m) for j, v in enumerate(r) if v and v < f * 100)\n",
    "cheat": "def cheat():\n    return bench.busbw('all_reduce', 8, 1.0, 2)\n",
    "spin": "def spin():\n    while True:\n        pass\n",
    "sleepy": "def sleepy():\n    import time\n    time.sleep(600)\n",
    "reads": "def reads(path):\n    return sorted(os.listdir(path)) + [open(os.path.join(path, 'a.txt')).read()]\n",
    "kinds": "def kinds(df, failures, t):\n"
             "    return [list(df.columns), int(df['x'].sum()), sorted(failures), type(t).__name__]\n",
    "numpy_int": "def numpy_int():\n    import numpy as np\n    return np.int64(3)\n",
    "raises": "def raises():\n    raise KeyError('length')\n",
    "broken": "def broken(:\n    pass\n",
    "leaks": "def leaks():\n    return expected   # a test's variable: not here\n",
}


@pytest.fixture
def graded(tmp_path, monkeypatch):
    """A grading context over CELLS (the imports cell, then one solution cell per function)."""
    cells = [{"source": CELLS["imports"], "solution": False}] + [
        {"source": src, "solution": True} for k, src in CELLS.items() if k != "imports"]
    ctx = context.Context("99_test", cells, str(tmp_path), cpu_s=5.0)
    path = str(tmp_path / "context.json")
    ctx.save(path)
    monkeypatch.setenv(context.ENV, path)
    return ctx


@pytest.mark.sandbox
def test_graded_answers_in_plain_data_and_names_what_went_wrong(graded, tmp_path, capsys, no_orphans):
    with Answer("slow") as slow:
        assert slow([[None, 50], [120, None]]) == [[0, 1]]
    assert "thinking 2" in capsys.readouterr().out  # its prints reach the test's output
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "a.txt").write_text("evidence")
    with Answer("reads") as reads:
        assert reads(folder(str(tmp_path / "ev"))) == ["a.txt", "evidence"]
    with Answer("kinds") as kinds:
        df = pd.DataFrame({"x": [1, 2], "y": ["a", "b"]})
        assert kinds(df, {2: "tb", 0: "tb"}, (1, 2)) == [["x", "y"], 3, [0, 2], "tuple"]
    with Answer("numpy_int") as numpy_int, pytest.raises(NotPlain, match="numpy.int64"):
        numpy_int()
    with Answer("raises") as raises, pytest.raises(
            AssertionError, match=r"(?s)raises\(\) raised.*KeyError: 'length'"):
        raises()
    with pytest.raises(AssertionError, match="SyntaxError"):
        Answer("broken")  # fails as it is rebuilt: nothing to close
    with Answer("leaks") as leaks, pytest.raises(AssertionError, match="name 'expected' is not defined"):
        leaks()
    with pytest.raises(AssertionError, match="no solution cell of this notebook defines nothing"):
        Answer("nothing")


def busbw():
    from dtlab.bench import busbw as theirs

    return theirs("all_reduce", 8, 1.0, 2)


@pytest.mark.sandbox
def test_graded_world_lacks_the_exercise_modules(graded, no_orphans):
    with Answer("cheat", without=("dtlab.bench",)) as cheat, pytest.raises(
            AssertionError, match=r"(?s)NameError: name 'bench' is not defined.*"
                                  r"not available while this exercise is graded: dtlab\.bench"):
        cheat()
    with Answer("cheat") as cheat:
        assert cheat() == busbw()  # with it there, the library answers


@pytest.mark.slow
@pytest.mark.sandbox
def test_graded_limits_are_cpu_and_idle_time_not_the_clock(graded, no_orphans):
    with Answer("spin") as spin, pytest.raises(AssertionError, match="used more than 5 s of CPU time"):
        spin()
    with Answer("sleepy", idle_s=3) as sleepy, pytest.raises(AssertionError, match="used no CPU for 3 s"):
        sleepy()


def test_in_jupyterlab_the_cell_is_rebuilt_with_the_kernels_imports(monkeypatch, no_orphans):
    monkeypatch.delenv(context.ENV, raising=False)
    cell = "<ipython-input-cheat>"
    source = CELLS["cheat"]
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)  # as IPython keeps it
    ns = {"__name__": "__main__"}
    exec(compile("import dtlab.bench as bench\n", "<imports>", "exec"), ns)
    exec(compile(source, cell, "exec"), ns)
    try:
        with Answer("cheat", caller=ns) as cheat:
            assert cheat() == busbw()
        with Answer("cheat", without=("dtlab.bench",), caller=ns) as cheat, pytest.raises(
                AssertionError, match="not available while this exercise is graded"):
            cheat()
    finally:
        del linecache.cache[cell]


def test_world_replaces_absent_modules_with_stubs(tmp_path):
    w = world.world(("dtlab.bench", "dtlab.hang.diagnose.verdict", "torch"), cache=str(tmp_path))
    root = w.pythonpath
    assert not [f for _, _, fs in os.walk(root) for f in fs if f.endswith(".pyc")]
    code = ("import importlib, json\nout = {}\n"
            "for m in ('dtlab.bench', 'dtlab.hang.diagnose.verdict', 'torch', 'dtlab.hang.diagnose.load'):\n"
            "    try:\n        importlib.import_module(m); out[m] = 'ok'\n"
            "    except ModuleNotFoundError as e:\n        out[m] = e.name\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert done.stdout.strip() == ('{"dtlab.bench": "dtlab.bench", "dtlab.hang.diagnose.verdict": '
                                   '"dtlab.hang.diagnose.verdict", "torch": "torch", '
                                   '"dtlab.hang.diagnose.load": "ok"}'), done.stderr
    assert (os.path.join(root, "dtlab"), world.DTLAB_DIR) in w.binds


@pytest.mark.parametrize("bad", ["numpy.linalg", "dtlab.nothing_here", "not a name"])
def test_world_refuses_what_it_cannot_take_away(bad, tmp_path):
    with pytest.raises(ValueError, match="without"):
        world.world((bad,), cache=str(tmp_path))


def test_encode_decode_round_trip():
    from dtlab.course.learner import decode, encode

    value = {"a": (1, 2.5), "$x": [None, True], "m": {1: "one"}}
    assert decode(encode(value)) == value
    assert isinstance(decode(encode((1,))), tuple)


def test_worlds_of_an_earlier_dtlab_are_pruned_once_idle(tmp_path):
    """Each edit of dtlab makes new worlds; the old ones go once nobody has used them for an hour
    (they were 512 MB on a developer's machine after a day)."""
    stale, recent, half = (tmp_path / "world-0000000000000000-aa", tmp_path / "world-1111111111111111-bb",
                           tmp_path / "building-xyz")
    for d in (stale, recent, half):
        d.mkdir()
    for d in (stale, half):
        os.utime(d, (0, 0))
    w = world.world(("dtlab.bench",), cache=str(tmp_path))
    assert not stale.exists() and not half.exists() and recent.exists()
    os.utime(w.root, (0, 0))
    assert world.world(("dtlab.bench",), cache=str(tmp_path)).root == w.root
    assert time.time() - os.stat(w.root).st_mtime < 60  # in use: touched, not pruned


def test_what_an_answer_prints_is_all_out_when_it_is_closed(monkeypatch, capsys, no_orphans):
    """Sixth red team: what a process printed just before it was closed (a pipe enlarged to
    1 MiB holds it all) was still being copied after close() returned, into whichever cell ran
    next -- before that cell's hidden tests begin, so into the feedback. close() now returns
    once everything is written."""
    monkeypatch.delenv(context.ENV, raising=False)
    cell = "<ipython-input-late>"
    source = ("def late():\n    import fcntl, sys\n"
              "    try:\n        fcntl.fcntl(2, 1031, 1 << 20)  # F_SETPIPE_SZ\n"
              "    except OSError:\n        pass\n"
              "    for k in range(1000):\n        print('late', k, 'x' * 1000, file=sys.stderr)\n"
              "    return 1\n")
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    ns = {"__name__": "__main__"}
    exec(compile(source, cell, "exec"), ns)
    try:
        with Answer("late", caller=ns) as late:
            assert late() == 1
        assert "late 999 " in capsys.readouterr().out
    finally:
        del linecache.cache[cell]


def test_the_graders_checks_are_absent_from_every_world(tmp_path):
    """dtlab.course.checks (the test cells' machinery, reference answers among it) is a stub in a
    world of any exercise, even one that takes nothing away."""
    root = world.world((), cache=str(tmp_path)).pythonpath
    code = ("import importlib\ntry:\n    importlib.import_module('dtlab.course.checks.parity')\n"
            "except ModuleNotFoundError as e:\n    print(e.name)\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert done.stdout.strip() == "dtlab.course.checks", done.stderr
    assert not os.path.exists(os.path.join(root, "dtlab", "course", "checks", "parity.py"))
