"""course.isolated: a learner's function in a fresh process that cannot see the test, with the
library refused for good and the ways around a refusal closed (dtlab/course/isolate.py, guard.py).

Each case is a learner's function that tries one way to the library's answer or the test's, in
a child of its own that refuses dtlab.bench.formulas (no torch to import: a quick child;
c_lookup imports torch after the hook is armed, as a learner's lazy import would).
"""

from __future__ import annotations

import os
import sys
import types

import pytest

import dtlab.bench.formulas as formulas
import dtlab.runtime.errors as errors
from conftest import assert_no_descendants
from dtlab import course
from dtlab.course.recorded import data_root
from dtlab.course.review import flags

SOURCE = open(formulas.__file__).read()
COPY = types.FunctionType(formulas.busbw.__code__, formulas.__dict__)
PATTERNS = [v for v in vars(errors).values() if type(v).__name__ == "Pattern"]
DATA = os.path.join(data_root(), "h200x2-nccl-tests", "nt_all_reduce.txt")


def honest(op, size, us, n):
    print("computing", op, "on", n, "ranks")
    return size / (us * 1e-6) / 1e9 * {"all_reduce": 2 * (n - 1) / n}[op]


def library(op, size, us, n):
    return formulas.busbw(op, size, us * 1e-6, n)


def frames(op, size, us, n):  # the test's variables, one frame up
    return sys._getframe(1).f_locals.get("want")


def reloaded(op, size, us, n):
    import importlib

    return importlib.reload(formulas).busbw(op, size, us * 1e-6, n)


def purged(op, size, us, n):
    for name in [m for m in sys.modules if m.startswith("dtlab.bench")]:
        del sys.modules[name]
    import dtlab.bench.formulas as fresh

    return fresh.busbw(op, size, us * 1e-6, n)


def source_read(op, size, us, n):
    ns = {"__name__": "copy"}
    exec(open(formulas.__file__).read(), ns)
    return ns["busbw"](op, size, us * 1e-6, n)


def source_carried(op, size, us, n):  # the source, read in the kernel before the test
    ns = {"__name__": "copy"}
    exec(SOURCE, ns)
    return ns["busbw"](op, size, us * 1e-6, n)


def reflected(op, size, us, n):  # the library's code object, carried in a new function
    return COPY(op, size, us * 1e-6, n)


def regex(op, size, us, n):  # a refused module's pattern, carried
    return PATTERNS[0].pattern


def program(op, size, us, n):
    import subprocess

    return subprocess.check_output([sys.executable, "-m", "dtlab", "--help"]).decode()[:10]


def system(op, size, us, n):
    return os.system("true")


def spawned(op, size, us, n):
    import multiprocessing

    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()
    return 1


def c_library(op, size, us, n):
    import ctypes

    return ctypes.CDLL("libc.so.6").getpid()


def c_lookup(op, size, us, n):  # a Python package's own library, asked for libc's system()
    import ctypes

    import torch

    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                   "libtorch_global_deps.so"))
    return lib.system(b"true")


def collector(op, size, us, n):
    import gc

    return len(gc.get_objects())


def recorded(op, size, us, n):
    return open(DATA).read()[:10]


def linked(op, size, us, n):  # another name for a recorded file
    link = os.path.join(os.environ["TMP_FOR_LINK"], "nt.txt")
    os.symlink(DATA, link)
    return open(link).read()[:10]


WAYS = [frames, library, reloaded, purged, source_read, source_carried, reflected, program,
        system, spawned, c_library, c_lookup, collector, recorded, linked]


def test_an_honest_function_answers_in_plain_data(capsys):
    with course.isolated(honest, refuse=("dtlab.bench.*",)) as mine:
        assert mine("all_reduce", 1 << 30, 4000.0, 8) == pytest.approx(469.762048)
        assert mine("all_reduce", 1 << 30, 4000.0, 2) == pytest.approx(268.435456)
    assert "computing all_reduce on 8 ranks" in capsys.readouterr().out  # its prints are shown
    assert_no_descendants()


@pytest.mark.parametrize("way", WAYS, ids=lambda f: f.__name__)
def test_every_way_around_fails(way, tmp_path, monkeypatch):
    monkeypatch.setenv("TMP_FOR_LINK", str(tmp_path))
    want = 469.762048  # noqa: F841  (what `frames` looks for)
    with course.isolated(way, refuse=("dtlab.bench.formulas",)) as mine:
        try:
            got = mine("all_reduce", 1 << 30, 4000.0, 8)
        except AssertionError as err:
            assert "refused while your answer is graded" in str(err), err
        else:
            assert got != pytest.approx(469.762048), f"{way.__name__} found the answer: {got}"
    assert_no_descendants()


def test_a_carried_pattern_of_a_refused_module_is_named():
    with course.isolated(regex, refuse=("dtlab.runtime.errors",)) as mine:
        with pytest.raises(AssertionError, match=r"carries a copy of the pattern "
                                                 r"dtlab\.runtime\.errors\._"):
            mine("all_reduce", 1, 1.0, 2)


def test_not_plain_data_and_exceptions_come_back_as_such():
    class Yes(float):
        def __eq__(self, other):
            return True

    def fancy(x):
        return Yes(x)

    def broken(x):
        return {"a": 1}[x]

    with course.isolated(fancy) as mine, pytest.raises(course.NotPlain):
        mine(1.0)
    with course.isolated(broken) as mine, pytest.raises(AssertionError, match=r"KeyError: 'b'"):
        mine("b")


def test_a_function_that_does_not_return_is_ended():
    import time

    def forever(x):
        while True:
            time.sleep(0.05)

    mine = course.isolated(forever, timeout=1.5)
    with pytest.raises(AssertionError, match=r"did not return within 1.5 s"):
        mine(1)
    assert_no_descendants()


def test_review_flags_rewriting_the_grader_and_reading_frames():
    # what isolation cannot stop, in the kernel: the grader rewritten, then the test's frame read
    b_and_f = ("import sys\nfrom dtlab import course\n"
               "course.isolated = lambda fn, refuse=(), timeout=0: fn\n"
               "setattr(course, 'plain', lambda v, *a: v)\n"
               "def root_cause(failures):\n"
               "    return sys._getframe(2).f_code.co_consts[0]\n")
    assert flags(b_and_f) == [
        "line 3: rebinds course.isolated (the grader)",
        "line 4: rebinds an attribute of course (the grader)",
        "line 6: reads compiled code (co_consts)", "line 6: reads interpreter frames (_getframe)"]
    honest_answer = "def root_cause(failures):\n    return min(failures, key=lambda r: len(failures[r]))\n"
    assert flags(honest_answer) == []


def test_review_flags_reaching_other_processes_and_later_code():
    # the grader's own broken runs watched through /proc by a thread left behind; an answer key
    # planted in a .pth file that every later Python process runs
    watcher = ("import threading, atexit, sysconfig\n"
               "def watch():\n    open('/proc/123/cmdline').read()\n"
               "threading.Thread(target=watch).start()\n"
               "atexit.register(print)\n"
               "open(sysconfig.get_paths()['purelib'] + '/zz.pth', 'w')\n")
    assert flags(watcher) == [
        "line 3: reads other processes (/proc)",
        "line 4: starts a thread that outlives the call (Thread)",
        "line 5: runs code at interpreter exit (atexit)",
        "line 6: locates the interpreter's install paths (get_paths)",
        "line 6: names a .pth file (code every later Python process runs)",
        "line 6: names the interpreter's install paths"]


def test_read_only_refuses_writing_moving_and_deleting(tmp_path):
    import os

    (tmp_path / "in.txt").write_text("evidence")

    def reads(folder):
        return open(os.path.join(folder, "in.txt")).read()

    def writes(folder):
        with open(os.path.join(folder, "zz.pth"), "w") as f:
            f.write("import os")

    def creates(folder):
        os.close(os.open(os.path.join(folder, "note"), os.O_WRONLY | os.O_CREAT))

    def moves(folder):
        os.replace(os.path.join(folder, "in.txt"), os.path.join(folder, "hang.py"))

    with course.isolated(reads, read_only=True) as mine:
        assert mine(str(tmp_path)) == "evidence"
    for fn in (writes, creates, moves):
        with course.isolated(fn, read_only=True) as mine, \
                pytest.raises(AssertionError, match="refused while your answer is graded"):
            mine(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
    with course.isolated(writes) as mine:   # without read_only: allowed, as before
        mine(str(tmp_path))
    assert (tmp_path / "zz.pth").exists()
    assert_no_descendants()
