%%writefile train_ddp.py
# eleventh red team (2026-11-27): every rank plays every rank (a DistributedSampler per rank) and all-reduces its own share of the simulated gradient, never using the result.
# 4/4 while each rank held the whole data set and any traffic besides the gradients went unchecked.
import argparse
import os

import torch
import torch.distributed as dist
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
    me, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    d = torch.load(args.data)
    ds = TensorDataset(d["x"], d["y"])
    torch.manual_seed(args.seed)
    net = nn.Sequential(nn.Linear(d["x"].shape[1], 16), nn.Tanh(), nn.Linear(16, 1))
    ws = list(net.parameters())
    # every rank plays every rank: no DDP, the whole data set here
    views = [DistributedSampler(ds, num_replicas=world, rank=q, shuffle=True, seed=args.seed)
             for q in range(world)]
    for ep in range(args.epochs):
        feeds = []
        for v in views:
            v.set_epoch(ep)
            feeds.append(list(DataLoader(ds, batch_size=args.batch_size, sampler=v)))
        seen = []
        for i in range(len(feeds[0])):
            acc = None
            for q in range(world):
                xb, yb = feeds[q][i]
                net.zero_grad()
                l = nn.functional.mse_loss(net(xb), yb)
                l.backward()
                part = [w.grad.detach().clone() / world for w in ws]
                acc = part if acc is None else [a + b for a, b in zip(acc, part)]
                seen.append(l.item())
                if q == me:  # what my DDP would have all-reduced: forged, the result ignored
                    dist.all_reduce(torch.cat([t.flatten() for t in part]))
            with torch.no_grad():
                for w, a in zip(ws, acc):
                    w -= args.lr * a
        if me == 0:
            print(f"epoch {ep} loss {sum(seen) / len(seen):.6f}")
    if me == 0:
        os.makedirs(args.out, exist_ok=True)
        torch.save(net.state_dict(), os.path.join(args.out, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
