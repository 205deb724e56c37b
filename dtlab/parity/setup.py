"""The experiment both sides share: a tiny classifier, its data, and the reference batch order.

Contract: :func:`build_model` with the same ``seed`` gives bit-identical parameters in any
process; :func:`make_data` gives the same tensors everywhere; :func:`global_batches` is the
order a *single* process sees the data in, which a correct DDP run must reproduce when its
ranks' per-rank batches are put together. Run ``python -m doctest dtlab/parity/setup.py``.

Why the reference order is a contiguous slice: ``DistributedSampler(shuffle=True)`` draws
``perm = torch.randperm(n, generator seeded with seed + epoch)`` and gives rank ``r`` the indices
``perm[r::W]``; rank ``r``'s ``b``-th batch of ``bs`` is ``perm[r::W][b*bs:(b+1)*bs]``, i.e.
``perm[W*b*bs + W*j + r]`` for ``j < bs`` -- over all ranks exactly ``perm[b*B:(b+1)*B]`` with
``B = W*bs``. A single process that shuffles with the same seed and takes batches of ``B``
therefore sees the same global batches (the samples' order inside a batch differs, which a mean
loss does not see).

>>> x, y = make_data(32, dtype=torch.float64)
>>> [len(b) for b in global_batches(32, 8, epoch=0)]
[8, 8, 8, 8]
>>> sum(p.numel() for p in build_model(norm="batch").parameters())
364
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

D_IN, HIDDEN, CLASSES = 8, 24, 4


class AllReduceSum(torch.autograd.Function):
    """all_reduce(SUM) that gradients flow through: every rank's input reaches every rank's
    output, so the gradient of an input is the sum of all ranks' output gradients -- itself an
    all_reduce(SUM) in backward (what SyncBatchNorm's backward does)."""

    @staticmethod
    def forward(ctx, t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose batch statistics are those of the *global* batch: the ranks' sums and
    sums of squares are all-reduced (:class:`AllReduceSum`, which carries gradients back through
    the reduction). The same thing ``nn.SyncBatchNorm`` does on
    GPUs; written out here because on torch 2.13 SyncBatchNorm refuses CPU tensors twice (DDP:
    "SyncBatchNorm layers only work with GPU modules"; its forward: "expected input tensor to be
    on GPU ..."). Same parameter and buffer names as BatchNorm1d, so state dicts compare."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not dist.is_initialized() or dist.get_world_size() == 1:
            return super().forward(x)
        stats = torch.cat([x.sum(0), (x * x).sum(0), x.new_tensor([x.shape[0]])])
        stats = AllReduceSum.apply(stats)
        c = x.shape[1]
        n = stats[-1]
        mean = stats[:c] / n
        var = stats[c:2 * c] / n - mean * mean  # biased variance: what normalizes
        with torch.no_grad():  # running stats as BatchNorm1d updates them (unbiased variance)
            self.num_batches_tracked += 1
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
            self.running_var.mul_(1 - m).add_(var.detach() * n / (n - 1), alpha=m)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class TinyNet(nn.Module):
    """Linear -> [BatchNorm1d] -> ReLU -> Linear; ``unused=True`` adds a head forward never uses
    (the classic "parameter unused in forward")."""

    def __init__(self, norm: str = "none", unused: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, HIDDEN)
        self.norm = {"none": nn.Identity, "batch": nn.BatchNorm1d,
                     "global": GlobalBatchNorm1d, "sync": nn.SyncBatchNorm}[norm](HIDDEN) \
            if norm != "none" else nn.Identity()
        self.fc2 = nn.Linear(HIDDEN, CLASSES)
        if unused:
            self.aux = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.norm(self.fc1(x))))


def build_model(norm: str = "none", unused: bool = False, seed: int = 0,
                dtype: torch.dtype = torch.float64) -> TinyNet:
    """The model with parameters from ``seed`` (the same in every process that asks)."""
    torch.manual_seed(seed)
    return TinyNet(norm, unused).to(dtype)


def make_data(n: int = 32, seed: int = 1234, dtype: torch.dtype = torch.float64):
    """``n`` inputs and labels from a fixed random teacher: learnable, and the same everywhere."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_IN, generator=g, dtype=torch.float64)
    teacher = torch.randn(D_IN, CLASSES, generator=g, dtype=torch.float64)
    return x.to(dtype), (x @ teacher).argmax(1)


def global_batches(n: int, batch: int, epoch: int, seed: int = 0) -> list[torch.Tensor]:
    """The single process's batches in ``epoch``: shuffle with ``seed + epoch`` (the generator
    DistributedSampler uses), then contiguous slices of ``batch``."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    return [perm[i:i + batch] for i in range(0, n, batch)]
