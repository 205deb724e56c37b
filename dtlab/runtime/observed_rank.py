"""One rank of an observed job (:mod:`.observed`): ``python -I observed_rank.py SOCKET``, or
``main(SOCKET)`` in a process forked from a zygote that imported this module (:mod:`.zygote`).

Run as a script, not as ``-m dtlab...``: until it has read its job it imports only the standard
library, so that the job's world (``path``: a copy of dtlab without the modules an exercise takes
away) comes first on ``sys.path`` before any of dtlab is imported.

    connect to SOCKET (the relay)  ->  {"t": "job", rank, world, path, ...} + the call (pickled
    by the launcher: its own code and data)  ->  join the relay's process group  ->  call  ->
    {"t": "result", "value": plain data} or {"t": "error", "text": traceback}
"""

import json
import os
import socket
import struct
import sys
import traceback


def _exactly(sock, n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the relay closed the connection")
        data += chunk
    return bytes(data)


def _die_with_parent():
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(socket_path: str | None = None):
    _die_with_parent()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path or sys.argv[1])
    (hlen,) = struct.unpack("!I", _exactly(sock, 4))
    job = json.loads(_exactly(sock, hlen))
    call = _exactly(sock, int(job.get("n", 0)))
    sys.path[:0] = job.get("path", [])
    rank, world = int(job["rank"]), int(job["world"])
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "DTLAB_BACKEND": "dtlab_relay",
                       "DTLAB_DEVICE": "cpu"})

    import cloudpickle
    import torch.distributed as dist

    from dtlab.runtime import relaypg

    conn = relaypg.Conn(sock)
    try:
        relaypg.install(conn, rank, world)
        fn, args, kwargs = cloudpickle.loads(call)
        value = fn(*args, **kwargs)
        try:
            conn.tell({"t": "result", "value": value})  # JSON: plain data, or a TypeError
        except (TypeError, ValueError) as e:
            raise TypeError(f"rank {rank}'s answer must be plain data (None, bool, int, float, "
                            f"str, lists, dicts with str keys): {e}") from None
    except BaseException as e:
        te = traceback.TracebackException.from_exception(e)
        conn.tell({"t": "error", "text": "".join(te.format()).strip()})
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


if __name__ == "__main__":
    main()
