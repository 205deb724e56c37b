"""Decide how many ranks, which backend, which device each rank gets -- and refuse bad input.

Every check here runs before a process starts, so a mistake costs one clear error, not a
half-launched job. The rules (ARCHITECTURE.md, README):

* ``nprocs`` defaults to the number of visible GPUs, else 2;
* ``backend="auto"`` is NCCL with one GPU per local rank when there are enough GPUs, else gloo
  on the CPU; ``backend="nccl"`` or ``"gloo"`` forces one;
* local rank ``i`` drives ``cuda:i`` under NCCL.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass, field

from .errors import LaunchError

BACKENDS = ("auto", "nccl", "gloo")


@dataclass
class Plan:
    nprocs: int
    backend: str
    devices: list[str]
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)
    pg_timeout: float | None = None  # init_process_group(timeout=...) in every rank

    def labels(self) -> dict[int, str]:
        return {r: f"rank {r} {d}" if d != "cpu" else f"rank {r}" for r, d in enumerate(self.devices)}


def gpu_count() -> int:
    """Visible CUDA devices, without creating a CUDA context in this process."""
    import torch

    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver install reads as "no GPUs"; doctor says more
        return 0


def resolve(nprocs: int | None = None, backend: str = "auto", env: dict | None = None,
            pg_timeout: float | None = None, flags: bool = False) -> Plan:
    """Validate the launch arguments and return the :class:`Plan`; raise :class:`LaunchError`.
    ``flags=True`` (a command's check): the messages name ``--nprocs`` / ``--backend`` as a
    terminal spells them, not the Python parameters."""
    def said(name: str, value) -> str:
        return f"--{name} {value}" if flags else f"{name}={value!r}"

    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise LaunchError(f"{said('backend', backend)} is not one of "
                          f"{', '.join(map(repr, BACKENDS))}.")
    backend = backend.lower()
    nprocs = check_nprocs(nprocs)
    checked_env = check_env(env)
    pg_timeout = check_timeout(pg_timeout, "pg_timeout")

    import torch.distributed as dist

    ngpu = gpu_count()
    n = nprocs if nprocs is not None else (ngpu or 2)
    note = ""
    if backend == "nccl":
        if not dist.is_nccl_available() or ngpu == 0:
            raise LaunchError(
                f"{said('backend', 'nccl')} needs CUDA GPUs and a torch build with NCCL; this "
                f"machine has {ngpu} visible GPU(s) (torch.cuda.is_available() is "
                f"{ngpu > 0}). Use {said('backend', 'gloo')} to run the same code on CPU ranks, "
                "or run `dtlab doctor` to see what is missing.")
        if n > ngpu:
            raise LaunchError(
                f"{said('nprocs', n)} with {said('backend', 'nccl')} needs {n} GPUs (one per "
                f"rank); this machine has {ngpu}. Use {said('nprocs', ngpu)} or fewer, or "
                f"{said('backend', 'gloo')} for more ranks on the CPU.")
    elif backend == "auto":
        if ngpu and n <= ngpu and dist.is_nccl_available():
            backend = "nccl"
        else:
            backend = "gloo"
            if ngpu and n > ngpu:
                note = (f"dtlab: {n} ranks but {ngpu} GPU(s): using gloo on the CPU "
                        f"(pass nprocs<={ngpu} for NCCL).")
    if backend == "gloo" and not dist.is_gloo_available():
        raise LaunchError("backend='gloo' is not available in this torch build; "
                          "run `dtlab doctor`.")
    devices = [f"cuda:{i}" for i in range(n)] if backend == "nccl" else ["cpu"] * n
    return Plan(nprocs=n, backend=backend, devices=devices, note=note, env=checked_env,
                pg_timeout=pg_timeout)


# Set by dtlab for every launch (rank_envs): a value from env= would make the ranks wait for a
# store or peers that do not exist, so they are refused before anything starts.
OWNED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
             "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
             "TORCHELASTIC_ERROR_FILE", "GLOO_SOCKET_IFNAME")


def check_env(env: dict | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise LaunchError(f"env must be a dict of environment variables, not {type(env).__name__}.")
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k:
            raise LaunchError(f"env key {k!r} is not a valid environment variable name "
                              f"(a non-empty string without '=' or a null byte).")
        if k in OWNED_ENV or k.startswith("DTLAB_"):
            raise LaunchError(f"env[{k!r}] is set by dtlab for each launch (rank, world size and "
                              f"rendezvous are its job); choose the number of ranks with nprocs=, "
                              f"and use `dtlab multinode` for launches across hosts.")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise LaunchError(f"env[{k!r}]={v!r}: values must be strings (or numbers), "
                              f"e.g. env={{{k!r}: '1'}}.")
        out[k] = str(v)
        if "\0" in out[k]:  # the OS takes each variable as a C string: it would end there
            raise LaunchError(f"env[{k!r}]={v!r}: a value cannot hold a null byte ('\\0').")
    return out


def check_fn(fn) -> None:
    if not callable(fn):
        raise LaunchError(f"fn={fn!r} is not callable: pass the function itself, e.g. "
                          f"dtlab.run(train, 10), not dtlab.run(train(10)).")
    import inspect

    # its call would return a coroutine or generator that no rank runs and none can send back
    for test, what in ((inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator function"),
                       (inspect.isgeneratorfunction, "a generator function")):
        if test(fn):
            raise LaunchError(f"fn={getattr(fn, '__name__', fn)!r} is {what}: ranks call fn and "
                              f"send back what it returns; pass a plain function (wrap it: "
                              f"def main(): return asyncio.run(fn()), or list(fn())).")


START_TIMEOUT = 300.0  # seconds a rank may take to reach user code: interpreter, imports, group
# The parent looks at the ranks every 20 ms (supervisor.TICK) and a rank takes longer than that
# to hand back a value and exit: a shorter bound would call finished work a hang.
MIN_TIMEOUT = 0.1
MAX_TIMEOUT = 10**9  # ~32 years: a bigger number is a mistake (None or math.inf: no limit)


def check_timeout(timeout, name: str = "timeout") -> float | None:
    """Seconds, or None for no limit (``math.inf`` means the same)."""
    if timeout is None or (isinstance(timeout, float) and timeout == math.inf):
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout)
            or timeout <= 0 or timeout > MAX_TIMEOUT):
        raise LaunchError(f"{name}={timeout!r} must be a positive number of seconds "
                          f"(or None for no limit).")
    if timeout < MIN_TIMEOUT:
        raise LaunchError(f"{name}={timeout!r} is too short to keep: the parent looks at the "
                          f"ranks every 20 ms and a rank takes longer than that to return and "
                          f"exit; give at least {MIN_TIMEOUT:g} s (or None for no limit).")
    return float(timeout)


# Every rank runs on this machine, each a full Python process with torch imported (~0.3 GB):
# 256 of them already want ~80 GB of memory, and the largest single machines have 8-16 GPUs.
# Far more (nprocs=10**6 was once accepted) only exhausts memory and pids before any timeout.
MAX_RANKS = 256


def check_nprocs(nprocs) -> int | None:
    """A whole number of ranks from 1 to :data:`MAX_RANKS`, or None (the default)."""
    if nprocs is None:
        return None
    if isinstance(nprocs, bool) or not hasattr(type(nprocs), "__index__"):
        raise LaunchError(f"nprocs={nprocs!r} must be a whole number of ranks (e.g. nprocs=2).")
    nprocs = operator.index(nprocs)  # numpy integers too
    if nprocs < 1:
        raise LaunchError(f"nprocs={nprocs} must be at least 1.")
    if nprocs > MAX_RANKS:
        raise LaunchError(f"nprocs={nprocs} is more ranks than dtlab starts on one machine (at "
                          f"most {MAX_RANKS}): each rank is a full Python process with torch "
                          f"imported (~0.3 GB; {MAX_RANKS} of them ~80 GB), and the largest "
                          f"single machines have 8-16 GPUs. Across machines, use `dtlab "
                          f"multinode`.")
    return nprocs


def rank_envs(plan: Plan, master_port: int, extra: dict[str, str] | None = None
              ) -> dict[int, dict[str, str]]:
    """The environment each rank starts with: torchrun's variables plus dtlab's own."""
    n = plan.nprocs
    common = {
        "WORLD_SIZE": str(n),
        "LOCAL_WORLD_SIZE": str(n),
        "GROUP_RANK": "0",
        "ROLE_RANK": "0",
        "ROLE_WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        # nothing a single-host launch starts listens beyond loopback (dtlab/runtime/README.md)
        "GLOO_SOCKET_IFNAME": "lo",
        # The parent hosts the rendezvous TCPStore, as torchrun's agent does; ranks are clients.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "dtlab",
        "DTLAB_BACKEND": plan.backend,
        "DTLAB_PARENT_PID": str(os.getpid()),
        "PYTHONUNBUFFERED": "1",
    }
    if "OMP_NUM_THREADS" not in os.environ:
        # like torchrun: do not let N ranks each start a thread per core
        common["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
    if plan.backend == "nccl" and "NCCL_SOCKET_IFNAME" not in os.environ:
        # NCCL's bootstrap opens listening sockets on the interface this names (by default the
        # first that is not loopback); one host needs none other than lo. env= may override.
        common["NCCL_SOCKET_IFNAME"] = "lo"
    if plan.pg_timeout is not None:
        common["DTLAB_PG_TIMEOUT_S"] = repr(plan.pg_timeout)
    common.update(plan.env)
    common.update(extra or {})
    envs = {}
    for r in range(n):
        e = dict(common)
        e.update({"RANK": str(r), "LOCAL_RANK": str(r), "DTLAB_DEVICE": plan.devices[r]})
        envs[r] = e
    return envs
