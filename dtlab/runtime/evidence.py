"""What a launch keeps for the post-mortem: Flight Recorder dumps, stacks, output, exit codes.

Flight Recorder (torch's ring buffer of the last collectives each rank issued) is switched on in
every rank (``TORCH_FR_BUFFER_SIZE`` for gloo, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` for NCCL) unless
the caller set it. It is dumped

* by the rank itself when ``fn`` raises (``_dump_fr_trace`` / ``_dump_nccl_trace``),
* on NCCL, by the watchdog when a collective times out (``TORCH_NCCL_DUMP_ON_TIMEOUT``), and on
  request through the per-rank named pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``) -- which works
  while the rank's Python thread is blocked, because a C++ thread serves it.

Dumps are named ``fr_trace_<rank>``, the layout torch's own analyzer reads
(``python -m torch.distributed.flight_recorder.fr_trace DIR``).

An evidence directory holds (files are recognised by content, names only help people)::

    run.json                  launch facts: backend, ranks, timeout, outcome, exit codes
    rank<R>.stdout.txt        everything rank R wrote (NCCL_DEBUG lines on NCCL included)
    rank<R>.stderr.txt
    rank<R>.error.txt         the traceback rank R recorded (its error file) and never printed:
                              it had closed its stderr, or set sys.stderr to None
    stacks/<when>-rank<R>.txt py-spy (or faulthandler) dumps: at a snapshot, at the timeout
    fr/fr_trace_<R>           Flight Recorder dumps

Where a tool puts its evidence when not told (:func:`new_folder`): ``dtlab-evidence/`` in the
current folder -- beside the notebooks, for a kernel started from JupyterLab -- or
``$DTLAB_EVIDENCE_ROOT``; never the system's temporary folder, where it would pile up unseen.
While nbgrader grades (``NBGRADER_EXECUTION``) it goes to a temporary folder instead, so nothing
lands in a student's submission.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from typing import Callable  # noqa: F401 (annotations)

EVIDENCE_ROOT = "dtlab-evidence"


def evidence_root() -> str:
    """The folder new evidence folders go in (the module docstring says which)."""
    if os.environ.get("NBGRADER_EXECUTION") and not os.environ.get("DTLAB_EVIDENCE_ROOT"):
        return os.path.join(tempfile.gettempdir(), f"dtlab-evidence-{os.getuid()}")
    return os.path.abspath(os.environ.get("DTLAB_EVIDENCE_ROOT") or EVIDENCE_ROOT)


def new_folder(name: str) -> str:
    """A new, empty evidence folder ``<root>/<name>-<date>-<time>-<n>`` (0700), made now."""
    root = evidence_root()
    os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=root)


FR_PREFIX = "fr_trace_"
FR_SIZE = "2000"


# Flight Recorder's buffer size, by either name torch has read it under
FR_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def fr_buffer_var() -> str:
    """The buffer-size name to set: torch 2.11 (seen on the H200s) reads the TORCH_FR_* names
    and warns about the TORCH_NCCL_* ones; the old names still work as aliases, so older torch
    gets those."""
    return FR_BUFFER_VARS[0] if _torch_at_least(2, 11) else FR_BUFFER_VARS[1]


def fr_env(backend: str, fr_dir: str, user_env: dict[str, str]) -> dict[str, str]:
    """Environment that turns Flight Recorder on and points its dumps at ``fr_dir``. A buffer
    size the caller or the shell set, under either name, is left alone (0 turns it off)."""
    env = {"DTLAB_FR_DIR": fr_dir}

    def default(key: str, value: str) -> None:
        if key not in user_env and key not in os.environ:
            env[key] = value

    buffer_set = any(k in user_env or k in os.environ for k in FR_BUFFER_VARS)
    if backend == "nccl":
        new = _torch_at_least(2, 11)
        if not buffer_set:
            env[fr_buffer_var()] = FR_SIZE
        default("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        default("TORCH_FR_DUMP_TEMP_FILE" if new else "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                os.path.join(fr_dir, FR_PREFIX))
        default("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(fr_dir, "pipe_"))
    elif not buffer_set:
        env["TORCH_FR_BUFFER_SIZE"] = FR_SIZE
    return env


def _torch_at_least(major: int, minor: int) -> bool:
    import torch

    try:
        got = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return True
    return got >= (major, minor)


def dump_own_trace(rank: int) -> str | None:
    """Rank side: write this rank's Flight Recorder buffer to DTLAB_FR_DIR (after a failure)."""
    fr_dir = os.environ.get("DTLAB_FR_DIR")
    if not fr_dir:
        return None
    try:
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d

        if not dist.is_initialized():
            return None
        # without Python stack traces: symbolising them imports torch._dynamo (2-4 s on a small
        # CPU), long enough to change how a failing job unfolds; the ranks' own tracebacks and
        # py-spy stacks say where each call came from
        if dist.get_backend() == "nccl" and hasattr(c10d, "_dump_nccl_trace"):
            blob = c10d._dump_nccl_trace(True, False, False)
        elif hasattr(c10d, "_dump_fr_trace"):
            blob = c10d._dump_fr_trace(True, False, False)
        else:
            return None
        os.makedirs(fr_dir, exist_ok=True)
        path = os.path.join(fr_dir, f"{FR_PREFIX}{rank}")
        with open(path + ".tmp", "wb") as f:
            f.write(blob)
        os.replace(path + ".tmp", path)
        return path
    except Exception as e:  # evidence is best effort: never mask the real failure
        print(f"dtlab: could not dump Flight Recorder on rank {rank}: {e}", file=sys.stderr)
        return None


def examine_stuck(pids: dict[int, int], run_dir: str, backend: str) -> tuple[str, dict[int, str]]:
    """Look at ranks that are stuck, without stopping them: every rank's Python stack (py-spy,
    else the faulthandler dump each dtlab rank arms, ``DTLAB_STACKS`` to choose) and, on NCCL, a
    Flight Recorder dump through the pipes. Returns (method, {rank: stack text})."""
    from .stacks import capture

    method, stacks = capture(pids, {r: os.path.join(run_dir, f"stacks-{r}.txt") for r in pids},
                             prefer=os.environ.get("DTLAB_STACKS", "auto"))
    if backend == "nccl":
        request_nccl_dumps(os.path.join(run_dir, "fr"), list(pids))
    return method, stacks


def request_nccl_dumps(fr_dir: str, ranks: list[int], wait: float = 5.0) -> list[str]:
    """Ask NCCL ranks for a Flight Recorder dump through their named pipes; return new dumps."""
    asked = []
    for r in ranks:
        pipe = os.path.join(fr_dir, f"pipe_{r}.pipe")
        try:
            if not stat.S_ISFIFO(os.stat(pipe).st_mode):
                continue
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO if nobody reads it
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENXIO):
                print(f"dtlab: Flight Recorder pipe of rank {r}: {e}", file=sys.stderr)
            continue
        try:
            os.write(fd, b"1\n")
            asked.append(r)
        finally:
            os.close(fd)
    want = {os.path.join(fr_dir, f"{FR_PREFIX}{r}") for r in asked}
    end = time.monotonic() + wait
    while asked and time.monotonic() < end and not all(_stable(p) for p in want):
        time.sleep(0.1)
    return sorted(p for p in want if os.path.exists(p))


def _stable(path: str) -> bool:
    if not os.path.exists(path):
        return False
    size = os.path.getsize(path)
    time.sleep(0.05)
    return size > 0 and os.path.getsize(path) == size


def unprinted_tracebacks(err: BaseException | None, results) -> dict[int, str]:
    """{rank: traceback} of the ranks whose exception ``err`` knows (from the error file) but
    whose output does not show: a diagnosis reads output, and would call such a rank one that
    died without a Python exception."""
    stderr = {r.rank: r.stderr for r in results}
    out = {}
    for f in getattr(err, "failure_list", None) or []:
        if f.kind in ("exception", "sys_exit") and f.detail.strip():
            last = f.detail.strip().splitlines()[-1]
            if last not in stderr.get(f.rank, ""):
                out[f.rank] = f.detail
    return out


def write_evidence(out: str, results, meta: dict, stacks: dict[str, dict[int, str]],
                   fr_dir: str | None, errors: dict[int, str] | None = None) -> str:
    """Write an evidence directory (see module docstring); returns its path."""
    os.makedirs(out, exist_ok=True)
    for r in results:
        for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
            with open(os.path.join(out, f"rank{r.rank}.{name}.txt"), "w") as f:
                f.write(text)
    for rank, text in (errors or {}).items():
        with open(os.path.join(out, f"rank{rank}.error.txt"), "w") as f:
            f.write(text)
    for when, per_rank in stacks.items():
        if not per_rank:
            continue
        os.makedirs(os.path.join(out, "stacks"), exist_ok=True)
        for rank, text in per_rank.items():
            with open(os.path.join(out, "stacks", f"{when}-rank{rank}.txt"), "w") as f:
                f.write(text)
    if fr_dir and os.path.isdir(fr_dir):
        dumps = [f for f in os.listdir(fr_dir) if f.startswith(FR_PREFIX) and not f.endswith(".tmp")]
        if dumps:
            os.makedirs(os.path.join(out, "fr"), exist_ok=True)
            for f in dumps:
                shutil.copy(os.path.join(fr_dir, f), os.path.join(out, "fr", f))
    meta = dict(meta)
    meta["ranks"] = [{"rank": r.rank, "pid": r.pid, "device": r.device, "exit_code": r.exit_code,
                      "duration_s": r.duration_s} for r in results]
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump(meta, f, indent=2, default=str)
    return out


# The layer above registers what reads an evidence folder and names a cause (dtlab/__init__.py
# wires in dtlab.hang.diagnose): the runtime itself knows nothing of failure classes.
_POSTMORTEM: "Callable[[str], tuple[object, str | None]] | None" = None


def set_postmortem(fn: "Callable[[str], tuple[object, str | None]] | None") -> None:
    """``fn(evidence_dir) -> (diagnosis, note or None)``; run on every failed launch."""
    global _POSTMORTEM
    _POSTMORTEM = fn


def run_postmortem(err: BaseException, evidence_dir: str) -> None:
    """Set ``err.diagnosis`` (and add its note) from the evidence, if a post-mortem is set."""
    if _POSTMORTEM is None:
        return
    failures = getattr(err, "failure_list", None)
    if failures and all(f.kind == "bad_result" for f in failures):
        err.diagnosis = None  # every fn returned: nothing died or hung, the error says it all
        return
    try:
        err.diagnosis, note = _POSTMORTEM(evidence_dir)
    except Exception as e:  # a diagnosis must never hide the error it explains
        err.diagnosis = None
        print(f"dtlab: diagnosis failed: {type(e).__name__}: {e}", file=sys.stderr)
        return
    if note and hasattr(err, "notes"):
        err.notes.append(note)
