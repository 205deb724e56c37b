"""Tiny rank functions that succeed, raise, exit, crash or hang -- the failure injectors.

Each marks the line a hang test expects to see in the stacks with a ``# BLOCKS HERE`` comment.
"""

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist


def rank_sum(offset):
    t = torch.tensor([float(dist.get_rank() + offset)])
    dist.all_reduce(t)
    return t.item()


def env_and_group():
    return {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                           "MASTER_PORT")} | {
        "initialized": dist.is_initialized(), "backend": dist.get_backend(),
        "group_rank": dist.get_rank(), "group_size": dist.get_world_size(), "pid": os.getpid()}


def talk():
    print(f"python print from rank {dist.get_rank()}")
    os.write(1, f"fd write from rank {dist.get_rank()}\n".encode())
    os.write(2, f"fd stderr from rank {dist.get_rank()}\n".encode())
    # C stdio, buffered inside libc: only caught if the worker fflush()es before exiting
    import ctypes

    ctypes.CDLL(None).printf(b"libc printf from rank %d\n", dist.get_rank())
    print("to stderr", file=sys.stderr)
    return dist.get_rank()


def raise_on(bad_rank):
    t = torch.ones(1)
    if dist.get_rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} refuses")
    dist.all_reduce(t)  # the others wait here and lose their peer
    return t.item()


def raise_everywhere():
    raise KeyError(f"missing on rank {dist.get_rank()}")


def exit_on(bad_rank, code):
    if dist.get_rank() == bad_rank:
        os._exit(code)
    dist.barrier()


def signal_on(bad_rank, sig):
    dist.barrier()  # every rank is in fn (not still joining the group) when one dies
    if dist.get_rank() == bad_rank:
        os.kill(os.getpid(), sig)
    time.sleep(60)


def return_unpicklable():
    import threading

    return threading.Lock()


def hang_mismatched():
    t = torch.ones(1)
    if dist.get_rank() == 0:
        dist.all_reduce(t)  # BLOCKS HERE rank 0
    else:
        dist.recv(t, src=0)  # BLOCKS HERE rank 1
    return "unreachable"


def child_then_hang():
    """Start a grandchild process, report its pid, then block forever."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"CHILD {child.pid}", flush=True)
    print(f"RANKPID {os.getpid()}", flush=True)
    t = torch.ones(1)
    if dist.get_rank() == 0:
        dist.recv(t, src=1)  # BLOCKS HERE
    else:
        dist.recv(t, src=0)  # BLOCKS HERE


def report_then_block(marker_dir):
    """Write this rank's pid to MARKER_DIR/rank-N, then block in a receive that never comes."""
    path = os.path.join(marker_dir, f"rank-{dist.get_rank()}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    print("ready", flush=True)
    t = torch.ones(1)
    dist.recv(t, src=(dist.get_rank() + 1) % dist.get_world_size())  # BLOCKS HERE


def slow_step_then_hang():
    """A quiet spell that is only a slow step (it prints again after it), then a real hang."""
    print("step 0", flush=True)
    time.sleep(2.5)   # the slow step
    print("step 1", flush=True)
    if dist.get_rank() == 1:
        time.sleep(600)   # the hang: rank 1 never reaches the barrier
    dist.barrier()


class SlowToLoad:
    """An argument whose unpickling in the rank takes ``seconds``: a start-up as slow as a
    busy machine's ``import torch``, before the rank reaches fn."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __reduce__(self):
        return (_slow_load, (self.seconds,))


def _slow_load(seconds: float):
    time.sleep(seconds)
    return seconds


def quick(slow):
    return dist.get_rank()


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception fails")


def raise_unprintable():
    raise Unprintable()
