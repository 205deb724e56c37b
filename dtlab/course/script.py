"""A learner's training script, run by a test cell on N ranks from outside the learner's reach.

An exercise whose answer is a whole script (00's ``train_ddp.py``) is written in a cell that
starts with ``%%writefile train_ddp.py``; a test cell runs it::

    run = course.script("train_ddp.py", nprocs=3, inputs={"data.pt": path},
                        args=["--data", "{inputs}/data.pt", "--out", "{out}", ...],
                        without=("dtlab.byhand",))
    run.codes            # each rank's exit code
    run.lines(0)         # what rank 0 printed, line by line
    run.files["model.pt"]   # bytes the script wrote under the folder ``{out}`` stands for
    run.console          # everything, labelled [default<r>]: as torchrun --tee 3 labels it

The script runs as torchrun would run it (:mod:`dtlab.course.torchrun_like`: the same
variables, ``__name__ == "__main__"``), its ranks forked from a process that has imported
torch. Graded (``dtlab course grade``), that process is in the submission's sandbox
(:mod:`dtlab.runtime.sandbox`: loopback only, the inputs read-only under ``/inputs``, the
script rebuilt from the submission's ``%%writefile`` cell, its output folder on the sandbox's
own bounded tmpfs); in JupyterLab it is a plain child running the file the cell wrote. Either
way its output comes back as data -- exit codes, console, files -- that the test judges in its
own process, and the job is bounded by its CPU time and by silence (no CPU used for
``idle_s``: ranks waiting for each other), not by the wall clock. Nothing it started outlives
the call.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, field

from . import context as grading_context
from .answer import (SANDBOX_HOME, SANDBOX_INPUTS, _exit, _forward, _own_work, receive,
                     sandbox_box)
from .learner import pack
from .world import world

OUT = SANDBOX_HOME + "/out"   # the script's output folder, graded (a tmpfs of its own)
# torch._dynamo: DDP's constructor imports it (800 modules, ~1.2 s a rank on a 2-core box);
# imported once in the zygote, a rank forked from it builds DDP at once
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch.nn.parallel", "torch.utils.data"]
MAX_FILES_BYTES = 32 << 20
_LABEL = re.compile(r"^\[default(\d+)\]:(.*)$")


@dataclass
class ScriptRun:
    """What the ranks did: exit codes, console (labelled lines), files under the output folder."""

    codes: list
    console: str
    files: dict[str, bytes] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c == 0 for c in self.codes)

    def lines(self, rank: int) -> list[str]:
        """Every line rank ``rank`` printed (stdout and stderr), in order."""
        out = []
        for ln in self.console.splitlines():
            m = _LABEL.match(ln)
            if m and int(m.group(1)) == rank:
                out.append(m.group(2))
        return out

    def failure(self) -> str:
        """One paragraph for a test's message: which ranks failed, and the end of their output."""
        bad = [r for r, c in enumerate(self.codes) if c != 0]
        if not bad:
            return ""
        tail = "\n".join(ln for r in bad[:1] for ln in self.lines(r)[-25:])
        return (f"rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} ended with exit "
                f"status {', '.join(_exit(self.codes[r]) for r in bad)}; rank {bad[0]}'s last "
                f"lines:\n{tail}")


def script(filename: str, nprocs: int = 2, args: list[str] | tuple = (),
           inputs: dict[str, str] | None = None, without: tuple[str, ...] | list[str] = (),
           cpu_s: float | None = None, idle_s: float = 30.0) -> ScriptRun:
    """Run the learner's ``filename`` on ``nprocs`` ranks with ``args`` (see the module).
    ``inputs``: {name: path here} of files the script reads, found in the folder ``{inputs}``
    stands for in ``args`` (``/inputs`` graded); ``{out}`` stands for its output folder. Raises
    AssertionError if the job had to be stopped (CPU, silence) or the script cannot be found."""
    if not isinstance(nprocs, int) or not 1 <= nprocs <= 8:
        raise ValueError(f"script: nprocs must be an int in 1..8, got {nprocs!r}")
    ctx = grading_context.current()
    wld = world(tuple(without))
    source = _source(filename, ctx)
    _own_work(source, wld.without)
    cpu_s = float(cpu_s or 60.0 * nprocs)
    work = tempfile.mkdtemp(prefix="dtlab-script-", dir=ctx.work if ctx else None)
    box, proc, forwarder = None, None, None
    printed, kept = [0], []
    try:
        folder = os.path.join(work, "inputs")
        os.makedirs(folder)
        for name, path in (inputs or {}).items():
            shutil.copyfile(path, os.path.join(folder, name))
        with open(os.path.join(folder, filename), "w") as f:
            f.write(source)
        from ..runtime.zygote import Zygote

        zygote = Zygote.shared(wld.keeping(PRELOAD))
        here = os.path.join(wld.pythonpath, "dtlab", "course", "torchrun_like.py")
        main_args = [here, None, "__main__"]
        stdio = dict(stdin=True, separate_stderr=True)
        if ctx is None:
            out = os.path.join(work, "out")
            proc = zygote.spawn("runpy:run_path", main_args, env=_env(dict(os.environ)), cwd=work,
                                path=[wld.pythonpath], **stdio)
            script_path = os.path.join(folder, filename)
        else:
            from ..runtime.sandbox import View

            out, script_path = OUT, f"{SANDBOX_INPUTS}/{filename}"
            box = sandbox_box(ctx)
            root = wld.pythonpath
            view = View(ro=[*wld.binds, (root, root), (folder, SANDBOX_INPUTS)],
                        home=SANDBOX_HOME, env=_env({}))
            proc = box.spawn_warm(zygote, "runpy:run_path", main_args, view, [root], **stdio)
        forwarder = threading.Thread(target=_forward, daemon=True,
                                     args=(proc.stderr, filename, printed, kept))
        forwarder.start()
        argv = [a.replace("{inputs}", os.path.dirname(script_path)).replace("{out}", out)
                for a in map(str, args)]
        proc.stdin.write(pack({"script": script_path, "nprocs": nprocs, "argv": argv,
                               "out": out, "max_bytes": MAX_FILES_BYTES}))
        proc.stdin.flush()

        def fail(message: str):
            _stop(proc, box)
            raise AssertionError(message) from None

        reply = receive(proc, f"{filename} on {nprocs} ranks", cpu_s, idle_s, fail)
    finally:
        _stop(proc, box)
        if forwarder is not None:
            forwarder.join(10)
        shutil.rmtree(work, ignore_errors=True)
    files = {k: base64.b64decode(v) for k, v in reply.get("files", {}).items()}
    return ScriptRun(list(reply.get("codes", [])), "".join(kept), files,
                     list(reply.get("dropped", [])))


def _env(base: dict) -> dict:
    # the ranks compute on the CPU with gloo in both places: graded work never needs a GPU
    return {**base, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}


def _source(filename: str, ctx) -> str:
    if ctx is not None:
        return ctx.script_of(filename)
    if not os.path.isfile(filename):
        raise AssertionError(f"{filename} does not exist here ({os.getcwd()}): run the cell that "
                             f"writes it (%%writefile {filename}) first")
    with open(filename) as f:
        return f.read()


def _stop(proc, box) -> None:
    if proc is not None and proc.poll() is None:
        from ..runtime.sandbox import kill_tree

        kill_tree(proc.pid)
        proc.wait()
    if box is not None:
        box.close()
    if proc is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass

