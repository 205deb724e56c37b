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
                      Results, Torchrun, left_behind, run, torchrun)
from .runtime.context import backend, device, in_rank, local_rank, rank, world_size

__version__ = "0.1.0"


def _postmortem(evidence_dir: str):
    """The runtime's post-mortem hook: dtlab.hang's diagnosis of a failed launch's evidence
    (wired here, at the top, so that the runtime imports nothing above it)."""
    from .hang.diagnose import diagnose

    d = diagnose(evidence_dir)
    if d.failure_class in ("no_failure", "timeout_unknown"):
        return d, None
    culprit = ", ".join(map(str, d.culprit_ranks)) or "-"
    who = (f"culprit rank(s) {culprit}" if d.confident
           else f"candidates {culprit} (unsure: see the summary)")
    return d, f"Diagnosis (err.diagnosis): {d.failure_class}, {who}. {d.summary}"


from .runtime.evidence import set_postmortem as _set_postmortem  # noqa: E402

_set_postmortem(_postmortem)

__all__ = ["run", "Pool", "Results", "RankResult", "RankError", "HangError", "LaunchError",
           "PoolBrokenError", "rank", "local_rank", "world_size", "device", "backend", "in_rank",
           "left_behind", "torchrun", "Torchrun"]


def load_ipython_extension(ip):
    """``%load_ext dtlab``: the ``%dtlab`` / ``%%dtlab`` magics (see dtlab.runtime.magics)."""
    from .runtime.magics import load_ipython_extension as load

    load(ip)


def unload_ipython_extension(ip):
    from .runtime.magics import unload_ipython_extension as unload

    unload(ip)
