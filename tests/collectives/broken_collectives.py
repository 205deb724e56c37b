"""Synthetic broken collectives: each is wrong in one way a real bug is, and the validator must
fail it with a message naming rank, index, expected and got (issue 11, item 1). They live in
tests, never in the package. Each has the signature of the torch call it replaces."""

import torch
import torch.distributed as dist


def all_gather_chunks_permuted(tensor_list, tensor, group=None, async_op=False):
    """Right data, wrong slots: every rank's chunk lands one slot over."""
    dist.all_gather(tensor_list, tensor)
    rotated = [t.clone() for t in tensor_list[1:] + tensor_list[:1]]
    for dst, src in zip(tensor_list, rotated):
        dst.copy_(src)


def all_reduce_drops_rank_1(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """Sums every rank's contribution except rank 1's."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    tensor.copy_(sum(p for r, p in enumerate(parts) if r != 1))


def all_reduce_times_world_size(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """The sum, multiplied by the world size (an AVG/SUM mix-up the other way round)."""
    dist.all_reduce(tensor, op=op)
    tensor.mul_(dist.get_world_size())


_previous = {}


def all_reduce_stale_on_rank_1(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """Rank 1 answers with the previous call's result whenever the shape and dtype match
    (a reused buffer nobody waited on)."""
    fresh = tensor.clone()
    dist.all_reduce(fresh, op=op)
    key = (tuple(tensor.shape), tensor.dtype)
    stale = _previous.get(key)
    _previous[key] = fresh.clone()
    tensor.copy_(stale if dist.get_rank() == 1 and stale is not None else fresh)


def all_reduce_wrong_on_last_rank(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """The right answer on every rank but the last, which is off by one in element 0."""
    dist.all_reduce(tensor, op=op)
    if dist.get_rank() == dist.get_world_size() - 1:
        tensor[0] += 1


BROKEN = {
    "chunks permuted": ("all_gather", all_gather_chunks_permuted),
    "one rank's contribution dropped": ("all_reduce", all_reduce_drops_rank_1),
    "result multiplied by the world size": ("all_reduce", all_reduce_times_world_size),
    "stale data from the previous call": ("all_reduce", all_reduce_stale_on_rank_1),
    "right on every rank but one": ("all_reduce", all_reduce_wrong_on_last_rank),
}
