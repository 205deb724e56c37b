"""Four classic mistakes of a hand-written DDP script, one switch: run it under torchrun.

    torchrun --standalone --nproc-per-node 2 classic.py --bug device_mismatch
    torchrun --standalone --nproc-per-node 2 classic.py --bug none          # the same, right

``--bug``:

* ``device_mismatch``  the batch stays on the CPU while the model is on the rank's GPU
* ``wrap_before_move`` DDP wraps the model while it is still on the CPU, then it is moved
* ``no_set_device``    no ``torch.cuda.set_device``: every rank computes on ``cuda:0``
* ``no_set_epoch``     ``DistributedSampler`` without ``set_epoch``: each epoch, the same order
* ``none``             each of these done right

The first three only exist where there is a GPU (on CPU ranks every tensor is already on the
one device, and the script says so); the sampler's is the same everywhere. Each rank prints
what it did; rank 0 prints the epochs' first indices, which show the sampler's order.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

BUGS = ("device_mismatch", "wrap_before_move", "no_set_device", "no_set_epoch", "none")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bug", choices=BUGS, required=True)
    ap.add_argument("--epochs", type=int, default=3)
    bug = ap.parse_args().bug
    local = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    if cuda and bug == "no_set_device":
        device = torch.device("cuda")          # the current device: cuda:0, on every rank
        dist.init_process_group("nccl")
    elif cuda:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)          # this rank's GPU is the current one
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    if not cuda and bug in ("device_mismatch", "wrap_before_move", "no_set_device"):
        print(f"rank {rank}: CPU only: every tensor is on the CPU, so '{bug}' cannot happen here")

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    if bug == "wrap_before_move":
        model = DDP(model, device_ids=[local] if cuda else None)
        model.to(device)
    else:
        model = DDP(model.to(device), device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    for epoch in range(ap.parse_args().epochs):
        if bug != "no_set_epoch":
            sampler.set_epoch(epoch)           # a new shuffle each epoch, the same on all ranks
        first = list(sampler)[:4]
        for x, y in DataLoader(data, batch_size=4, sampler=sampler):
            if bug != "device_mismatch":
                x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"rank {rank} epoch {epoch}: first indices {first}, last loss {loss.item():.4f} "
              f"on {device}", flush=True)
    # every rank done before any leaves: a gloo rank that destroys its group while its peer is
    # still sending aborted once here ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
