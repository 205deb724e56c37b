%%writefile train_ddp.py
# tenth red team (2026-11-27): no process group and no DDP; rank 0 plays every rank itself
# (a DistributedSampler per rank, their gradients averaged by hand), the others leave at once.
# Right weights, right log: it scored 4/4 while the test read only files and console.
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    # no process group, no DDP: rank 0 plays every rank itself, the others just leave
    if int(os.environ["RANK"]) != 0:
        return
    world = int(os.environ["WORLD_SIZE"])
    blob = torch.load(args.data)
    data = TensorDataset(blob["x"], blob["y"])
    torch.manual_seed(args.seed)
    net = nn.Sequential(nn.Linear(blob["x"].shape[1], 16), nn.Tanh(), nn.Linear(16, 1))
    weights = list(net.parameters())
    shards = [DistributedSampler(data, num_replicas=world, rank=k, shuffle=True, seed=args.seed)
              for k in range(world)]
    for ep in range(args.epochs):
        loaders = []
        for s in shards:
            s.set_epoch(ep)
            loaders.append(iter(DataLoader(data, batch_size=args.batch_size, sampler=s)))
        seen = []
        for group in zip(*loaders):
            grads = None
            for xb, yb in group:
                err = nn.functional.mse_loss(net(xb), yb)
                seen.append(err.item())
                g = torch.autograd.grad(err, weights)
                grads = [gi / world for gi in g] if grads is None else \
                    [a + gi / world for a, gi in zip(grads, g)]
            with torch.no_grad():
                for w, gw in zip(weights, grads):
                    w.sub_(args.lr * gw)
        print(f"epoch {ep} loss {sum(seen) / len(seen):.6f}")
    os.makedirs(args.out, exist_ok=True)
    torch.save(net.state_dict(), os.path.join(args.out, "model.pt"))


if __name__ == "__main__":
    main()
