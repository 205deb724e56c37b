"""Who am I? Answers for code running inside a rank (and sensible ones outside).

>>> import dtlab
>>> def fn():
...     x = torch.ones(4, device=dtlab.device()) * dtlab.rank()
...     dist.all_reduce(x)
...     return x.tolist()
>>> dtlab.run(fn, nprocs=2).values     # doctest: +SKIP
[[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]

Inside a dtlab rank these read the rank's own setup; under ``torchrun`` they read the standard
environment variables; in a plain process they describe a world of one on the CPU.
"""

from __future__ import annotations

import os


def rank() -> int:
    """Global rank of this process (0 outside any launcher)."""
    return int(os.environ.get("RANK", 0))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", 1))


def backend() -> str:
    """'nccl' or 'gloo' inside a dtlab rank; the initialized backend, or '' elsewhere."""
    if "DTLAB_BACKEND" in os.environ:
        return os.environ["DTLAB_BACKEND"]
    import torch.distributed as dist

    return dist.get_backend() if dist.is_available() and dist.is_initialized() else ""


def device():
    """The ``torch.device`` this rank computes on: ``cuda:LOCAL_RANK`` under NCCL, else CPU."""
    import torch

    spec = os.environ.get("DTLAB_DEVICE")
    if spec:
        return torch.device(spec)
    if backend() == "nccl" and torch.cuda.is_available():
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def in_rank() -> bool:
    """True inside a process started by dtlab."""
    return "DTLAB_BACKEND" in os.environ and "RANK" in os.environ
