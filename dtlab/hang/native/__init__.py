"""Below Python: what native tools see of a rank stuck in a collective (notebook 07, "Below Python").

Python stacks say which line a rank waits on; the tools below say what it waits *for*:

* ``py-spy dump --native --pid PID`` -- the C/C++ frames between the Python ones, for the threads
  that run Python (:func:`native_dump`, :mod:`.pyspy`). Live, on any Linux machine py-spy can
  attach to: ``dtlab.run(fn, ..., timeout=T, native_stacks=True)`` takes it for every live rank
  at the timeout (``HangError.native``), with every OS thread of each (``HangError.threads``).
* ``cuda-gdb -batch -p PID -ex "info threads" -ex "thread apply all bt" -ex "info cuda kernels"``
  -- every host thread, and what runs on the GPU (:mod:`.cuda_gdb`).
* ``ncclras`` / ``ncclras -f json`` -- NCCL's RAS client: each communicator's state as NCCL's own
  threads report it, across processes (:mod:`.ras`).

The GPU side is recorded (``data/h100x2-native/``, 2x H100, NCCL 2.28.9); each reader keeps what
it did not understand in ``unparsed`` instead of guessing::

    from dtlab import course
    from dtlab.hang import native
    gdb = native.cuda_gdb.read(course.recorded("h100x2-native/cuda-gdb-rank0.txt").text)
    print(native.cuda_gdb.render(gdb))
"""

from __future__ import annotations

from ...runtime.stacks import os_threads, py_spy_dump
from . import cuda_gdb, pyspy, ras

__all__ = ["native_dump", "os_threads", "pyspy", "cuda_gdb", "ras"]


def native_dump(pid: int, timeout: float = 20.0) -> tuple[bool, str]:
    """(ok, text): ``py-spy dump --native --pid PID`` (needs ptrace permission, as py-spy does;
    where it is refused, ``ok`` is False and ``text`` says why). :func:`.pyspy.read` reads it.

    >>> ok, text = native_dump(pid)                     # doctest: +SKIP
    >>> print(pyspy.render(pyspy.read(text)))          # doctest: +SKIP
    """
    return py_spy_dump(pid, timeout, native=True)
