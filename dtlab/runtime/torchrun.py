"""``dtlab.torchrun``: a script of your own under the real ``torchrun``, from a notebook cell.

``dtlab.run`` hides the launcher; this is the launcher itself, as you would type it in a shell::

    dtlab.torchrun("train_ddp.py", "--epochs", "2", nproc=2)
    # = python -m torch.distributed.run --standalone --nproc-per-node 2 train_ddp.py --epochs 2

torchrun's console streams into the cell as it comes (``--tee 3``: each line labelled with the
rank that printed it, ``[default0]:``); the call returns a :class:`Torchrun` with the exit code
and the whole console. A failing script is an answer, not an exception: the exit code says so.
torchrun runs as an agent of :mod:`.agents`, so a timeout, an interrupt (the kernel's stop
button) or the kernel's death ends torchrun, every rank it started and their children.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from .agents import temporary
from .errors import LaunchError
from .plan import check_timeout


@dataclass
class Torchrun:
    """One torchrun launch: its command, exit code (None: stopped at the timeout), console."""

    command: str
    code: int | None
    console: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.code == 0


def torchrun(script: str, *args, nproc: int = 2, timeout: float | None = 300,
             env: dict | None = None, show: bool = True) -> Torchrun:
    """Run ``script`` with ``args`` under ``torchrun --standalone --nproc-per-node nproc``
    (module docstring). ``env``: variables added to this process's environment."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or not 1 <= nproc <= 64:
        raise LaunchError(f"torchrun: nproc={nproc!r} must be an int in 1..64")
    timeout = check_timeout(timeout)   # dtlab.run's rule: None or inf, no limit
    if not os.path.isfile(script):
        raise LaunchError(f"torchrun: no file {script!r} in {os.getcwd()}: write it first")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(nproc), "--tee", "3", script, *map(str, args)]
    shown = " ".join(["torchrun", "--standalone", "--nproc-per-node", str(nproc), script,
                      *map(str, args)])
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "0"), **(env or {})}
    t0 = time.monotonic()
    if show:
        print(f"$ {shown}", flush=True)
    seen = 0

    def shown_up_to(text: str, end: int) -> None:
        nonlocal seen
        if show and end > seen:
            sys.stdout.write(_quiet(text[seen:end]))
            sys.stdout.flush()
            seen = end

    with temporary("dtlab-torchrun-") as ag:
        ag.start("torchrun", argv, full_env)
        while True:
            code = ag.poll()["torchrun"]
            text = ag.output("torchrun")
            shown_up_to(text, text.rfind("\n") + 1)  # whole lines; the rest with its end
            if code is not None or (timeout is not None and time.monotonic() - t0 > timeout):
                break
            time.sleep(0.1)
        console = ag.output("torchrun")
    shown_up_to(console, len(console))
    secs = time.monotonic() - t0
    if show:
        end = f"exit status {code}" if code is not None else f"stopped after {timeout:g} s"
        print(f"[torchrun: {end}, {secs:.1f} s]", flush=True)
    return Torchrun(shown, code, console, secs)


_BANNER = ("*****************************************",
           "Setting OMP_NUM_THREADS environment variable for each process")


def _quiet(text: str) -> str:
    """torchrun's OMP_NUM_THREADS banner, once per launch, is left out of the cell (it is in
    ``console``); everything else is shown as printed."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith(_BANNER))
