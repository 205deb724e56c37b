"""The MLP that section 05's scaling and find_unused_parameters measurements share: the models by
name, how a rank builds one, the arguments both check, and the profiler's quiet mode on CPU.
Both :mod:`.scaling` and :mod:`.unused` import it (neither imports the other for it).

>>> MODELS["mlp"]
(256, 6)
"""

from __future__ import annotations

import os

from ..limits import MAX_STEPS, whole

MODELS = {"mlp-small": (64, 4), "mlp": (256, 6), "mlp-large": (1024, 8),
          "mlp-xl": (4096, 8)}  # name: (width, depth); mlp-xl: 134M parameters, for GPUs
CLASSES = 10


def _check(nranks_list, model, steps, per_rank_batch, backend, bucket_caps, warmup=0):
    """One ValueError naming the first bad argument."""
    if not isinstance(nranks_list, (list, tuple)) or not nranks_list:
        raise ValueError(f"nranks_list={nranks_list!r}: give world sizes, e.g. [1, 2].")
    for n in nranks_list:
        whole("nranks_list", n, 1, 64, "world sizes, e.g. [1, 2]")
    if model not in MODELS:
        raise ValueError(f"model={model!r} is not one of {', '.join(MODELS)}.")
    whole("steps", steps, 1, MAX_STEPS)
    whole("warmup", warmup, 0, MAX_STEPS)
    whole("per_rank_batch", per_rank_batch, 1, 1 << 16)
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend={backend!r} is not one of auto, gloo, nccl.")
    for b in bucket_caps:
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float))
                              or not 0 < b <= 1024):
            raise ValueError(f"bucket_cap_mb={b!r} must be a number of MiB in (0, 1024].")


def build(model: str = "mlp"):
    """The MLP named ``model`` (:data:`MODELS`: ``depth`` Linear(width, width) + ReLU, then a
    Linear head to :data:`CLASSES`), its parameters from seed 0 in every process.

    >>> [tuple(p.shape) for p in build("mlp-small").parameters()][-2:]
    [(10, 64), (10,)]
    """
    import torch
    import torch.nn as nn

    if model not in MODELS:
        raise ValueError(f"model={model!r} is not one of {', '.join(MODELS)}.")
    width, depth = MODELS[model]
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))


def quiet_profiler(cuda: bool) -> None:
    """On CPU, keep Kineto's ``USDT: ... profiler_start`` / ``profiler_stop`` markers (torch >=
    2.13 prints two per profiled session to stderr) out of the ranks' panes: ``KINETO_LOG_LEVEL``
    (read once, when the profiler first starts) above its highest level. Not on GPUs, where that
    level would also hide CUPTI's errors; a value the user set is kept."""
    if not cuda:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
