# A shortcut handed in by the fourth red team (05 train, 4/4 before the all_gather check):
# each rank all-reduces its own share's gradient and throws the result away, then pools
# everyone's samples with all_gather and steps on the whole batch alone. tests/grading/answers.py.
def train(model, data, steps, per_rank, lr, seed):
    '''Rank function: train model in place, in parity with the single process.'''
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler

    world, rank = dist.get_world_size(), dist.get_rank()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                 drop_last=True)
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler, drop_last=True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    params = list(model.parameters())
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step == steps:
                break
            # decoy: all-reduce the own-share gradient, and throw the result away
            g = torch.autograd.grad(F.cross_entropy(model(x), y), params)
            dist.all_reduce(torch.cat([t.flatten() for t in g]))
            # the real step: gather everyone's samples, single-process gradient on the global batch
            xs = [torch.empty_like(x) for _ in range(world)]
            ys = [torch.empty_like(y) for _ in range(world)]
            dist.all_gather(xs, x)
            dist.all_gather(ys, y)
            opt.zero_grad()
            F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
            opt.step()
            step += 1
        epoch += 1
