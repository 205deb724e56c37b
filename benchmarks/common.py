"""The work every launch benchmark times: one all_reduce of one element, on the rank's device."""


def trivial_all_reduce() -> float:
    import torch
    import torch.distributed as dist

    import dtlab

    t = torch.ones(1, device=dtlab.device())
    dist.all_reduce(t)
    return t.item()
