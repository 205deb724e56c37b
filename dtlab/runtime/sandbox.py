"""The OS sandbox graded code runs in: what its processes can see, reach and use, enforced by the
kernel rather than by anything inside the process the sandboxed code could change.

One :class:`Box` per submission; each process started through it is one bubblewrap sandbox::

    box = Box("alice-00_launch", Limits(memory_bytes=4 << 30))
    view = View(ro=[(world_dtlab, real_dtlab_dir)], rw=[(scratch, "/home/learner")],
                home="/home/learner")
    proc = box.popen([sys.executable, "-m", "dtlab.course.learner"], view,
                     stdin=PIPE, stdout=PIPE, stderr=PIPE)
    box.cpu_seconds()       # CPU of everything the box ran, living and exited
    box.close()             # kill what is left (the cgroup), remove the cgroup

A sandbox (``bwrap``, https://github.com/containers/bubblewrap) has

* its own **user** namespace with no capabilities and no way to make another one
  (``--cap-drop ALL --disable-userns``): it cannot unmount what hides a file, nor nest a sandbox;
* its own **PID** namespace: it sees only its own processes, and when its first process ends the
  kernel kills every other one in it, daemons and processes of their own session included;
  ``--die-with-parent`` ends it if the process that started it dies;
* its own **mount** namespace, built from nothing: a read-only system (``/usr``, ``/etc``, the
  Python installation), the view's binds, a private ``/tmp`` and home folder (bounded tmpfs:
  nothing it writes reaches the machine's disks) and ``/dev``, and nothing else -- no other
  submission, no gradebook, no course source, no repository beyond what the view binds;
* its own **network** namespace with loopback only, and its own IPC and UTS namespaces;
* a **cgroup** shared by every sandbox of the box (:mod:`.cgroups`): memory and task limits for
  all of them together, and their CPU time. Where no cgroup can be made, per-process rlimits
  (address space, processes, CPU) stand in, and :attr:`Box.limited_by` says so.

``Box(..., isolate=False)`` starts the same processes without bwrap (``dtlab course autograde
--unsafe-no-sandbox``): same limits and accounting, no isolation.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import psutil

from .cgroups import Cgroup

GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """What one submission may use, all its processes together (per process without a cgroup)."""

    memory_bytes: int = 4 * GiB
    tasks: int = 512            # processes and threads
    cpu_s_per_process: float = 900.0   # RLIMIT_CPU: a backstop; graders poll CPU per call
    tmp_bytes: int = 1 * GiB    # each of /tmp and home (tmpfs: their pages count as memory)

    def __post_init__(self):
        for name in ("memory_bytes", "tasks", "cpu_s_per_process", "tmp_bytes"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"Limits.{name} must be a positive finite number, got {v!r}")


@dataclass
class View:
    """What a sandbox sees beyond the read-only system and Python: (source, destination) binds,
    the folder it starts in (``home``: a fresh tmpfs of its own, like /tmp) and its environment
    (added to a clean one)."""

    ro: list[tuple[str, str]] = field(default_factory=list)
    rw: list[tuple[str, str]] = field(default_factory=list)
    home: str = "/home/learner"
    env: dict[str, str] = field(default_factory=dict)


_PROBE: dict[str, str | None] = {}


def unavailable() -> str | None:
    """Why this machine cannot sandbox (None when it can): no bwrap, or no user namespaces."""
    if "reason" in _PROBE:
        return _PROBE["reason"]
    reason = None
    if not sys.platform.startswith("linux"):
        reason = f"the sandbox needs Linux namespaces; this is {sys.platform}"
    elif not shutil.which("bwrap"):
        reason = ("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; "
                  "Fedora: dnf install bubblewrap)")
    else:
        try:
            probe = subprocess.run(["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop",
                                    "ALL", "--ro-bind", "/", "/", "true"], capture_output=True,
                                   text=True, timeout=30)
            if probe.returncode != 0:
                reason = ("bwrap cannot create a sandbox here (user namespaces disabled? "
                          f"on Ubuntu 24.04 AppArmor restricts them): {probe.stderr.strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            reason = f"bwrap did not run: {e}"
    _PROBE["reason"] = reason
    return reason


def _python_roots() -> list[str]:
    """The folders this Python needs, read-only: its prefixes (a venv and its base)."""
    out: list[str] = []
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))):
        p = os.path.realpath(p)
        if p != "/" and not p.startswith("/usr/") and p != "/usr" and p not in out:
            out.append(p)
    # a venv's own path may be a symlink to its real one: bind both spellings
    for p in (sys.prefix, sys.base_prefix):
        if os.path.realpath(p) != p and p not in out:
            out.append(p)
    return sorted(out, key=len)


def _system_binds() -> list[str]:
    args: list[str] = []
    for d in ("/usr", "/etc"):
        args += ["--ro-bind", d, d]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = "/" + name
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    for p in _python_roots():
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        else:
            args += ["--ro-bind", p, p]
    return args


def bwrap_argv(view: View, limits: Limits) -> list[str]:
    """The bubblewrap command line (up to ``--``) for one sandbox with this view."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", "--hostname", "sandbox", *_system_binds(),
            "--proc", "/proc", "--dev", "/dev", "--size", str(int(limits.tmp_bytes)),
            "--tmpfs", "/tmp"]
    args += ["--size", str(int(limits.tmp_bytes)), "--tmpfs", view.home]
    for src, dst in view.ro:
        args += ["--ro-bind", src, dst]
    for src, dst in view.rw:
        args += ["--bind", src, dst]
    args += ["--chdir", view.home, "--clearenv"]
    for k, v in _environment(view).items():
        args += ["--setenv", k, v]
    return [*args, "--"]


def _environment(view: View) -> dict[str, str]:
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin",
                                    "/usr/bin", "/bin"]),
           "HOME": view.home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
           # one thread per process: torch would start one per core of a big grading machine,
           # and the box's tasks and CPU time are shared by all of them
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.update(view.env)
    return env


# The first process of each sandbox joins the box's cgroup before bwrap starts anything, and
# takes the rlimits (hard: nothing inside may raise them). A shell, not preexec_fn: the caller
# is often a Jupyter kernel, with threads.
_JOIN = ('for f in $DTLAB_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; '
         'ulimit -t "$DTLAB_RLIMIT_CPU"; '
         'if [ -n "$DTLAB_RLIMIT_AS" ]; then ulimit -v "$DTLAB_RLIMIT_AS"; fi; '
         'if [ -n "$DTLAB_RLIMIT_NPROC" ]; then ulimit -u "$DTLAB_RLIMIT_NPROC"; fi; '
         'unset DTLAB_CGROUP_PROCS DTLAB_RLIMIT_CPU DTLAB_RLIMIT_AS DTLAB_RLIMIT_NPROC; '
         'exec "$@"')


class Box:
    """One submission's processes: each :meth:`popen` a sandbox, all in one cgroup."""

    def __init__(self, name: str, limits: Limits | None = None, isolate: bool = True,
                 cgroup: Cgroup | None = None, scratch: str | None = None):
        """``cgroup``: an existing group to run in (its owner removes it); else the box makes one
        where it can, and removes it on :meth:`close`. ``scratch``: where the home folders of
        unsandboxed processes go (default: the temp dir), so that whoever removes it removes
        them even if this box's owner is killed before :meth:`close`."""
        self.scratch = scratch
        if isolate and (why := unavailable()):
            raise RuntimeError(f"no sandbox on this machine: {why}")
        self.limits = limits or Limits()
        self.isolate = isolate
        self._owns_cgroup = cgroup is None
        self.cgroup = cgroup if cgroup is not None else Cgroup.create(
            f"{name}-{uuid.uuid4().hex[:8]}", self.limits.memory_bytes, self.limits.tasks)
        self.procs: list[subprocess.Popen] = []
        self._seen_cpu: dict[int, float] = {}  # without a cgroup: last CPU seen per process
        self._homes: list[str] = []  # without a sandbox: each process's home folder

    @property
    def limited_by(self) -> str:
        if self.cgroup is not None:
            return f"cgroup v{self.cgroup.version}"
        return "per-process rlimits (no cgroup could be made)"

    def popen(self, argv: list[str], view: View, **kwargs) -> subprocess.Popen:
        """Start ``argv`` in a new sandbox with ``view``; ``kwargs`` go to ``subprocess.Popen``
        (stdin/stdout/stderr). The process starts in ``view.home``."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "DTLAB_CGROUP_PROCS": " ".join(self.cgroup.procs_files) if self.cgroup else "",
               "DTLAB_RLIMIT_CPU": str(int(math.ceil(self.limits.cpu_s_per_process)))}
        if self.cgroup is None:  # the kernel cannot bound the box as a whole: bound each process
            env["DTLAB_RLIMIT_AS"] = str(self.limits.memory_bytes // 1024)
            if os.geteuid() != 0:  # root is exempt from RLIMIT_NPROC; it has cgroups instead
                env["DTLAB_RLIMIT_NPROC"] = str(self.limits.tasks + _my_process_count())
        if self.isolate:
            cmd = [*bwrap_argv(view, self.limits), *argv]
        else:
            cmd = list(argv)
            env.update(_environment(view))
            import tempfile

            env["HOME"] = tempfile.mkdtemp(prefix="dtlab-unsandboxed-home-", dir=self.scratch)
            self._homes.append(env["HOME"])
            kwargs.setdefault("cwd", env["HOME"])
            kwargs["start_new_session"] = True
        proc = subprocess.Popen(["/bin/sh", "-c", _JOIN, "sh", *cmd], env=env, close_fds=True,
                                **kwargs)
        self.procs.append(proc)
        return proc

    def spawn_warm(self, zygote, main: str, args: list[str], view: View,
                   path: list[str] = (), **stdio):
        """Like :meth:`popen`, but the process is forked from ``zygote``
        (:class:`dtlab.runtime.zygote.Zygote`, whose imports it inherits) and moved into a new
        sandbox with ``view``; it runs ``main`` (``"module:function"``) with ``args`` and ``path``
        first on its ``sys.path`` (folders the view shows where they are here). Returns a
        Popen-like handle (``stdio``: :meth:`Zygote.spawn`'s ``stdin``/``separate_stderr``)."""
        rlimits = {"cpu": int(math.ceil(self.limits.cpu_s_per_process))}
        if self.cgroup is None:
            rlimits["as"] = self.limits.memory_bytes
            if os.geteuid() != 0:
                rlimits["nproc"] = self.limits.tasks + _my_process_count()
        holder = self._hold(view) if self.isolate else None
        env = _environment(view)
        cwd = view.home
        if not self.isolate:
            import tempfile

            env["HOME"] = cwd = tempfile.mkdtemp(prefix="dtlab-unsandboxed-home-", dir=self.scratch)
            self._homes.append(cwd)
        proc = zygote.spawn(main, args, env=env, cwd=cwd, path=path, holder=holder,
                            cgroup=self.cgroup.procs_files if self.cgroup else [],
                            rlimits=rlimits, **stdio)
        self.procs.append(proc)
        return proc

    def _hold(self, view: View, timeout: float = 30.0) -> int:
        """Start an empty sandbox with ``view`` (its first process idles until the box closes);
        return the host pid of that process, whose namespaces and root a fork enters."""
        import json
        import time

        r, w = os.pipe()
        argv = bwrap_argv(view, self.limits)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "DTLAB_CGROUP_PROCS": " ".join(self.cgroup.procs_files) if self.cgroup else "",
               "DTLAB_RLIMIT_CPU": str(int(math.ceil(self.limits.cpu_s_per_process)))}
        cmd = [argv[0], "--info-fd", str(w), *argv[1:], "/bin/sh", "-c", "read x"]
        proc = subprocess.Popen(["/bin/sh", "-c", _JOIN, "sh", *cmd], env=env, close_fds=True,
                                pass_fds=(w,), stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(w)
        self.procs.append(proc)
        info = b""
        with os.fdopen(r, "rb") as f:
            while b"}" not in info:
                chunk = f.read1(4096) if hasattr(f, "read1") else f.read(4096)
                if not chunk:
                    break
                info += chunk
        try:
            init = json.loads(info[:info.index(b"}") + 1])["child-pid"]
        except (ValueError, KeyError):
            proc.kill()
            raise RuntimeError("bwrap did not start the sandbox: "
                               + proc.stderr.read().decode(errors="replace").strip()[:300])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # bwrap's init starts the idle process next
            try:
                kids = psutil.Process(init).children()
            except psutil.Error:
                kids = []
            if kids:
                return kids[0].pid
            if proc.poll() is not None:
                break
            time.sleep(0.002)
        proc.kill()
        raise RuntimeError("bwrap's sandbox did not start its first process: "
                           + proc.stderr.read().decode(errors="replace").strip()[:300])

    # -- what the box used ----------------------------------------------------------------------
    def cpu_seconds(self) -> float:
        """CPU time of everything this box ran so far (the cgroup's count; else the processes
        seen alive, each at its last sighting)."""
        if self.cgroup is not None:
            return self.cgroup.cpu_seconds()
        for proc in self.procs:
            for p in _tree(proc.pid):
                try:
                    t = p.cpu_times()
                    self._seen_cpu[p.pid] = max(self._seen_cpu.get(p.pid, 0.0),
                                                t.user + t.system + t.children_user + t.children_system)
                except psutil.Error:
                    pass
        return sum(self._seen_cpu.values())

    def alive(self) -> bool:
        if self.cgroup is not None:
            return bool(self.cgroup.pids())
        return any(_tree(p.pid) for p in self.procs)

    # -- ending it ------------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL every process of the box (a sandbox's namespace dies with its first process;
        the box's own cgroup catches anything else)."""
        for proc in self.procs:
            kill_tree(proc.pid)
        if self.cgroup is not None and self._owns_cgroup:
            self.cgroup.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass

    def close(self) -> None:
        self.kill()
        if self.cgroup is not None and self._owns_cgroup:
            self.cgroup.remove()
        self.cgroup = None
        self.procs.clear()
        for home in self._homes:
            shutil.rmtree(home, ignore_errors=True)
        self._homes.clear()

    def __enter__(self) -> "Box":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants, deepest first."""
    for p in reversed(_tree(pid)):
        try:
            p.kill()
        except psutil.Error:
            pass


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system, with exited children that were waited for) of ``pid`` and every
    descendant alive now."""
    total = 0.0
    for p in _tree(pid):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _my_process_count() -> int:
    uid = os.getuid()
    n = 0
    for p in psutil.process_iter(["uids"]):
        try:
            n += p.info["uids"].real == uid
        except (psutil.Error, TypeError, AttributeError):
            pass
    return n


