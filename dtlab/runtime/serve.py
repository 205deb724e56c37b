"""The rank side of :class:`dtlab.Pool`: join the group once, then run commands until told to stop.

The messages are :mod:`.messages` (already authenticated, see :mod:`.channel`). Every command
is answered with one ``Done``. An interrupt (SIGINT from the parent) raises KeyboardInterrupt
only while user code runs; the rank then answers "interrupted" and waits for the next command
with its namespace intact.
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

from . import rankside
from .channel import reachable, read_key
from .messages import Done, Exec, Pull, Push, Ready, Run, Shutdown, StartFailed

_in_user_code = False


def _on_sigint(signum, frame):
    if _in_user_code:
        raise KeyboardInterrupt
    # between commands an interrupt has nothing to stop


_LAST_OFFSETS = [0, 0]


def _offsets() -> tuple[int, int]:
    """Where this rank's stdout and stderr files are: the parent cuts each cell's output there.
    A cell that closed fd 1 or 2 leaves the last known place (its output is lost, not the rank)."""
    for i, fd in enumerate((1, 2)):
        try:
            _LAST_OFFSETS[i] = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            pass
    return _LAST_OFFSETS[0], _LAST_OFFSETS[1]


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


def handle(msg, ns: dict):
    global _in_user_code
    if isinstance(msg, Pull):
        if msg.name not in ns:
            raise NameError(f"name {msg.name!r} is not defined on rank {ns['rank']}")
        return ns[msg.name]
    _in_user_code = True
    try:
        if isinstance(msg, Run):
            rankside.add_source_lines(msg.lines)
            fn, args, kwargs = cloudpickle.loads(msg.call)
            return fn(*args, **kwargs)
        if isinstance(msg, Exec):
            return run_cell(msg.source, msg.filename, ns)
        if isinstance(msg, Push):
            ns.update(cloudpickle.loads(msg.blob))
            return None
        raise ValueError(f"unknown command {msg!r}")
    finally:
        _in_user_code = False


def serve(run_dir: str, address: str) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    where, fd = reachable(address)
    conn = Client(where, family="AF_UNIX", authkey=read_key(run_dir))
    if fd is not None:
        os.close(fd)
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        device = rankside.init_process_group()
    except BaseException as e:
        conn.send(StartFailed(rank, rankside.record_failure(e)))
        rankside.finish(1, destroy=False)
    ns = {"__name__": "__dtlab__", "rank": rank, "world_size": dist.get_world_size(),
          "device": device, "torch": torch, "dist": dist}
    rankside.flush_output()
    conn.send(Ready(rank, os.getpid(), str(device), _offsets()))
    while True:
        try:
            msg = conn.recv()
        except KeyboardInterrupt:
            continue
        except (EOFError, OSError):  # the parent is gone
            rankside.finish(0, destroy=False)
        if isinstance(msg, Shutdown):
            break
        t0 = time.perf_counter()
        try:
            value = handle(msg, ns)
            ok, payload = True, None
            try:
                payload = rankside.dumps_value(value)
            except Exception as pe:
                ok, payload = False, (f"TypeError: the value on rank {rank} "
                                      f"({type(value).__name__}) cannot be sent back: {pe}\n")
                sys.stderr.write(payload)
        except KeyboardInterrupt as e:
            ok, payload = False, rankside.user_traceback(e) + "(interrupted)\n"
            sys.stderr.write("KeyboardInterrupt: interrupted by the parent\n")
        except BaseException as e:  # SystemExit too: a cell must not end the rank
            ok, payload = False, rankside.record_failure(e, to_file=False)
        dur = time.perf_counter() - t0
        rankside.flush_output()
        conn.send(Done(msg.id, ok, payload, dur, _offsets()))
    rankside.finish(0, destroy=True)
