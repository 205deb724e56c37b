"""Where is every rank right now? Python stacks of live rank processes.

Two ways, best first:

* ``py-spy dump --pid P`` reads the interpreter's memory from outside (needs ptrace permission:
  root, ``CAP_SYS_PTRACE``, or ``/proc/sys/kernel/yama/ptrace_scope`` = 0 for a child). It works
  even while the rank is blocked inside a C++ collective with the GIL released.
* faulthandler: every dtlab rank registers ``faulthandler.register(SIGUSR1, all_threads=True)``
  writing to a per-rank file, so a ``kill -USR1`` makes the rank dump its own threads from a C
  signal handler -- again without needing the blocked main thread to run Python code.

Below Python, on request (``dtlab.run(..., native_stacks=True)``): ``py-spy dump --native``, the
C/C++ frames between the Python ones, and every OS thread of the rank from ``/proc`` (py-spy
shows only threads that run Python; the collective library's own threads, gloo's or NCCL's, never
do). :mod:`dtlab.hang.native` reads both.
"""

from __future__ import annotations

import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor

from .transcript import ANSI

STACK_SIGNAL = signal.SIGUSR1


def py_spy_path() -> str | None:
    """The py-spy executable next to this interpreter, else on PATH."""
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        cand = os.path.join(d, "py-spy")
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("py-spy")


def py_spy_dump(pid: int, timeout: float = 10.0, native: bool = False) -> tuple[bool, str]:
    """(ok, text): ``py-spy dump`` of one process; ``native=True`` adds ``--native``: the C/C++
    frames between the Python ones (:mod:`dtlab.hang.native` reads them)."""
    exe = py_spy_path()
    if exe is None:
        return False, "py-spy not installed"
    env = dict(os.environ, NO_COLOR="1")
    env.pop("CLICOLOR_FORCE", None)
    env.pop("FORCE_COLOR", None)
    cmd = [exe, "dump", "--full-filenames", *(["--native"] if native else []), "--pid", str(pid)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"py-spy {' '.join(cmd[1:])} did not answer in {timeout:g} s"
    if p.returncode != 0:
        return False, (p.stderr or p.stdout).strip()
    return True, ANSI.sub("", p.stdout)  # Jupyter kernels force colour on; stacks are data


def os_threads(pid: int) -> list[dict]:
    """Every thread of a live process as the kernel lists it (``/proc/PID/task``): ``tid``,
    ``name`` (what the thread set with ``pthread_setname_np``, 15 characters at most), ``state``
    (``R`` running, ``S`` sleeping, ``D`` waiting on I/O, ...; ``man 5 proc``) and ``wchan``
    (the kernel function it sleeps in; "0" when running or when the kernel hides it).
    Empty where there is no ``/proc`` (macOS) or the process is gone.

    >>> os_threads(rank_pid)[0]                       # doctest: +SKIP
    {'tid': 12898, 'name': 'dtlab-rank0', 'state': 'S', 'wchan': 'futex_do_wait'}
    """
    out = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return out
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/stat") as f:
                stat = f.read()
            with open(f"{base}/comm") as f:
                name = f.read().rstrip("\n")
        except OSError:  # the thread ended between listdir and open
            continue
        try:
            with open(f"{base}/wchan") as f:
                wchan = f.read().strip()
        except OSError:
            wchan = ""
        # the name in stat is in parentheses and may hold any character: the state follows
        # the last ')'
        out.append({"tid": int(tid), "name": name, "state": stat.rsplit(")", 1)[1].split()[0],
                    "wchan": wchan})
    return out


def faulthandler_dump(pid: int, path: str, timeout: float = 3.0) -> tuple[bool, str]:
    """Ask a dtlab rank to dump its own stacks (SIGUSR1) into ``path`` and read them back."""
    start = os.path.getsize(path) if os.path.exists(path) else 0
    try:
        os.kill(pid, STACK_SIGNAL)
    except ProcessLookupError:
        return False, "process already gone"
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if size > start and size == last:  # grew, then stopped growing: dump complete
            break
        last = size
        time.sleep(0.05)
    if not os.path.exists(path) or os.path.getsize(path) <= start:
        return False, "no faulthandler dump appeared"
    with open(path, "rb") as f:
        f.seek(start)
        return True, f.read().decode("utf-8", "replace")


def capture(pids: dict[int, int], dump_files: dict[int, str] | None = None,
            prefer: str = "auto") -> tuple[str, dict[int, str]]:
    """Stacks of every live rank: returns (method, {rank: text}).

    ``prefer``: "auto" (py-spy, falling back to faulthandler per rank), "py-spy" or
    "faulthandler".
    """
    dump_files = dump_files or {}
    methods: dict[int, str] = {}

    def one(rank: int) -> str:
        pid = pids[rank]
        errors = []
        if prefer in ("auto", "py-spy"):
            ok, text = py_spy_dump(pid)
            if ok:
                methods[rank] = "py-spy"
                return text
            errors.append(f"py-spy: {text}")
        if prefer in ("auto", "faulthandler") and rank in dump_files:
            ok, text = faulthandler_dump(pid, dump_files[rank])
            if ok:
                methods[rank] = "faulthandler"
                return text
            errors.append(f"faulthandler: {text}")
        methods[rank] = "none"
        return "no stack captured (" + "; ".join(errors) + ")"

    if not pids:
        return "none", {}
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as ex:
        stacks = dict(zip(sorted(pids), ex.map(one, sorted(pids))))
    used = sorted(set(methods.values()))
    return "+".join(used), stacks


def capture_native(pids: dict[int, int], timeout: float = 20.0
                   ) -> tuple[dict[int, str], dict[int, list[dict]]]:
    """Below Python, for every live rank: ({rank: ``py-spy dump --native`` text, or one line
    saying why there is none}, {rank: :func:`os_threads`}). The threads are listed first: py-spy
    pauses the process while it unwinds, and a thread's state must be seen undisturbed."""
    threads = {r: os_threads(pid) for r, pid in pids.items()}

    def one(rank: int) -> str:
        ok, text = py_spy_dump(pids[rank], timeout, native=True)
        # one line: a caller prints it as the reason (ptrace refused, py-spy missing, ...)
        return text if ok else "no native stack captured (py-spy --native: " + " ".join(text.split()) + ")"

    if not pids:
        return {}, {}
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as ex:
        native = dict(zip(sorted(pids), ex.map(one, sorted(pids))))
    return native, threads


# --- reading stacks --------------------------------------------------------------------------

# py-spy:       "    fn (/path/file.py:42)"
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>.+):(?P<line>\d+)\)\s*$")
# faulthandler: '  File "/path/file.py", line 42 in fn'
_FH_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_THREAD = re.compile(r"^(Thread|Current thread) ")

# library code: torch, dtlab's runtime, installed packages, the standard library
_LIBRARY = re.compile(r"(^|/)(torch|dtlab/runtime)/|site-packages|dist-packages|^<frozen |"
                      r"/lib/python3\.\d+/")  # any Python's stdlib, also another machine's
_STDLIB = sysconfig.get_paths()["stdlib"]


def is_library(file: str) -> bool:
    """Code a user did not write: torch, dtlab's runtime, installed packages, the stdlib (also
    as a bare relative name such as ``threading.py``, the way some tools shorten it)."""
    if _LIBRARY.search(file) or file.startswith(_STDLIB):
        return True
    top = file.split("/", 1)[0].removesuffix(".py")
    return not os.path.isabs(file) and top in getattr(sys, "stdlib_module_names", ())


def parse_threads(text: str) -> list[list[tuple[str, str, int]]]:
    """Threads of a py-spy or faulthandler dump, each a list of (func, file, line), innermost first."""
    threads: list[list[tuple[str, str, int]]] = []
    cur: list[tuple[str, str, int]] | None = None
    for line in text.splitlines():
        if _THREAD.match(line):
            cur = []
            threads.append(cur)
            continue
        m = _PYSPY_FRAME.match(line) or _FH_FRAME.match(line)
        if m and cur is not None:
            cur.append((m["func"], m["file"], int(m["line"])))
    return threads


def main_thread(text: str) -> list[tuple[str, str, int]]:
    """The frames of the thread that runs the rank's work (the one under dtlab's worker main)."""
    threads = parse_threads(text)
    for frames in threads:  # the thread that runs the worker module (as a script, or forked)
        if any(fn in ("<module>", "forked") and "dtlab/runtime/worker" in f
               for fn, f, _ in frames):
            return frames
    for line, frames in zip([ln for ln in text.splitlines() if _THREAD.match(ln)], threads):
        if "MainThread" in line:
            return frames
    return threads[0] if threads else []


def innermost_user_frame(text: str) -> str | None:
    """'fn at file:line: <source>' for the innermost non-library frame of the main thread."""
    frames = main_thread(text)
    for func, file, line in frames:
        if not is_library(file):
            src = linecache.getline(file, line).strip()
            return f"{func} at {file}:{line}" + (f": {src}" if src else "")
    if frames:
        func, file, line = frames[0]
        return f"{func} at {file}:{line}"
    return None
