"""dtlab: run torch.distributed code on N ranks from a notebook cell, and learn what it does.

>>> import dtlab, torch, torch.distributed as dist
>>> def hello():
...     t = torch.ones(1) * dist.get_rank()
...     dist.all_reduce(t)
...     print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum of ranks = {t.item()}")
...     return t.item()
>>> dtlab.run(hello, nprocs=2).values          # doctest: +SKIP
[1.0, 1.0]
"""

from .runtime import (HangError, LaunchError, Pool, PoolBrokenError, RankError, RankResult,
                      Results, run)
from .runtime.context import backend, device, in_rank, local_rank, rank, world_size

__version__ = "0.1.0"

__all__ = ["run", "Pool", "Results", "RankResult", "RankError", "HangError", "LaunchError",
           "PoolBrokenError", "rank", "local_rank", "world_size", "device", "backend", "in_rank"]


def load_ipython_extension(ip):
    """``%load_ext dtlab``: the ``%dtlab`` / ``%%dtlab`` magics (see dtlab.runtime.magics)."""
    from .runtime.magics import load_ipython_extension as load

    load(ip)


def unload_ipython_extension(ip):
    from .runtime.magics import unload_ipython_extension as unload

    unload(ip)
