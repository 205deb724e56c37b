"""A learner's function, called by a test cell from outside the learner's reach.

A test cell asks for the learner's function by name and calls it with plain data; the function
runs in a process of its own, rebuilt from the learner's solution cell, and only its answer
comes back, as plain data::

    slow_pairs = course.answer("slow_pairs", without=("dtlab.bench",))
    got = slow_pairs(matrix, 0.75)            # [[1, 2], ...]: lists, numbers, str, dicts
    classify = course.answer("classify")
    classify(course.folder(evidence))         # a folder goes in as a read-only copy

The process is built the same way in both places a test cell runs:

* **graded** (``dtlab course grade``; the kernel that runs the test cells holds the hidden data,
  and the learner's code never runs in it): in a sandbox (:mod:`dtlab.runtime.sandbox`) from the
  submission's source -- the import statements of the code cells above the solution cell, then
  the solution cell -- in the exercise's world (:mod:`dtlab.course.world`: ``without``'s modules
  absent), with a CPU budget per call that a busy machine does not change;
* **in JupyterLab**: in a plain child process, from the same cell's source (IPython keeps it) and
  the imports in the kernel, in the same world, so that a learner meets what grading will
  refuse before grading does.

Either way the arguments are copies (:func:`dtlab.course.learner.encode`): the function cannot
change the test's data, nor reach its variables; its answer must be plain data
(:func:`dtlab.course.plain`). A function that raises fails the test with its traceback.
"""

from __future__ import annotations

import atexit
import base64
import inspect
import linecache
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
import weakref
from typing import Any

from . import context as grading_context
from .learner import NotPlain, encode, pack, unpack_length
from .world import world

# the world's learner.py, run as a script (as ``python -I learner.py``): the standard library
# until it has read the solution
LEARNER_MAIN = "runpy:run_path"
# what most solutions import: a zygote imports it once (dtlab.runtime.zygote), each answer's
# process is forked from it
PRELOAD = ["numpy", "pandas", "cloudpickle"]
SANDBOX_HOME = "/home/learner"
SANDBOX_INPUTS = "/inputs"
IDLE_S = 60.0          # a call that uses no CPU for this long is waiting for nothing
WALL_BACKSTOP_S = 1800.0
OUTPUT_LINES = 2000    # of the learner's prints shown per process; the rest is counted
MAX_LINE = 4096        # characters of one printed line kept (a line without end is cut)


class Folder:
    """A folder given to a learner's function: a read-only copy goes in (:func:`folder`)."""

    def __init__(self, path: str):
        if not os.path.isdir(path):
            raise ValueError(f"course.folder({path!r}): no such folder")
        self.path = os.path.abspath(path)


def folder(path: str) -> Folder:
    """Mark ``path`` as a folder argument: the learner's function gets a path to a read-only copy
    of it (in a sandbox, under /inputs), never the test's own folder."""
    return Folder(path)


def answer(name: str, *, without: tuple[str, ...] | list[str] = (), also: tuple[str, ...] = (),
           cpu_s: float | None = None, idle_s: float = IDLE_S) -> "Answer":
    """The learner's function ``name``, ready to call from a test cell (see the module).
    ``without``: modules absent from its world; ``also``: names the notebook's locked cells
    define that the learner is told to use (04's ``split_consoles``)."""
    return Answer(name, tuple(without), cpu_s, idle_s, caller=sys._getframe(1).f_globals,
                  also=tuple(also))


_LIVE: dict[str, "weakref.ref[Answer]"] = {}


def _close_all() -> None:
    for ref in list(_LIVE.values()):
        a = ref()
        if a is not None:
            a.close()


atexit.register(_close_all)


class Answer:
    """Call it like the function; each call's answer comes back as plain data. A process serves
    one handle; a new handle for the same function (a test cell run again) ends the older one's,
    and every one ends with the interpreter (a kernel, when restarted)."""

    def __init__(self, name: str, without: tuple[str, ...] = (), cpu_s: float | None = None,
                 idle_s: float = IDLE_S, caller: dict | None = None, also: tuple[str, ...] = ()):
        older = _LIVE.pop(name, None)
        if older is not None and older() is not None:
            older().close()
        self.name, self.also = name, also
        self.ctx = grading_context.current()
        self.cpu_s = float(cpu_s or (self.ctx.cpu_s if self.ctx else 60.0))
        self.idle_s = idle_s
        self.world = world(without)
        first = self._first_frame(caller)  # refused here, before anything starts, if not its own
        # under the grader's own folder, which it removes even when it kills this kernel
        self._inputs = tempfile.mkdtemp(prefix="dtlab-inputs-",
                                        dir=self.ctx.work if self.ctx else None)
        self._box = None
        self._proc = None
        self._forwarder = None  # the thread that copies its prints into the cell (_forward)
        self._printed = [0]
        self._start()
        _LIVE[name] = weakref.ref(self)
        self._talk(first, what=f"rebuilding {name}() from your solution cell")

    # -- the process ------------------------------------------------------------------------
    def _first_frame(self, caller: dict | None) -> dict:
        return {"name": self.name, "path": [],
                **learner_source(self.name, self.ctx, caller, self.also, self.world.without)}

    def _start(self) -> None:
        from ..runtime.zygote import Zygote

        zygote = Zygote.shared(self.world.keeping(PRELOAD))
        path = [self.world.pythonpath]  # in a sandbox too (bound where it is here)
        script = [os.path.join(self.world.pythonpath, "dtlab", "course", "learner.py"), None,
                  "__main__"]
        stdio = dict(stdin=True, separate_stderr=True)
        if self.ctx is None:  # JupyterLab: a plain child; the world comes first on its path
            self._proc = zygote.spawn(LEARNER_MAIN, script, env=dict(os.environ),
                                      cwd=self._inputs, path=path, **stdio)
        else:
            self._box = sandbox_box(self.ctx)
            self._proc = self._box.spawn_warm(zygote, LEARNER_MAIN, script, self._view(), path,
                                              **stdio)
        self._forwarder = threading.Thread(target=_forward, daemon=True,
                                           args=(self._proc.stderr, self.name, self._printed))
        self._forwarder.start()

    def _view(self):
        from ..runtime.sandbox import View

        root = self.world.pythonpath
        # no data/: its recorded folders carry their labels (diagnosis.json, the planted bug),
        # and an answer gets what it needs as its inputs
        ro = [*self.world.binds, (root, root), (self._inputs, SANDBOX_INPUTS)]
        env = {} if self.ctx.isolate else {"DTLAB_DATA": data_dir()}
        return View(ro=ro, home=SANDBOX_HOME, env=env)

    # -- calls --------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> Any:
        if self._proc is None:
            raise RuntimeError(f"{self.name}: this handle is closed")
        args, kwargs = self._inputs_of(args), {k: self._inputs_of([v])[0] for k, v in kwargs.items()}
        return self._talk({"args": encode(list(args)), "kwargs": encode(kwargs)},
                          what=f"{self.name}()")

    def _inputs_of(self, values) -> list:
        out = []
        for v in values:
            if isinstance(v, Folder):
                token = "case-" + uuid.uuid4().hex[:8]
                shutil.copytree(v.path, os.path.join(self._inputs, token), symlinks=False)
                v = os.path.join(SANDBOX_INPUTS if self._box else self._inputs, token)
            out.append(v)
        return out

    def _talk(self, doc: dict, what: str) -> Any:
        try:
            self._proc.stdin.write(pack(doc))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail(f"{what}: the process that runs your code is gone")
        reply = self._receive(what)
        if "ok" in reply:  # JSON: plain data already; never decoded (no tags from that side)
            return reply["ok"]
        kind, text = reply.get("raise", ["Error", "no answer"])
        if kind == "NotPlain":
            raise NotPlain(text)
        raise AssertionError(f"{what} raised:\n{text}")

    def _receive(self, what: str) -> dict:
        """One frame from the learner's process, while bounding its CPU and idle time."""
        from ..runtime.sandbox import tree_cpu_seconds

        fd = self._proc.stdout.fileno()
        buf, need = b"", None
        start_wall = last_move = time.monotonic()
        start_cpu = last_cpu = tree_cpu_seconds(self._proc.pid)
        while True:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = self._proc.wait()
                    self._fail(f"{what}: the process that runs your code ended (exit status "
                               f"{_exit(code)}) without an answer")
                buf += chunk
                if need is None and len(buf) >= 8:
                    try:
                        need = unpack_length(buf[:8])
                    except ValueError as e:
                        self._fail(f"{what}: {e}")
                if need is not None and len(buf) >= 8 + need:
                    import json

                    try:
                        return json.loads(buf[8:8 + need])
                    except (ValueError, RecursionError) as e:
                        self._fail(f"{what}: an answer that is not readable data ({e})")
                continue
            now, cpu = time.monotonic(), tree_cpu_seconds(self._proc.pid)
            if cpu - start_cpu > self.cpu_s:
                self._fail(f"{what} used more than {self.cpu_s:g} s of CPU time (the limit per "
                           f"call) and was stopped")
            if cpu > last_cpu + 0.01:
                last_cpu, last_move = cpu, now
            elif now - last_move > self.idle_s:
                self._fail(f"{what} used no CPU for {self.idle_s:g} s (waiting for something "
                           f"that never comes?) and was stopped")
            if now - start_wall > WALL_BACKSTOP_S:
                self._fail(f"{what} did not answer within {WALL_BACKSTOP_S:g} s and was stopped")

    def _fail(self, message: str):
        self.close()
        raise AssertionError(message) from None

    # -- the end ----------------------------------------------------------------------------
    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # EOF: the learner's loop ends
            except OSError:
                pass
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            from ..runtime.sandbox import kill_tree

            kill_tree(proc.pid)
            proc.wait()
        if self._box is not None:
            self._box.close()
            self._box = None
        # every line it printed is written out now, in the cell that closes it: one still on its
        # way would land in the next cell, before that cell's hidden tests begin, and reach the
        # feedback (sixth red team: 1 MiB printed just before the end)
        forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None and forwarder is not threading.current_thread():
            forwarder.join(10)
        shutil.rmtree(self._inputs, ignore_errors=True)

    def __enter__(self) -> "Answer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- helpers ----------------------------------------------------------------------------

def learner_source(name: str, ctx, caller: dict | None, also: tuple[str, ...] = (),
                   without: tuple[str, ...] = ()) -> dict:
    """What the learner's function ``name`` is rebuilt from: graded, the submission's solution
    cell, the imports above it and the course's locked cells that define ``also``; in
    JupyterLab, the same cell's source (IPython keeps it), the kernel's imports and its values
    of ``also``. A cell that is not the learner's own work (:mod:`.provenance`: the code of
    ``without``'s modules pasted or packed in) is refused, with why, in both."""
    if ctx is not None:
        solution, imports = ctx.solution_of(name)
        _own_work(solution, without)
        return {"imports": imports, "solution": solution, "cells": ctx.definitions(also)}
    ns = caller or vars(sys.modules["__main__"])
    fn = ns.get(name)
    if not callable(fn):
        raise AssertionError(f"{name} is not defined: run the cell that defines it first")
    out = _from_kernel(fn, ns)
    _own_work(out.get("solution", ""), without)
    if also:
        import cloudpickle

        missing = [n for n in also if n not in ns]
        if missing:
            raise AssertionError(f"{', '.join(missing)} not defined: run the notebook's cells above")
        out["values"] = base64.b64encode(cloudpickle.dumps({n: ns[n] for n in also})).decode()
    return out


def _own_work(solution: str, without) -> None:
    from .provenance import borrowed

    why = borrowed(solution, without)
    if why:
        raise AssertionError(why)


def data_dir() -> str:
    from .recorded import data_root

    return data_root()


def sandbox_box(ctx):
    """A sandbox box in the submission's cgroup (made and removed by ``dtlab course grade``)."""
    from ..runtime.cgroups import Cgroup
    from ..runtime.sandbox import Box, Limits

    cgroup = Cgroup(ctx.cgroup["dirs"], ctx.cgroup["version"]) if ctx.cgroup else None
    return Box(ctx.assignment, Limits(**ctx.limits) if ctx.limits else None,
               isolate=ctx.isolate, cgroup=cgroup, scratch=ctx.work)


def _from_kernel(fn, caller: dict) -> dict:
    """In JupyterLab: the function's cell (IPython keeps each cell's source) and the kernel's
    imports, as graded mode would rebuild it; a function without a cell goes by value."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "")
    entry = linecache.cache.get(filename)
    if entry is None or entry[1] is not None:  # IPython's cells are cached with no mtime
        import cloudpickle

        return {"pickled": base64.b64encode(cloudpickle.dumps(fn)).decode()}
    return {"imports": _kernel_imports(caller), "solution": "".join(entry[2])}


def _kernel_imports(ns: dict) -> list[str]:
    """``import x as y`` / ``from m import f as y`` for each name in ``ns`` bound to a module or
    to an object importable by name: what the kernel's imports made available."""
    out = []
    for name, value in ns.items():
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType):
            out.append(f"import {value.__name__} as {name}" if value.__name__ != name
                       else f"import {name}")
            continue
        module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if (isinstance(module, str) and isinstance(qual, str) and "." not in qual
                and module not in ("__main__", "builtins") and not module.startswith("__")
                and (inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value))
                and getattr(sys.modules.get(module), qual, None) is value):
            out.append(f"from {module} import {qual}" + (f" as {name}" if name != qual else ""))
    return out


def _forward(stream, name: str, printed: list[int]) -> None:
    """The learner's prints (its stderr) into the test cell's output, up to OUTPUT_LINES."""
    for line in iter(lambda: stream.readline(MAX_LINE), b""):
        printed[0] += 1
        if printed[0] <= OUTPUT_LINES:
            sys.stdout.write(line.decode(errors="replace"))
        elif printed[0] == OUTPUT_LINES + 1:
            sys.stdout.write(f"[{name}: more output than {OUTPUT_LINES} lines; the rest is not "
                             f"shown]\n")
    try:
        stream.close()
    except OSError:
        pass


def _exit(code: int) -> str:
    if code is not None and code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    if code == 137:
        return "137: killed, perhaps for using too much memory"
    return str(code)
