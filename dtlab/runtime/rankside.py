"""The rank side's one init/cleanup path, shared by both modes of :mod:`.worker`.

:func:`bootstrap` (watch the parent, become the reaper of this rank's own descendants, arm the
stack dump, restore the launcher's import path), :func:`init_process_group`, and :func:`finish`
(flush every byte of output, C stdio too; end every descendant; exit). Plus how a rank reports
what happened: :func:`record_failure` (torch elastic's error-file format) and :func:`dump_value`.
"""

from __future__ import annotations

import ctypes
import faulthandler
import io
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback

import cloudpickle

from . import guard, reaper
from .payload import ShippingPickler
from .stacks import STACK_SIGNAL

_runtime_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --- bootstrap -------------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """End this rank and everything it started if its parent (the guard, :mod:`.guard`, or
    where there is none the launcher) goes away.

    The launcher's reaper (:mod:`.reaper`) and the guard do this from outside; this thread is
    the last line, for a guard and reaper that were killed too. No PR_SET_PDEATHSIG: a rank
    killed by the kernel at once would orphan its own children to init, out of reach.
    """
    if not parent:
        return

    def watch():
        while True:
            if os.getppid() != parent:
                _die(137)
            time.sleep(0.5)

    if os.getppid() != parent:  # the parent died before we armed anything
        _die(137)
    threading.Thread(target=watch, name="dtlab-parent-watch", daemon=True).start()


def end_descendants(grace: float = 0.5) -> None:
    """SIGTERM every process this rank started (own sessions too), SIGKILL what is left."""
    reaper.end_tree(os.getpid(), grace)


def _die(code: int) -> None:
    end_descendants(grace=0.0)
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(code)


def bootstrap(run_dir: str, parent: int) -> dict:
    """Everything a rank does before user code: returns the launcher's context. ``parent``:
    the pid of this rank's parent, watched from now on (:func:`.guard.start` returns it)."""
    # PR_SET_CHILD_SUBREAPER: a descendant orphaned by its parent (a daemon that double-forked,
    # a child whose shell exited) stays in this rank's tree instead of going to init, so the
    # rank's tree holds everything it started (dtlab/runtime/README.md, "Nothing survives")
    guard.become_subreaper()
    _watch_parent(parent)
    # a blocked mask is inherited: the rank takes interrupts whatever its launcher had blocked
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    rank = int(os.environ["RANK"])
    faulthandler.enable(file=sys.stderr, all_threads=True)  # a segfault still prints a stack
    dump = open(os.path.join(run_dir, f"stacks-{rank}.txt"), "a")  # noqa: SIM115 (lives forever)
    faulthandler.register(STACK_SIGNAL, file=dump, all_threads=True, chain=False)
    with open(os.path.join(run_dir, "context.pkl"), "rb") as f:
        ctx = cloudpickle.load(f)
    for p in reversed(ctx["sys_path"]):
        if p not in sys.path:
            sys.path.insert(1, p)
    os.chdir(ctx["cwd"])
    add_source_lines(ctx.get("linecache", {}))
    return ctx


def add_source_lines(entries: dict) -> None:
    for fname, entry in entries.items():
        size, _mtime, lines, full = entry
        linecache.cache[fname] = (size, None, lines, full)  # mtime None: never evicted


def init_process_group():
    """Join the default process group; returns this rank's torch.device."""
    import datetime

    import torch
    import torch.distributed as dist

    backend = os.environ["DTLAB_BACKEND"]
    local_rank = int(os.environ["LOCAL_RANK"])
    kw = {}
    if os.environ.get("DTLAB_PG_TIMEOUT_S"):
        kw["timeout"] = datetime.timedelta(seconds=float(os.environ["DTLAB_PG_TIMEOUT_S"]))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device, **kw)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", **kw)
    # Every rank waits here until every rank has joined: a rank whose fn returns at once would
    # otherwise exit while a peer is still connecting its gloo mesh, and that peer then fails
    # inside init_process_group ("Connection closed by peer": 3 of 30 no-op launches of 3 ranks
    # on a busy 2-core machine). Through the rendezvous store, not a collective: NCCL's first
    # collective would connect the ranks here, and section 02 times that first call.
    store = dist.distributed_c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    store.set(f"dtlab/joined/{rank}", "1")
    store.wait([f"dtlab/joined/{r}" for r in range(world)])
    return device


def entered_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"entered-{rank}")


def mark_entered(run_dir: str, rank: int) -> None:
    """Tell the parent this rank is about to call the user's function (imports and the process
    group are done): ``dtlab.run``'s ``timeout=`` counts from the moment every rank has."""
    os.close(os.open(entered_path(run_dir, rank), os.O_CREAT | os.O_WRONLY, 0o600))


def flush_output() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    try:
        ctypes.CDLL(None).fflush(None)  # printf output of C/C++ code still in stdio buffers
    except Exception:
        pass


def finish(code: int, destroy: bool) -> None:
    """Leave: flush, tear down the group if it is healthy, exit with ``code``."""
    flush_output()
    if destroy:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
        flush_output()
    end_descendants()  # nothing a rank started outlives it (dtlab/runtime/README.md)
    # os._exit: a failed rank must not wait on communicator destructors or atexit hooks
    os._exit(code)


# --- results and failures --------------------------------------------------------------------

class ResultPickler(ShippingPickler):
    """cloudpickle, with tensors on any device coming back to the parent on the CPU."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.detach().cpu().__reduce_ex__(self.proto)
        return super().reducer_override(obj)


def dumps_value(value) -> bytes:
    buf = io.BytesIO()
    ResultPickler(buf).dump(value)
    return buf.getvalue()


def dump_value(value, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        ResultPickler(f).dump(value)
    os.replace(tmp, path)


def user_traceback(e: BaseException) -> str:
    """The traceback from the user's first frame on (dtlab's own frames dropped). An error raised
    before any frame of the user's (fn called with arguments it does not take) keeps the call's
    own frame: a traceback with no frame at all reads as no Python traceback."""
    tb = e.__traceback__
    last = None
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_runtime_dir):
        last, tb = tb, tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb if tb is not None else last))


def _said(e: BaseException) -> str:
    """``str(e)``, or what Python's own traceback prints when that raises."""
    try:
        return str(e)
    except Exception:  # noqa: BLE001 -- a learner's __str__ may raise anything
        return "<exception str() failed>"


def record_failure(e: BaseException, to_file: bool = True) -> str:
    """Print the traceback to stderr (the rank's live output) and, for a rank about to exit,
    write it where torch elastic looks (TORCHELASTIC_ERROR_FILE), in its format, with a
    nanosecond timestamp beside torch's whole seconds. The file first: a rank that closed its
    fds 1 and 2, or set ``sys.stderr = None``, still has its exception recorded."""
    text = user_traceback(e)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE") if to_file else None
    if path:
        now = time.time_ns()
        said = _said(e)
        summary = (f"fn called sys.exit({e.code!r})" if isinstance(e, SystemExit)
                   else f"{type(e).__name__}: {said}" if said else type(e).__name__)
        data = {"message": {
            "message": summary,
            "extraInfo": {"py_callstack": text, "timestamp": str(now // 10**9),
                          "timestamp_ns": str(now), "exc_type": type(e).__name__,
                          # who wrote it: a process the rank started inherits the path
                          "pid": str(os.getpid())}}}
        with open(path, "w") as f:
            json.dump(data, f)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 -- no stderr left (None, a closed fd): the file has it
        pass
    return text


def collectives_issued() -> int | None:
    """How many collectives this rank has issued on the default group (torch's own count)."""
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
    except Exception:
        pass
    return None
