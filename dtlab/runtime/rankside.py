"""The rank side: one fresh interpreter per rank, started by :mod:`dtlab.runtime.procs`.

``python -m dtlab.runtime.worker oneshot RUN_DIR``   run one call, write its result, exit
``python -m dtlab.runtime.worker serve RUN_DIR``     serve a :class:`dtlab.Pool` until closed

Both modes share one init/cleanup path (:func:`bootstrap`, :func:`init_process_group`,
:func:`finish`): watch the parent, arm the stack dump, restore the parent's import path, join
the process group, and on the way out flush every byte of output (C stdio too).
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback

import cloudpickle

from . import evidence
from .payload import ShippingPickler
from .stacks import STACK_SIGNAL

_runtime_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --- bootstrap -------------------------------------------------------------------------------

def _watch_parent() -> None:
    """Die with the parent: PR_SET_PDEATHSIG where the launcher allows it, plus a polling thread
    (covers macOS and a parent whose launching thread outlives the signal's reach)."""
    parent = int(os.environ.get("DTLAB_PARENT_PID", "0") or 0)
    if not parent:
        return
    if os.environ.get("DTLAB_PDEATHSIG") == "1" and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass

    def watch():
        while True:
            if os.getppid() != parent:
                _kill_own_group()
            time.sleep(0.5)

    if os.getppid() != parent:  # the parent died before we armed anything
        _kill_own_group()
    threading.Thread(target=watch, name="dtlab-parent-watch", daemon=True).start()


def _kill_own_group() -> None:
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(137)


def bootstrap(run_dir: str) -> dict:
    """Everything a rank does before user code: returns the parent's context."""
    _watch_parent()
    # the launcher holds SIGINT blocked while it starts ranks, and a blocked mask is inherited
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
    return device


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
    # os._exit: a failed rank must not wait on communicator destructors or atexit hooks
    os._exit(code)


# --- results and failures --------------------------------------------------------------------

class _ResultPickler(ShippingPickler):
    """cloudpickle, with tensors on any device coming back to the parent on the CPU."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.detach().cpu().__reduce_ex__(self.proto)
        return super().reducer_override(obj)


def dump_value(value, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        _ResultPickler(f).dump(value)
    os.replace(tmp, path)


def user_traceback(e: BaseException) -> str:
    """The traceback from the user's first frame on (dtlab's own frames dropped)."""
    tb = e.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_runtime_dir):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def record_failure(e: BaseException, to_file: bool = True) -> str:
    """Print the traceback to stderr (the rank's live output) and, for a rank about to exit,
    write it where torch elastic looks (TORCHELASTIC_ERROR_FILE), in its format, with a
    nanosecond timestamp beside torch's whole seconds."""
    text = user_traceback(e)
    sys.stderr.write(text)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE") if to_file else None
    if path:
        now = time.time_ns()
        data = {"message": {
            "message": f"{type(e).__name__}: {e}",
            "extraInfo": {"py_callstack": text, "timestamp": str(now // 10**9),
                          "timestamp_ns": str(now), "exc_type": type(e).__name__}}}
        with open(path, "w") as f:
            json.dump(data, f)
    return text


# --- modes -----------------------------------------------------------------------------------

def oneshot(run_dir: str) -> None:
    rank = int(os.environ["RANK"])
    joined = False
    try:
        with open(os.path.join(run_dir, "call.pkl"), "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        init_process_group()
        joined = True
        t0 = time.perf_counter()
        value = fn(*args, **kwargs)
        duration = time.perf_counter() - t0
        try:
            dump_value({"value": value, "duration_s": duration},
                       os.path.join(run_dir, f"result-{rank}.pkl"))
        except Exception as pe:
            raise TypeError(f"fn returned {type(value).__name__} on rank {rank}, which cannot be "
                            f"sent back to the parent ({pe}); return plain data, tensors or "
                            f"arrays instead") from None
    except SystemExit as e:  # sys.exit() inside fn: exit with that code, like a script would
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finish(code, destroy=False)
    except BaseException as e:
        record_failure(e)
        evidence.dump_own_trace(rank)  # the collectives this rank issued, for the post-mortem
        finish(1, destroy=False)
    finish(0, destroy=joined)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    mode, run_dir = argv[0], argv[1]
    bootstrap(run_dir)
    if mode == "oneshot":
        oneshot(run_dir)
    elif mode == "serve":
        from .serve import serve

        serve(run_dir, *argv[2:])
    else:
        raise SystemExit(f"dtlab worker: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
