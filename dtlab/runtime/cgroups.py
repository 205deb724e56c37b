"""Control groups: one per sandboxed submission, so that the kernel bounds and counts all of it.

A cgroup holds every process the submission starts, however it starts them (forks, daemons,
sessions of their own), and the kernel enforces its limits on all of them together::

    cg = Cgroup.create("alice-00_launch", memory_bytes=4 << 30, tasks=512)   # None: not here
    cg.procs_files            # write a pid into each to move that process in (children follow)
    cg.cpu_seconds()          # CPU time of everything it ran, living and dead
    cg.kill(); cg.remove()

* **memory**: the OOM killer ends a process of this group when the group is over its limit; the
  rest of the machine never notices (``memory.limit_in_bytes`` in v1, ``memory.max`` in v2).
* **tasks**: ``fork`` fails once the group holds ``tasks`` processes and threads (``pids.max``):
  a fork bomb stops there.
* **CPU time**: ``cpuacct.usage`` (v1) / ``cpu.stat`` (v2) count the CPU the group used, which is
  what a busy machine does not change: grading limits are in CPU seconds, not wall seconds.

Both hierarchies are supported: cgroup v1 (one mount per controller; the memory, pids and
cpuacct ones are used) and v2 (one unified tree; the group is made under ``$DTLAB_CGROUP`` when
an instructor delegated one, e.g. ``systemd-run --user --scope -p Delegate=yes``, else under
``/sys/fs/cgroup/dtlab`` when this process may write there, as root may).
"""

from __future__ import annotations

import os
import signal
import time

_V1_CONTROLLERS = ("memory", "pids", "cpuacct")


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of every cgroup mount."""
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                    out.append((parts[1], parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and '' for v2 ('0::/path')."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except OSError:
        pass
    return out


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class Cgroup:
    """One control group (its directories: one per v1 controller, or one v2 directory)."""

    def __init__(self, dirs: list[str], version: int):
        self.dirs = dirs
        self.version = version

    # -- making one ---------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, memory_bytes: int, tasks: int) -> "Cgroup | None":
        """A new group with these limits, or None where this process may not make one."""
        for make in (cls._create_v2, cls._create_v1):
            try:
                cg = make(name)
            except OSError:
                cg = None
            if cg is not None:
                try:
                    cg._limit(memory_bytes, tasks)
                    return cg
                except OSError:
                    cg.remove()
        return None

    @classmethod
    def _create_v1(cls, name: str) -> "Cgroup | None":
        mounts = {c: m for m, kind, opts in _mounts() if kind == "cgroup"
                  for c in _V1_CONTROLLERS if c in opts}
        if set(mounts) != set(_V1_CONTROLLERS):
            return None
        own = _own_paths()
        dirs = []
        try:
            for c in _V1_CONTROLLERS:
                d = os.path.join(mounts[c], own.get(c, "/").lstrip("/"), "dtlab", name)
                os.makedirs(d)
                dirs.append(d)
        except OSError:
            Cgroup(dirs, 1).remove()
            raise
        return cls(dirs, 1)

    @classmethod
    def _create_v2(cls, name: str) -> "Cgroup | None":
        unified = [m for m, kind, _ in _mounts() if kind == "cgroup2"]
        if not unified:
            return None
        parent = os.environ.get("DTLAB_CGROUP") or os.path.join(unified[0], "dtlab")
        top = os.path.dirname(parent)
        try:
            available = set(_read(os.path.join(unified[0], "cgroup.controllers")).split())
        except OSError:
            return None
        if not {"memory", "pids"} <= available:
            return None  # a hybrid machine's v2 mount without the controllers: use v1
        if not os.path.isdir(parent):
            os.makedirs(parent)
            _write(os.path.join(top, "cgroup.subtree_control"), "+memory +pids +cpu")
        enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
        if not {"memory", "pids"} <= enabled:
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids +cpu")
        d = os.path.join(parent, name)
        os.makedirs(d)
        return cls([d], 2)

    def _limit(self, memory_bytes: int, tasks: int) -> None:
        if self.version == 2:
            d = self.dirs[0]
            _write(os.path.join(d, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), "0")
            _write(os.path.join(d, "pids.max"), str(tasks))
        else:
            memory, pids, _ = self.dirs
            _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
            _write(os.path.join(pids, "pids.max"), str(tasks))

    # -- using one ----------------------------------------------------------------------------
    @property
    def procs_files(self) -> list[str]:
        """Write a pid into each of these to move that process (and its future children) in."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self.procs_files[0]).split()]
        except (OSError, ValueError):
            return []

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every process the group held, living and exited."""
        try:
            if self.version == 2:
                for line in _read(os.path.join(self.dirs[0], "cpu.stat")).splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return int(_read(os.path.join(self.dirs[2], "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            return 0.0

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended for being over this group's memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in _read(os.path.join(self.dirs[0], name)).splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def memory_usage(self) -> int:
        """Bytes charged to the group now (pages it touched since it joined: v1 and v2 move no
        earlier charges with a process)."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int(_read(os.path.join(self.dirs[0], name)))

    def limit_memory(self, memory_bytes: int) -> None:
        """Set the group's memory limit, swap included where the controller counts swap (v1's
        ``memory.memsw.*`` exists only with swap accounting on; v2's ``memory.swap.max``)."""
        d = self.dirs[0]
        if self.version == 2:
            _write(os.path.join(d, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), "0")
            return
        # memory+swap may never be below memory alone: raise it first when raising, after when
        # lowering (the kernel refuses the other order with EINVAL)
        memsw = os.path.join(d, "memory.memsw.limit_in_bytes")
        order = ["memory.limit_in_bytes"]
        if os.path.exists(memsw):
            lowering = memory_bytes < int(_read(os.path.join(d, "memory.limit_in_bytes")))
            order = order + [memsw] if lowering else [memsw] + order
        for name in order:
            _write(os.path.join(d, name), str(memory_bytes))

    def memory_events(self) -> dict:
        """What the kernel counted for the group's memory: ``oom_kill`` (processes the OOM killer
        ended), ``limit_bytes``, ``peak_bytes`` (the highest usage, where the kernel keeps it)
        and ``failcnt`` (v1: times usage hit the limit), with the raw files they came from.
        v1: memory.oom_control, memory.limit_in_bytes, memory.max_usage_in_bytes,
        memory.failcnt; v2: memory.events, memory.max, memory.peak (Linux 5.19+)."""
        d = self.dirs[0]
        names = (("memory.events", "memory.max", "memory.peak") if self.version == 2 else
                 ("memory.oom_control", "memory.limit_in_bytes", "memory.max_usage_in_bytes",
                  "memory.failcnt"))
        raw = {}
        for name in names:
            try:
                raw[name] = _read(os.path.join(d, name))
            except OSError:
                pass

        def number(name, key=None):
            text = raw.get(name, "")
            if key is not None:
                text = next((line.split()[1] for line in text.splitlines()
                             if line.split()[:1] == [key]), "")
            text = text.strip()
            return int(text) if text.isdigit() else None  # v2 "max": no limit

        if self.version == 2:
            out = {"oom_kill": number("memory.events", "oom_kill"),
                   "limit_bytes": number("memory.max"), "peak_bytes": number("memory.peak"),
                   "max_events": number("memory.events", "max")}
        else:
            out = {"oom_kill": number("memory.oom_control", "oom_kill"),
                   "limit_bytes": number("memory.limit_in_bytes"),
                   "peak_bytes": number("memory.max_usage_in_bytes"),
                   "failcnt": number("memory.failcnt")}
        return {**out, "files": raw}

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL everything in the group, until it is empty (a fork races the first pass)."""
        if self.version == 2 and os.path.exists(os.path.join(self.dirs[0], "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs[0], "cgroup.kill"), "1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove the group's directories."""
        self.kill()
        # the last processes take a moment to leave after SIGKILL: on a loaded machine (one in
        # the middle of an OOM kill, say) seconds; a group is never left behind for that
        deadline = time.monotonic() + 60.0
        for d in self.dirs:
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    self.kill(timeout=0.5)
                    time.sleep(0.05)
