"""A learner's function, run for a graded test in a fresh Python process that cannot see the test.

A test cell runs in the learner's kernel, so whatever the learner's function can reach there, it
can read: the test's own variables (``sys._getframe(1).f_locals``), the literals of its code
(``co_consts``), the library before ``refused`` swaps it. :func:`isolated` moves the learner's
function out of that reach::

    with course.isolated(bus_bandwidth, refuse=("dtlab.bench.*",)) as mine:
        got = mine("all_reduce", 1 << 30, 4000.0, 8)     # plain data, computed over there

Lifecycle (one child per ``isolated``; nothing outlives it)::

    kernel                                   child: python -c <bootstrap> (this module's _child)
    isolated(fn, refuse)  -- fn, targets -->  import targets; fingerprint them; refuse them for
                                              good (originals dropped); audit hook armed
    mine(*args)           -- args ------->   fn(*args) -> plain() -> JSON
                          <-- result ------  (or the exception, as text)
    close() / with-exit   -- EOF --------->  exits; the kernel kills it after 5 s, or on timeout

What the child refuses once armed (an audit hook, PEP 578, which cannot be removed):
starting programs or processes (subprocess, os.system/exec*/spawn*/fork, multiprocessing, pty);
through ``ctypes``, loading a C library that is not a Python package's own, or looking up one of
its functions that start programs; the garbage collector's lists of objects; importing a refused module afresh and opening its source or compiled file (``importlib.reload``,
``exec(open(...).read())``); opening the course's recorded data (the answers live there);
executing code that is a copy of a refused function (same bytecode and constants: copied from
the library by reflection or pasted from its source). The learner's function may also not carry
such a copy, or a regular expression of a refused module, captured in the kernel before the test. What the child receives is the learner's function (by
value, with what it references) and each call's arguments: the test's expected answers never
enter it. What the test cell does in the kernel is out of this module's reach: a learner who
rewrites the grader there is what ``dtlab course autograde``'s review flags are for
(:mod:`dtlab.course.review`).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import traceback
from typing import Any, Callable

from .checks import NotPlain, plain

_BOOT = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
         "from dtlab.course.isolate import _child; _child()")


class Isolated:
    """The learner's function in its own process: call it like the function; the answer comes
    back as plain data (:func:`dtlab.course.plain`), an exception as ``AssertionError`` (or
    :class:`NotPlain`) with the learner's traceback in its text."""

    def __init__(self, fn: Callable, refuse: tuple[str, ...] = (), timeout: float = 120.0,
                 read_only: bool = False):
        import cloudpickle

        self._proc = None
        self.name = getattr(fn, "__name__", "your function")
        self.timeout = timeout
        # the child's stdin/stdout carry the calls; what the learner prints arrives on stderr
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd(), start_new_session=True)
        self._echo = threading.Thread(target=_forward, args=(self._proc.stderr,), daemon=True)
        self._echo.start()
        self._send(cloudpickle.dumps((fn, tuple(refuse), read_only)))
        self._answer()  # the child is armed (or said why not)

    def __call__(self, *args, **kwargs) -> Any:
        import cloudpickle

        if self._proc is None:
            raise RuntimeError(f"isolated({self.name}) is closed")
        self._send(cloudpickle.dumps((args, kwargs)))
        return self._answer()

    def _send(self, blob: bytes) -> None:
        try:
            self._proc.stdin.write(struct.pack("!Q", len(blob)) + blob)
            self._proc.stdin.flush()
        except BrokenPipeError:
            self._gone()

    def _answer(self) -> Any:
        out = self._proc.stdout
        done = threading.Event()
        timer = threading.Timer(self.timeout, lambda: done.is_set() or self._proc.kill())
        timer.start()
        try:
            head = out.read(8)
            blob = out.read(struct.unpack("!Q", head)[0]) if len(head) == 8 else b""
        finally:
            done.set()
            timer.cancel()
        if not blob:
            self._gone()
        how, value = json.loads(blob)
        if how == "ok":
            return value
        kind, text = value
        if kind == "NotPlain":
            raise NotPlain(text)
        raise AssertionError(f"{self.name} raised {text}")

    def _gone(self):
        proc, self._proc = self._proc, None
        code = proc.poll()
        self._close(proc)
        if code is None or code in (-9, 137):
            raise AssertionError(f"{self.name} did not return within {self.timeout:g} s") from None
        raise AssertionError(f"{self.name}'s process ended (exit status {code}) without an "
                             "answer") from None

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            self._close(proc)

    @staticmethod
    def _close(proc: subprocess.Popen) -> None:
        try:
            proc.stdin.close()  # EOF: the child's loop ends
        except OSError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def __enter__(self) -> "Isolated":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


def isolated(fn: Callable, refuse: tuple[str, ...] | list[str] = (), timeout: float = 120.0,
             read_only: bool = False) -> Isolated:
    """``fn`` in a fresh process with ``refuse`` (:func:`dtlab.course.refused`'s targets) and
    starting programs refused for good; see the module's docstring for all it refuses.
    ``read_only``: also refuse writing, creating, moving or deleting any file, for a function
    that only reads (an evidence folder): it can then leave nothing behind for a later process
    (a ``.pth`` file, a note in the next input) to carry an answer."""
    return Isolated(fn, tuple(refuse), timeout, read_only)


def _forward(stream) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.write(line.decode(errors="replace"))
    stream.close()


# ---- the child ---------------------------------------------------------------------------

def _child() -> None:
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # the learner's prints go to stderr, which the kernel shows
    reader = os.fdopen(rfd, "rb")

    def read():
        head = reader.read(8)
        return reader.read(struct.unpack("!Q", head)[0]) if len(head) == 8 else None

    def send(how, value):
        blob = json.dumps([how, value]).encode()
        view = memoryview(struct.pack("!Q", len(blob)) + blob)
        while view:
            view = view[os.write(wfd, view):]

    import cloudpickle

    from . import guard
    try:
        fn, targets, read_only = cloudpickle.loads(read())
        copied = guard.arm(fn, targets, read_only)
    except BaseException as e:  # a target that does not exist, a function that cannot load
        send("raise", [type(e).__name__, f"{type(e).__name__}: {e}"])
        return
    send("ok", None)
    while (blob := read()) is not None:
        try:
            if copied:
                raise AssertionError(f"it carries a copy of {copied}, which is refused while "
                                     "your answer is graded: work it out in your own code")
            args, kwargs = cloudpickle.loads(blob)
            send("ok", plain(fn(*args, **kwargs)))
        except NotPlain as e:
            send("raise", ["NotPlain", str(e)])
        except BaseException as e:
            te = traceback.TracebackException.from_exception(e)
            te.stack = traceback.StackSummary.from_list(te.stack[1:])  # not this loop's frame
            send("raise", [type(e).__name__, "".join(te.format()).strip()])
