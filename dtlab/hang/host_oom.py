"""The ``host_oom`` kind: a rank that the kernel's OOM killer ends inside a memory-limited cgroup.

    dtlab hang host_oom --nprocs 3 --backend gloo --out evidence/host_oom   (root: makes a cgroup)
    dtlab diagnose evidence/host_oom

The reproducer (the launching process) makes a memory cgroup for the culprit rank before any rank
starts, as a batch system makes one per task (SLURM's task/cgroup), and hands its directories to
the ranks with the training loop's arguments. At BAD_STEP the culprit moves itself in, limits the
group a little above what it holds (swap included), and touches memory until the kernel kills it
with SIGKILL. Neither v1 nor v2 moves a process's earlier pages with it, so the group holds next
to nothing when the rank joins: the kill comes after MARGIN more, well under a second. Once the
ranks have ended the reproducer saves what the kernel counted for the group
(``cgroup-memory.json``: oom_kill, the limit, the peak usage, the raw files) into the evidence
folder and removes the group. cgroup v2 (``memory.events``, ``memory.max``, ``memory.peak``) is
written to the kernel's documentation but has not run here: this machine mounts v1.

The kernel's own log lines about the kill are added when ``/dev/kmsg`` can be read without
blocking. What this was written against (Linux 6.18, cgroup v1 memory controller, as root):
/dev/kmsg is readable, and a kill in the group logs ``oom-kill:constraint=CONSTRAINT_MEMCG,...,
oom_memcg=/.../dtlab/NAME,...,task=dtlab-rank1,pid=N,uid=0`` and ``Memory cgroup out of memory:
Killed process N (dtlab-rank1) total-vm:...``. Without root (or with ``dmesg_restrict``) the file
says why it has no kernel lines; the diagnosis does not need them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets

from ..runtime.cgroups import Cgroup
from ..runtime.errors import LaunchError

EVIDENCE = "cgroup-memory.json"  # recognised by its content (a dict with "memory_cgroups")
MARGIN = 32 << 20  # the limit: what the group holds when the rank joins, plus this
CHUNK = 8 << 20  # touched at a time
BOUND = 512 << 20  # past limit + this, still alive: the limit does not hold; stop
_KMSG_RECORDS = 200_000  # the kernel's ring buffer holds far fewer; never loop on a stream


def unavailable() -> str | None:
    """Why this process cannot make a memory cgroup here (one line), or None where it can."""
    cg = _make("probe")
    if cg is not None:
        cg.remove()
        return None
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    if not any(m[2] == "cgroup2" or m[2] == "cgroup" and "memory" in m[3].split(",")
               for m in mounts if len(m) >= 4):
        return "no cgroup memory controller is mounted on this machine"
    if os.geteuid() != 0 and not os.environ.get("DTLAB_CGROUP"):
        return ("making a memory cgroup needs root, or a delegated cgroup v2 group named in "
                "$DTLAB_CGROUP")
    return ("the memory cgroup hierarchy is not writable from here (a container without "
            "cgroup delegation?)")


def check() -> None:
    """LaunchError, in one line, where this process cannot make the kind's cgroup."""
    if why := unavailable():
        raise LaunchError(f"kind='host_oom' needs a memory cgroup: {why}; pick another kind "
                          f"(rank_killed shows a death without one)")


def make(rank: int) -> tuple[Cgroup, dict]:
    """The culprit's memory cgroup, and what tells the ranks about it (:func:`exhaust`'s)."""
    cg = _make("run")
    if cg is None:
        check()
        raise LaunchError("kind='host_oom': could not make a memory cgroup just now")
    return cg, {"rank": rank, "version": cg.version, "dirs": cg.dirs}


def _make(what: str) -> Cgroup | None:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # until the rank sets one
    return Cgroup.create(f"hang-host_oom-{what}-{os.getpid()}-{secrets.token_hex(3)}",
                         memory_bytes=total, tasks=4096)


def record(cg: Cgroup, rank: int, out: str) -> str:
    """Save what the kernel counted for the group into ``out``, then remove the group (and kill
    whatever is still in it: nothing, when the ranks have ended). Returns the file's path."""
    try:
        events = cg.memory_events()
        lines, note = kernel_lines(os.path.basename(cg.dirs[0]))
        path = os.path.join(out, EVIDENCE)
        with open(path, "w") as f:
            json.dump({"memory_cgroups": [{"rank": rank, "path": cg.dirs[0],
                                           "cgroup_version": cg.version, **events}],
                       "kernel_log": lines, "kernel_log_note": note}, f, indent=1)
        return path
    finally:
        cg.remove()


def kernel_lines(name: str) -> tuple[list[str], str]:
    """The kernel log's OOM lines about the group ``name`` (its last path component), read from
    /dev/kmsg without blocking; and a note saying where they came from or why there are none."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return [], f"/dev/kmsg not readable ({e.strerror}): no kernel lines"
    messages = []
    try:
        for _ in range(_KMSG_RECORDS):
            try:
                rec = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record overwritten while we read: skip it
                    continue
                if e.errno == errno.EAGAIN:  # the end of the buffer
                    break
                raise
            if not rec:
                break
            messages.append(rec.decode("utf-8", "replace").split(";", 1)[-1].split("\n", 1)[0])
    except OSError as e:
        return [], f"/dev/kmsg read failed ({e.strerror}): no kernel lines"
    finally:
        os.close(fd)
    return select(messages, name), "/dev/kmsg, read without blocking: the lines about this group"


def select(messages: list[str], name: str) -> list[str]:
    """The kernel's lines about an OOM kill in the group ``name``: its ``oom-kill:`` summary
    (which names the group and the pid) and the ``Killed process PID`` line of that pid.

    >>> select(["oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a/dtlab/g1,task=py,pid=7,uid=0",
    ...         "Memory cgroup out of memory: Killed process 7 (py) total-vm:9kB",
    ...         "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a/dtlab/g10,task=x,pid=8,uid=0",
    ...         "Memory cgroup out of memory: Killed process 8 (x) total-vm:9kB"], "g1")[1]
    'Memory cgroup out of memory: Killed process 7 (py) total-vm:9kB'
    """
    ours = re.compile(rf"oom_memcg=\S*/{re.escape(name)}(?:,|$)")
    pids = {m[1] for line in messages if ours.search(line)
            for m in [re.search(r",pid=(\d+)", line)] if m}
    return [line for line in messages if ours.search(line) or any(
        re.search(rf"Killed process {p}\b", line) for p in pids)]


def exhaust(rank: int, cfg: dict | None) -> None:
    """Rank side: join the cgroup made for this rank (``cfg``: :func:`make`'s), limit it to what
    it holds plus MARGIN (no swap), and touch memory until the kernel's OOM killer ends this
    process with SIGKILL."""
    if not cfg or cfg.get("rank") != rank:
        raise RuntimeError(f"host_oom: no memory cgroup was made for rank {rank} (run the kind "
                           f"through dtlab.hang.reproduce, which makes one)")
    cg = Cgroup(cfg["dirs"], cfg["version"])
    for procs in cg.procs_files:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    limit = cg.memory_usage() + MARGIN
    cg.limit_memory(limit)
    hog = []
    while len(hog) * CHUNK < limit + BOUND:
        hog.append(b"\x01" * CHUNK)  # written, not only reserved: every page is charged
    raise RuntimeError(f"host_oom: touched {len(hog) * CHUNK} bytes in a cgroup limited to "
                       f"{limit} and was not killed: the limit does not hold here")
