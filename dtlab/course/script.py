"""A learner's training script, run by a test cell on N observed ranks.

An exercise whose answer is a whole script (00's ``train_ddp.py``) is written in a cell that
starts with ``%%writefile train_ddp.py``; a test cell runs it::

    run = course.script("train_ddp.py", nprocs=3, inputs={"data.pt": path},
                        args=["--data", "{inputs}/data.pt", "--out", "{out}", ...],
                        without=("dtlab.byhand",))
    run.codes            # each rank's exit status (None: the job was stopped before it ended)
    run.lines(0)         # what rank 0 printed, line by line
    run.files["model.pt"]   # what the ranks wrote under the folder ``{out}`` stands for
    run.traffic          # every message between the ranks (dtlab.runtime.relay.Message)
    run.console          # everything, labelled [default<r>]: as torchrun --tee 3 labels it

Each rank runs the script as torchrun would (:func:`dtlab.course.harness.script`: its
variables, ``__name__ == "__main__"``, ``sys.argv``), in a process forked from a zygote that has
imported torch. Its process group is the relay (:mod:`dtlab.runtime.observed`): the ranks share
no network and no files, every collective passes through the test's process and is recorded
there, so a test can check *what the ranks exchanged* -- that each rank all-reduced the
gradients of its own batches, step after step -- not only what they wrote. The script's own
``dist.init_process_group(...)`` joins that group. Graded (``dtlab course grade``), each rank is
a sandbox of its own (:mod:`dtlab.runtime.sandbox`) holding a copy of the inputs and the script
rebuilt from the submission's ``%%writefile`` cell; in JupyterLab they are plain children running
the file the cell wrote. The job is bounded by CPU time, deadlock and silence, not the wall clock.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field

from . import context as grading_context
from .answer import _exit, _own_work

# what DDP and a script around it call; the rest is refused by the relay
OFFER = {"all_reduce", "broadcast", "all_gather", "barrier"}
_LABEL = re.compile(r"^\[default(\d+)\]:(.*)$")


@dataclass
class ScriptRun:
    """What the ranks did: exit statuses, console (labelled lines), files, the relay's record."""

    codes: list
    console: str
    files: dict[str, bytes] = field(default_factory=dict)
    traffic: list = field(default_factory=list)
    stopped: str = ""

    @property
    def ok(self) -> bool:
        return not self.stopped and all(c == 0 for c in self.codes)

    def lines(self, rank: int) -> list[str]:
        """Every line rank ``rank`` printed (stdout and stderr), in order."""
        out = []
        for ln in self.console.splitlines():
            m = _LABEL.match(ln)
            if m and int(m.group(1)) == rank:
                out.append(m.group(2))
        return out

    def failure(self) -> str:
        """One paragraph for a test's message: which ranks failed or why the job was stopped,
        and the end of the first failing rank's output."""
        bad = [r for r, c in enumerate(self.codes) if c != 0]
        if not bad:
            return ""
        failed = [r for r in bad if self.codes[r] is not None] or bad
        said = ", ".join(f"rank {r}: " + ("still running" if self.codes[r] is None
                                          else "exit " + _exit(self.codes[r])) for r in bad)
        tail = "\n".join(self.lines(failed[0])[-25:])
        return (f"{said}" + (f"; the job was stopped: {self.stopped}" if self.stopped else "")
                + f"; rank {failed[0]}'s last lines:\n{tail}")


def script(filename: str, nprocs: int = 2, args: list[str] | tuple = (),
           inputs: dict[str, str] | list[dict[str, str]] | None = None,
           without: tuple[str, ...] | list[str] = (), cpu_s: float | None = None,
           idle_s: float = 30.0) -> ScriptRun:
    """Run the learner's ``filename`` on ``nprocs`` observed ranks with ``args`` (see the
    module). ``inputs``: {name: path here} of files every rank gets a copy of, in the folder
    ``{inputs}`` stands for in ``args`` -- or a list of such dicts, one per rank, each rank its
    own files under the same names; ``{out}`` stands for its output folder. A script that
    fails is a result (``codes``); AssertionError if the script cannot be found."""
    from .harness import script as on_rank
    from .ranks import Ranks

    if not isinstance(nprocs, int) or not 1 <= nprocs <= 8:
        raise ValueError(f"script: nprocs must be an int in 1..8, got {nprocs!r}")
    source = _source(filename, grading_context.current())
    job = Ranks(nprocs, offer=OFFER, without=tuple(without), cpu_s=cpu_s, idle_s=idle_s)
    _own_work(source, job.world.without)
    per_rank = inputs if isinstance(inputs, list) else [inputs or {}] * nprocs
    if len(per_rank) != nprocs:
        raise ValueError(f"script: {len(per_rank)} sets of inputs for {nprocs} ranks")
    tasks = []
    for given in per_rank:
        files = {}
        for name, path in given.items():
            with open(path, "rb") as f:
                files[name] = base64.b64encode(f.read()).decode()
        tasks.append((None, {"filename": filename, "source": source, "inputs": files,
                             "argv": [str(a) for a in args]}))
    out = job.observe(on_rank, tasks)
    # a rank without an answer was stopped while it ran (None), or failed outside the script
    codes = [out.values[r].get("exit", 1) if isinstance(out.values.get(r), dict)
             else (None if out.stopped else 1) for r in range(nprocs)]
    console = []
    for r in range(nprocs):
        console += [f"[default{r}]:{ln}" for ln in out.outputs.get(r, "").splitlines()]
        if r in out.errors and not out.stopped:  # outside the script (its own error is output)
            console += [f"[default{r}]:{ln}" for ln in out.errors[r].splitlines()]
    written: dict[str, bytes] = {}
    for r in reversed(range(nprocs)):  # rank 0's file wins where two ranks wrote one
        value = out.values.get(r)
        if isinstance(value, dict):
            written.update({k: base64.b64decode(v) for k, v in value.get("files", {}).items()})
    run = ScriptRun(codes, "\n".join(console) + "\n", written, out.traffic, out.stopped)
    for ln in console[:200]:
        print(ln)
    return run


def _source(filename: str, ctx) -> str:
    if ctx is not None:
        return ctx.script_of(filename)
    if not os.path.isfile(filename):
        raise AssertionError(f"{filename} does not exist here ({os.getcwd()}): run the cell that "
                             f"writes it (%%writefile {filename}) first")
    with open(filename) as f:
        return f.read()
