"""Warm starts: Python processes forked from one that has already imported what they need, then
moved into their sandbox.

``import torch`` costs seconds of CPU; a grading run starts dozens of rank processes that each
need it. A zygote imports it once and forks a process per request, in well under a second of
CPU. The zygote itself never runs a learner's code: it is the grader's own fresh process, it
imports only ``preload`` -- third-party packages, never dtlab, and none that the job's world
takes away (:mod:`dtlab.course.world`; the caller leaves those out) -- and it holds no test
data. What a fork runs is the request's: ``path`` put first on its ``sys.path`` (the world), then
``main``, an importable function, with its arguments::

    z = Zygote.shared(["torch", "torch.distributed", "cloudpickle"])
    p = z.spawn("dtlab.runtime.observed_rank:main", ["/relay.sock"], path=[world.root],
                env=..., cwd=..., holder=pid, cgroup=box.cgroup.procs_files)
    p.stdout.read(); p.wait()                     # like a subprocess.Popen
    box.spawn_warm(z, main, args, view)           # the same, into a new sandbox of the box

**Into the sandbox.** A fork is outside any sandbox until it enters one, as ``nsenter``/``docker
exec`` do: :meth:`Box.spawn_warm` first starts bubblewrap with an idle first process (the
*holder*), which builds the namespaces and the view exactly as for a cold start. The fork joins
the box's cgroup and takes its rlimits, enters the holder's user (outer, then inner: bwrap's
``--disable-userns``), IPC, UTS, network, cgroup, PID and mount namespaces and its root, forks
once more to be inside the PID namespace, then drops every capability (bounding set included)
and sets no-new-privileges before running ``main``. From then on it is indistinguishable from a
process bwrap started: same view, no capabilities, no way to make a user namespace, loopback
only, it sees only its sandbox's processes, and it dies with the sandbox. No file descriptor of
the zygote's survives the fork but the three it was given.

Without a ``holder`` the fork runs as a plain child (JupyterLab; ``--unsafe-no-sandbox``).

Run as ``python -I zygote.py FD``, the zygote reads its configuration (JSON) from stdin and
serves requests on file descriptor FD: one datagram each (``SOCK_SEQPACKET``), JSON plus the
fork's stdin/stdout/stderr as passed file descriptors; it answers ``{"pid": N}`` (or
``{"error": ...}``) and later ``{"exit": N, "code": C}``. It ends when the other end closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import traceback

PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
NS_GET_PARENT = (0xB7 << 8) | 0x2
CLONE = {"user": 0x10000000, "mnt": 0x00020000, "net": 0x40000000, "ipc": 0x08000000,
         "uts": 0x04000000, "pid": 0x20000000, "cgroup": 0x02000000}
MAX_MSG = 1 << 20
# the zygote's own environment while it imports (a fork gets the request's): one thread per
# process, no GPU -- what its forks will run with
ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "CUDA_VISIBLE_DEVICES": "", "LANG": "C.UTF-8"}


# ---- the fork's side ---------------------------------------------------------------------------

def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _check(ok: bool, what: str) -> None:
    if not ok:
        import ctypes

        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _setns(fd: int, kind: str) -> None:
    _, libc = _libc()
    _check(libc.setns(fd, CLONE[kind]) == 0, f"setns({kind})")


def _ns_id(fd_or_path) -> int:
    return os.stat(fd_or_path).st_ino


def enter(holder: int) -> None:
    """Move this (single-threaded) process into the sandbox whose first process is ``holder``:
    its namespaces and root. Returns in a child inside its PID namespace; this process waits
    for that child and exits with its status."""
    import fcntl

    kinds = ("user", "ipc", "uts", "net", "cgroup", "pid", "mnt")
    ns = {k: os.open(f"/proc/{holder}/ns/{k}", os.O_RDONLY | os.O_CLOEXEC) for k in kinds}
    root = os.open(f"/proc/{holder}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cwd = os.open(f"/proc/{holder}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    outer = fcntl.ioctl(ns["user"], NS_GET_PARENT)  # bwrap --disable-userns nests one more
    own = {k: _ns_id(f"/proc/self/ns/{k}") for k in kinds}  # (not readable once chrooted)
    try:
        user = own["user"]
        if _ns_id(outer) != user:
            _setns(outer, "user")  # full capabilities there: the owner of the namespaces below
            user = _ns_id(outer)
        for k in ("ipc", "uts", "net", "cgroup", "pid", "mnt"):
            if _ns_id(ns[k]) != own[k]:
                _setns(ns[k], k)
        os.fchdir(root)
        os.chroot(".")
        os.fchdir(cwd)
        if _ns_id(ns["user"]) != user:
            _setns(ns["user"], "user")
    finally:
        for fd in (*ns.values(), outer, root, cwd):
            os.close(fd)
    child = os.fork()  # the PID namespace applies to children only
    if child:
        _die_with_parent()
        code = _wait_code(child)
        if code < 0:  # killed: so is this one, by the same signal
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def _wait_code(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
                else (status >> 8)
        except InterruptedError:
            continue


def _die_with_parent() -> None:
    _, libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def drop_privileges() -> None:
    """No capabilities left, none to regain (bounding and ambient sets emptied), no new ones
    through exec (no-new-privileges)."""
    ctypes, libc = _libc()
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: fine
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: all zero
    _check(libc.capset(ctypes.byref(header), data) == 0, "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs")


def _limit(rlimits: dict) -> None:
    import resource

    names = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC}
    for k, v in rlimits.items():
        if v is not None:
            resource.setrlimit(names[k], (int(v), int(v)))


def _inherit(what: dict) -> None:
    """The requester's umask and resource limits, as a fresh child of it would have them (a
    limit this process may not raise stays as it is)."""
    import resource

    if "umask" in what:
        os.umask(int(what["umask"]))
    for name, (soft, hard) in (what.get("rlimits") or {}).items():
        try:
            resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
        except (AttributeError, ValueError, OSError):
            pass


class ZygoteTimeout(RuntimeError):
    """The zygote did not answer a request in time (stopped, or starved of CPU)."""


def _child(req: dict, fds: list[int], sock: socket.socket) -> None:
    """In the fork: become the requested process, run ``main``, exit. Never returns."""
    code = 1
    try:
        sock.close()
        for target, fd in zip((0, 1, 2), fds):  # first: what goes wrong below is told there
            os.dup2(fd, target)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        if req.get("die_with_parent", True):
            _die_with_parent()
        for path in req.get("cgroup") or []:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        _limit(req.get("rlimits") or {})
        _inherit(req.get("inherit") or {})
        if req.get("holder"):
            enter(int(req["holder"]))
            _die_with_parent()
            drop_privileges()
        os.closerange(3, _max_fd())
        os.environ.clear()
        os.environ.update(req.get("env") or {})
        sys.path[:0] = req.get("path") or []
        os.chdir(req.get("cwd") or "/")
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(s, signal.SIG_DFL if s != signal.SIGINT else signal.default_int_handler)
        module, _, name = req["main"].partition(":")
        import importlib

        fn = getattr(importlib.import_module(module), name)
        fn(*req.get("args", []))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        try:
            traceback.print_exc()
        except Exception:
            pass
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 65536


# ---- the zygote process ------------------------------------------------------------------------

def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]  # a script's folder: not a place to import from
    config = json.loads(sys.stdin.readline())
    import importlib

    sys.path[:0] = config.get("path", [])
    for name in config.get("preload", []):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # not installed: the fork finds it absent too
    sock = socket.socket(fileno=int(sys.argv[1]))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a fork could not use CUDA
        sock.send(json.dumps({"error": "CUDA was initialised while importing the preload"}).encode())
        return
    children: set[int] = set()
    parent = os.getppid()
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _reap(children, sock)
        if os.getppid() != parent:
            return  # the parent died, though a process it forked may hold the socket open
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MSG, 3)
        except OSError:
            return
        if not data:
            return  # the grader is gone: its forks die with it (cgroup, sandbox, PDEATHSIG)
        try:
            req = json.loads(data)
        except ValueError as e:
            sock.send(json.dumps({"error": f"bad request: {e}"}).encode())
            continue
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, fds, sock)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"id": req.get("id"), "pid": pid}).encode())


def _reap(children: set[int], sock: socket.socket) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
                else status >> 8
            try:
                sock.send(json.dumps({"exit": pid, "code": code}).encode())
            except OSError:
                pass


# ---- the grader's side -------------------------------------------------------------------------

class Forked:
    """A process the zygote forked, as much of ``subprocess.Popen`` as its callers use:
    ``pid``, ``stdin``/``stdout``/``stderr``, ``poll()``, ``wait()``, ``returncode``, ``kill()``."""

    def __init__(self, pid: int, zygote: "Zygote"):
        self.pid, self.stdout, self.stdin, self.stderr = pid, None, None, None
        self.returncode: int | None = None
        self._zygote = zygote
        self._done = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked rank {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()


class Zygote:
    """One zygote process, with ``preload`` imported."""

    _shared: dict[tuple, "Zygote"] = {}
    _lock = threading.Lock()

    def __init__(self, preload: list[str], env: dict[str, str] | None = None, *,
                 full_env: dict[str, str] | None = None, cwd: str | None = None):
        """A zygote that imported ``preload``. By default it is the grader's: ``python -I``
        (no user site, no PYTHON* variables), :data:`ENV` plus ``env``, no cwd on its path.
        With ``full_env`` it is started as a plain interpreter in that environment, ``cwd``
        first on its path -- what ``python -m`` there would be (:mod:`.procs`' warm ranks)."""
        import subprocess

        for name in preload:
            if name.split(".")[0] == "dtlab":
                raise ValueError(f"a zygote preloads no dtlab module ({name}): a fork imports "
                                 f"dtlab from its own world")
        self.preload = list(preload)
        self.owner = os.getpid()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if full_env is None:
            argv = [sys.executable, "-I", os.path.abspath(__file__), str(child.fileno())]
            env = {**ENV, **(env or {}), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            argv, env = [sys.executable, os.path.abspath(__file__), str(child.fileno())], full_env
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, pass_fds=(child.fileno(),),
                                     close_fds=True, start_new_session=True, env=env, cwd=cwd)
        self.pid = self.proc.pid
        child.close()
        self.sock = parent
        config = {"preload": preload, "path": [cwd] if cwd else []}
        self.proc.stdin.write((json.dumps(config) + "\n").encode())
        self.proc.stdin.close()
        hello = self.sock.recv(MAX_MSG)
        if not hello or "ready" not in json.loads(hello):
            self.sock.close()
            self.proc.wait()
            why = json.loads(hello).get("error") if hello else f"it exited ({self.proc.returncode})"
            raise RuntimeError(f"the zygote did not start: {why}")
        self._forks: dict[int, Forked] = {}
        self._pending: list = []
        self._send_lock = threading.Lock()
        self._replies: list[dict] = []
        self._cv = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, daemon=True, name="dtlab-zygote").start()

    @classmethod
    def shared(cls, preload: list[str], env: dict[str, str] | None = None) -> "Zygote":
        """One zygote per ``preload`` for this process's lifetime (closed at exit)."""
        key = tuple(preload)
        with cls._lock:
            z = cls._shared.get(key)
            if z is None or not z.alive():
                z = cls._shared[key] = Zygote(list(preload), env)
                if len(cls._shared) == 1:
                    import atexit

                    atexit.register(cls.close_all)
            return z

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            for z in cls._shared.values():
                z.close()
            cls._shared.clear()

    def alive(self) -> bool:
        """Running, and this process's own (a fork of its owner shares the socket: not)."""
        return not self._closed and self.proc.poll() is None and os.getpid() == self.owner

    def busy(self) -> bool:
        """Some process it forked still runs."""
        with self._cv:
            return bool(self._forks)

    def spawn(self, main: str, args: list[str], *, env: dict[str, str], cwd: str,
              path: list[str] = (), holder: int | None = None, cgroup: list[str] | None = None,
              rlimits: dict | None = None, stdin: bool = False,
              separate_stderr: bool = False, files: tuple[str, str] | None = None,
              die_with_parent: bool = True, inherit: dict | None = None,
              reply_timeout: float = 60.0) -> Forked:
        """Fork a process that runs ``main`` (``"module:function"``) with ``args``, ``path``
        first on its ``sys.path``. Its stdout
        is the handle's ``stdout`` (a pipe), with stderr in it unless ``separate_stderr`` (then
        ``stderr``); ``files``: stdout and stderr go to these files instead (created or
        truncated); ``stdin``: a pipe to write to (``stdin``), else /dev/null.
        ``die_with_parent``: SIGKILL when the zygote dies (else the fork watches for itself).
        ``inherit``: ``{"umask": int, "rlimits": {"RLIMIT_NOFILE": [soft, hard], ...}}``, the
        caller's own, set in the fork as a fresh child of the caller would have them.
        :class:`ZygoteTimeout` when the zygote does not answer within ``reply_timeout``."""
        ours, theirs = [], []
        try:
            if stdin:
                r, w = os.pipe()
                ours.append(("stdin", w, "wb"))
                theirs.append(r)
            else:
                theirs.append(os.open(os.devnull, os.O_RDONLY))
            if files:
                theirs += [os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                           for f in files]
            else:
                r, w = os.pipe()
                ours.append(("stdout", r, "rb"))
                theirs += [w, w]
            if separate_stderr and not files:
                r, w = os.pipe()
                ours.append(("stderr", r, "rb"))
                theirs[2] = w
            req = {"main": main, "args": list(args), "env": env, "cwd": cwd, "path": list(path),
                   "holder": holder, "die_with_parent": die_with_parent,
                   "cgroup": list(cgroup or []), "rlimits": rlimits or {},
                   "inherit": inherit or {}}
            with self._send_lock:
                socket.send_fds(self.sock, [json.dumps(req).encode()], theirs)
                reply = self._next_reply(reply_timeout)
        except BaseException:
            for _, fd, _ in ours:
                os.close(fd)
            raise
        finally:
            for fd in set(theirs):
                os.close(fd)
        if "pid" not in reply:
            for _, fd, _ in ours:
                os.close(fd)
            raise RuntimeError(f"the zygote could not fork: {reply.get('error', reply)}")
        p = Forked(reply["pid"], self)
        for name, fd, mode in ours:
            setattr(p, name, os.fdopen(fd, mode, buffering=0 if mode == "rb" else -1))
        with self._cv:
            self._forks[p.pid] = p
            for pid, code in [x for x in self._pending if x[0] == p.pid]:
                p._exited(code)
            self._pending = [x for x in self._pending if x[0] != p.pid]
        return p

    def _next_reply(self, timeout: float = 60.0) -> dict:
        with self._cv:
            if not self._cv.wait_for(lambda: self._replies or self._closed, timeout):
                raise ZygoteTimeout(f"the zygote (pid {self.pid}) did not answer in {timeout:g} s")
            if not self._replies:
                raise RuntimeError("the zygote is gone")
            return self._replies.pop(0)

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MSG)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            with self._cv:
                if "exit" in msg:
                    p = self._forks.pop(msg["exit"], None)
                    if p is None:
                        self._pending.append((msg["exit"], msg["code"]))
                    else:
                        p._exited(msg["code"])
                else:
                    self._replies.append(msg)
                self._cv.notify_all()
        with self._cv:
            self._closed = True
            for p in self._forks.values():  # the zygote is gone: so are its children
                if p.returncode is None:
                    p._exited(-signal.SIGKILL)
            self._cv.notify_all()

    def close(self) -> None:
        self._closed = True
        if os.getpid() != self.owner:  # a fork of the owner: its zygote is not ours to end
            self.sock.close()
            return
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def _reset_after_fork() -> None:
    Zygote._lock = threading.Lock()  # one another thread held at the fork stays held otherwise


os.register_at_fork(after_in_child=_reset_after_fork)


if __name__ == "__main__":
    main()
