"""The failure classes, each as a tiny training loop that goes wrong on purpose.

Every reproducer runs the same loop on every rank -- a little compute, then one all-reduce of
the "gradients", then a loss read back to the host (as training loops log it) -- for ``STEPS``
steps, so collective number k (1-based, as Flight Recorder counts) belongs to step k-1.
At step ``BAD_STEP`` the culprit rank (rank 1) does one thing differently. That is the whole bug,
and the line that does it is marked ``# <- the bug``.

Each step is announced on stdout as::

    [dtlab-step] rank=1 step=2 phase=collective t=1764126000.123456

so a person (and ``dtlab diagnose``) can see how far every rank got and how long each waited.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

STEPS = 5
BAD_STEP = 2
CULPRIT = 1
NUMEL = 1 << 12

@dataclass(frozen=True)
class Kind:
    """A failure class to reproduce, and the verdict the evidence should support (3 ranks)."""

    name: str
    failure_class: str  # what `dtlab diagnose` should call it
    what: str  # the bug, in one line
    seq: int | None  # 1-based position of the first divergent collective (None: no divergence)


KINDS = {k.name: k for k in [
    Kind("size_mismatch", "size_mismatch", "the culprit all-reduces a tensor twice as long",
         BAD_STEP + 1),
    Kind("dtype_mismatch", "dtype_mismatch", "the culprit all-reduces bfloat16, the others "
         "float32", BAD_STEP + 1),
    Kind("op_mismatch", "op_mismatch", "the culprit calls all_gather where the others all_reduce",
         BAD_STEP + 1),
    # the skip itself is invisible to every tool; what shows is that the culprit issues one
    # collective fewer, so the first position where ranks disagree is the others' last one
    Kind("skipped_collective", "missing_collective", "the culprit skips one all_reduce in a "
         "branch", STEPS),
    Kind("extra_collective", "missing_collective", "the culprit issues one extra all_reduce",
         STEPS + 1),
    Kind("rank_exit", "rank_died", "the culprit calls sys.exit(3) mid-run", BAD_STEP + 1),
    Kind("rank_killed", "rank_died", "the culprit is killed with SIGKILL mid-run", BAD_STEP + 1),
    Kind("oom", "oom", "the culprit runs out of memory (GPU) / fails an allocation (CPU)",
         BAD_STEP + 1),
    # root only (a memory cgroup); dtlab.hang.reproduce refuses it, saying why, where it cannot
    Kind("host_oom", "oom", "the kernel's OOM killer ends the culprit in its memory cgroup "
         "(host RAM, SIGKILL)", BAD_STEP + 1),
    Kind("p2p_deadlock", "p2p_deadlock", "every rank sends to its neighbour before receiving",
         None),
    Kind("straggler", "straggler", "the culprit is slower by a set delay every step: no hang",
         None),
]}


def _mark(step: int, phase: str) -> None:
    print(f"[dtlab-step] rank={_rank()} step={step} phase={phase} t={time.time():.6f}", flush=True)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _grad(dtype=None):
    import torch

    from ..runtime.context import device

    return torch.ones(NUMEL, device=device(), dtype=dtype or torch.float32)


def _compute():
    import torch

    from ..runtime.context import device

    x = torch.randn(256, 256, device=device())
    return (x @ x).sum()


def training_loop(kind: str, delay: float = 1.0, cgroup: dict | None = None) -> float:
    """Run the loop; misbehave on the culprit rank at BAD_STEP as ``kind`` says. ``cgroup``:
    the culprit's memory cgroup for ``host_oom`` (made by :func:`dtlab.hang.host_oom.make`)."""
    import torch
    import torch.distributed as dist

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of: {', '.join(KINDS)}")
    rank, world = dist.get_rank(), dist.get_world_size()
    culprit = rank == CULPRIT % world
    loss = 0.0
    for step in range(STEPS):
        _mark(step, "compute")
        _compute()
        bad = culprit and step == BAD_STEP
        if kind == "straggler" and culprit:
            time.sleep(delay)  # <- the bug: this rank is slower every step
        grad = _grad()
        _mark(step, "collective")
        if kind == "p2p_deadlock" and step == BAD_STEP:
            _p2p_ring_send_first(world)
        elif bad and kind == "size_mismatch":
            grad = torch.ones(2 * NUMEL, device=grad.device)  # <- the bug
            dist.all_reduce(grad)
        elif bad and kind == "dtype_mismatch":
            grad = grad.to(torch.bfloat16)  # <- the bug
            dist.all_reduce(grad)
        elif bad and kind == "op_mismatch":
            out = torch.empty(world * NUMEL, device=grad.device)
            dist.all_gather_into_tensor(out, grad)  # <- the bug
        elif bad and kind == "skipped_collective":
            pass  # <- the bug: `if rank == 1: skip this step's all_reduce`
        elif bad and kind == "extra_collective":
            dist.all_reduce(grad.clone())  # <- the bug: a second all_reduce, "just to check"
            dist.all_reduce(grad)
        elif bad and kind == "rank_exit":
            sys.exit(3)  # <- the bug
        elif bad and kind == "rank_killed":
            os.kill(os.getpid(), signal.SIGKILL)  # <- the bug (the OOM killer, a node failure)
        elif bad and kind == "host_oom":
            from .host_oom import exhaust

            exhaust(rank, cgroup)  # <- the bug: more host memory than its cgroup allows (SIGKILL)
        elif bad and kind == "oom":
            _allocate_too_much(grad.device)  # <- the bug
            dist.all_reduce(grad)
        else:
            dist.all_reduce(grad)
        loss = float(grad.float().sum().item())  # the host waits for the GPU here
        _mark(step, "done")
    # the habit that makes post-mortems possible: keep the Flight Recorder of a finished run too
    from ..runtime.evidence import dump_own_trace

    dump_own_trace(rank)
    return loss


def _p2p_ring_send_first(world: int) -> None:
    """Every rank sends to its right neighbour, then receives from its left one. Blocking sends
    of a large buffer never complete: each waits for a receive its peer has not posted yet.
    The send and the receive use separate buffers, as a correct ring exchange would: the only
    bug is the order."""
    import torch
    import torch.distributed as dist

    from ..runtime.context import device

    rank = dist.get_rank()
    outgoing = torch.ones(16 << 20, device=device())  # 64 MB: far beyond any socket buffer
    incoming = torch.empty_like(outgoing)
    dist.send(outgoing, dst=(rank + 1) % world)  # <- the bug: everyone sends first
    dist.recv(incoming, src=(rank - 1) % world)
    if incoming.is_cuda:
        torch.cuda.synchronize()


def _allocate_too_much(device) -> None:
    import torch

    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        torch.empty(int(total * 2), dtype=torch.uint8, device=device)  # more than the card has
    else:
        torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: the allocator refuses at once
