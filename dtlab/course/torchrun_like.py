"""A learner's training script on N ranks, launched as ``torchrun --standalone`` would launch it.

It runs as a script (``runpy``) in a process forked from a zygote that has imported torch
(:mod:`dtlab.runtime.zygote`): graded, inside the submission's sandbox, where the script can
reach nothing but its inputs and loopback; in JupyterLab, as a plain child. It reads one frame
(:mod:`dtlab.course.learner`'s wire format) from stdin::

    {"script": path, "nprocs": N, "argv": [...], "out": folder, "max_bytes": n}

forks N ranks, each with torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ...), ``sys.argv`` =
``[script, *argv]`` and ``__name__ == "__main__"``: the script's own ``init_process_group()``
finds its rendezvous in the environment, as under torchrun. A fork of a process that has
imported torch saves each rank the ~2 s a cold ``import torch`` costs (6 s for a 2-rank
torchrun launch on a 2-core machine against well under 1 s here).

Each rank's stdout and stderr reach this process's stderr line by line, labelled as ``torchrun
--tee 3`` labels them (``[default0]:...``). As torchrun does, the first rank to fail gets the
others stopped (SIGTERM after ``GRACE_S``, SIGKILL after ``KILL_S`` more). When every rank has
ended it answers one frame on stdout::

    {"codes": [exit code per rank], "files": {relative path: base64}, "dropped": [...]}

``files``: what the ranks wrote under ``out``, up to ``max_bytes`` in all (the rest named in
``dropped``). Nothing here judges: the test reads codes, console and files in its own process.
"""

from __future__ import annotations

import base64
import json
import os
import runpy
import select
import signal
import socket
import struct
import sys
import time
import traceback

GRACE_S, KILL_S = 2.0, 3.0


def _frame_in() -> dict:
    head = sys.stdin.buffer.read(8)
    (n,) = struct.unpack("!Q", head)
    return json.loads(sys.stdin.buffer.read(n))


def _frame_out(doc: dict, fd: int) -> None:
    body = json.dumps(doc).encode()
    data = struct.pack("!Q", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(script: str, argv: list[str], rank: int, n: int, port: int, out_fd: int) -> None:
    """In the fork: become rank ``rank`` and run the script; never returns."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                      LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", GROUP_WORLD_SIZE="1",
                      ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(n), ROLE_NAME="default",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
                      OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    sys.argv = [script, *argv]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        # from the script's own frames on: this launcher's and runpy's are not the learner's
        tb = e.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")
                                  or tb.tb_frame.f_code.co_filename.endswith("runpy.py")):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _collect(out: str, max_bytes: int) -> tuple[dict, list[str]]:
    files, dropped, used = {}, [], 0
    for root, _, names in os.walk(out):
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, out)
            try:
                size = os.path.getsize(path)
                if not os.path.isfile(path) or os.path.islink(path) or used + size > max_bytes:
                    dropped.append(rel)
                    continue
                with open(path, "rb") as f:
                    files[rel] = base64.b64encode(f.read()).decode()
                used += size
            except OSError:
                dropped.append(rel)
    return files, dropped


def main() -> None:
    job = _frame_in()
    answer_fd = os.dup(1)  # the frame goes here; the ranks never get this descriptor
    os.set_inheritable(answer_fd, False)
    os.dup2(2, 1)
    n, port = int(job["nprocs"]), _free_port()
    os.makedirs(job["out"], exist_ok=True)
    pids, pipes, bufs = [], {}, {}
    for r in range(n):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            os.close(answer_fd)
            _rank(job["script"], list(job["argv"]), r, n, port, wfd)
        os.close(wfd)
        pids.append(pid)
        pipes[rfd], bufs[rfd] = r, b""
    codes: list[int | None] = [None] * n
    failed_at = ended_at = None
    # until every rank has ended and its output is read; a child a rank left behind holds the
    # pipe open, so its output is given a second after the last rank ended, not more
    while None in codes or (pipes and time.monotonic() - ended_at < 1.0):
        ready = select.select(list(pipes), [], [], 0.1)[0] if pipes else time.sleep(0.1) or []
        for fd in ready:
            chunk = os.read(fd, 65536)
            r = pipes[fd]
            if not chunk:
                if bufs[fd]:
                    _show(r, bufs[fd])
                os.close(fd)
                del pipes[fd]
                continue
            *lines, bufs[fd] = (bufs[fd] + chunk).split(b"\n")
            for line in lines:
                _show(r, line)
        for r, pid in enumerate(pids):
            if codes[r] is None:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    codes[r] = os.waitstatus_to_exitcode(status)
                    if codes[r] != 0 and failed_at is None:
                        failed_at = time.monotonic()
        if ended_at is None and None not in codes:
            ended_at = time.monotonic()
        if failed_at is not None:
            waited = time.monotonic() - failed_at
            sig = signal.SIGKILL if waited > GRACE_S + KILL_S else \
                signal.SIGTERM if waited > GRACE_S else None
            for r, pid in enumerate(pids):
                if sig and codes[r] is None:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
    files, dropped = _collect(job["out"], int(job.get("max_bytes", 32 << 20)))
    _frame_out({"codes": codes, "files": files, "dropped": dropped}, answer_fd)


def _show(rank: int, line: bytes) -> None:
    sys.stderr.buffer.write(b"[default%d]:" % rank + line + b"\n")
    sys.stderr.buffer.flush()


if __name__ == "__main__":
    main()
