"""The rank side of :class:`dtlab.Pool`: join the group once, then run commands until told to stop.

Messages from the parent (already authenticated, see :mod:`.channel`):

    ("run",  id, pickled (fn, args, kwargs), source lines)   call fn in this rank
    ("exec", id, source text, filename)                       run a cell in the rank's namespace
    ("push", id, pickled {name: value})                       set names in the namespace
    ("pull", id, name)                                        send a name's value back
    ("shutdown",)                                             leave the group and exit

Every command is answered with ("done", id, ok, payload, seconds, (stdout_end, stderr_end)):
payload is the pickled value, or the traceback text; the two offsets say where this command's
output ends in the rank's log files, so the parent shows each cell exactly its own output.

An interrupt (SIGINT from the parent) raises KeyboardInterrupt only while user code runs; the
rank then answers "interrupted" and waits for the next command with its namespace intact.
"""

from __future__ import annotations

import ast
import linecache
import os
import signal
import sys
import time
from multiprocessing.connection import Client

import cloudpickle

from . import worker
from .channel import read_key

_in_user_code = False


def _on_sigint(signum, frame):
    if _in_user_code:
        raise KeyboardInterrupt
    # between commands an interrupt has nothing to stop


def _offsets() -> tuple[int, int]:
    return os.lseek(1, 0, os.SEEK_CUR), os.lseek(2, 0, os.SEEK_CUR)


def run_cell(source: str, filename: str, ns: dict):
    """Run cell source like a notebook does: the value of a final expression is the result."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    tree = ast.parse(source, filename=filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), ns)  # noqa: S102 -- running the user's cell is the point
    if last is not None:
        return eval(compile(last, filename, "eval"), ns)  # noqa: S307
    return None


def handle(msg: tuple, ns: dict):
    global _in_user_code
    kind = msg[0]
    if kind == "pull":
        name = msg[2]
        if name not in ns:
            raise NameError(f"name {name!r} is not defined on rank {ns['rank']}")
        return ns[name]
    _in_user_code = True
    try:
        if kind == "run":
            worker.add_source_lines(msg[3])
            fn, args, kwargs = cloudpickle.loads(msg[2])
            return fn(*args, **kwargs)
        if kind == "exec":
            return run_cell(msg[2], msg[3], ns)
        if kind == "push":
            ns.update(cloudpickle.loads(msg[2]))
            return None
        raise ValueError(f"unknown command {kind!r}")
    finally:
        _in_user_code = False


def serve(run_dir: str, address: str) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    conn = Client(address, family="AF_UNIX", authkey=read_key(run_dir))
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        device = worker.init_process_group()
    except BaseException as e:
        conn.send(("failed", rank, worker.record_failure(e)))
        worker.finish(1, destroy=False)
    ns = {"__name__": "__dtlab__", "rank": rank, "world_size": dist.get_world_size(),
          "device": device, "torch": torch, "dist": dist}
    worker.flush_output()
    conn.send(("ready", rank, os.getpid(), str(device), _offsets()))
    while True:
        try:
            msg = conn.recv()
        except KeyboardInterrupt:
            continue
        except (EOFError, OSError):  # the parent is gone
            worker.finish(0, destroy=False)
        if msg[0] == "shutdown":
            break
        cid = msg[1]
        t0 = time.perf_counter()
        try:
            value = handle(msg, ns)
            ok, payload = True, None
            try:
                payload = _dumps(value)
            except Exception as pe:
                ok, payload = False, (f"TypeError: the value on rank {rank} "
                                      f"({type(value).__name__}) cannot be sent back: {pe}\n")
                sys.stderr.write(payload)
        except KeyboardInterrupt as e:
            ok, payload = False, worker.user_traceback(e) + "(interrupted)\n"
            sys.stderr.write("KeyboardInterrupt: interrupted by the parent\n")
        except BaseException as e:  # SystemExit too: a cell must not end the rank
            ok, payload = False, worker.record_failure(e, to_file=False)
        dur = time.perf_counter() - t0
        worker.flush_output()
        conn.send(("done", cid, ok, payload, dur, _offsets()))
    worker.finish(0, destroy=True)


def _dumps(value) -> bytes:
    import io

    buf = io.BytesIO()
    worker._ResultPickler(buf).dump(value)
    return buf.getvalue()
