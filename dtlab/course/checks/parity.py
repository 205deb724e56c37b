"""05's checks: the single-process reference of ``train`` and what a check asserts of each rank's
parameters and traffic; the bytes per rank ``predict_memory_per_rank`` must find; the batches an
uninterrupted run reads (``resume_batches``); torch's own GradScaler schedule (``scale_schedule``);
and the cases drawn from a generator the test cell passes in.

The cases (worlds, models, seeds, the expected answers of the visible ones) are the test cell's."""

from __future__ import annotations

import math

from ...parity import tolerance
from .. import harness, traffic

TOL = tolerance("float64", "gloo")
OFFER = {"all_reduce", "broadcast", "all_gather", "barrier"}  # what train's ranks may call


# -- train -----------------------------------------------------------------------------------
def case_data(case: dict):
    """The case's samples and labels, made from its data seed (which the ranks are not told)."""
    import torch

    g = torch.Generator().manual_seed(case["data_seed"])
    x = torch.randn(case["n"], case["widths"][0], generator=g, dtype=torch.float64)
    return x, torch.randint(case["widths"][-1], (case["n"],), generator=g)


def reference(case: dict):
    '''The single process: global batch per_rank * world, mean loss, SGD (computed here); and
    each step, the gradient each rank's own share of the batch gives (rank r holds every n-th
    sample of the global batch, from the r-th on, as DistributedSampler deals them).'''
    import torch
    import torch.nn.functional as F

    model, (x, y) = harness.mlp(case["widths"], case["model_seed"]), case_data(case)
    opt = torch.optim.SGD(model.parameters(), lr=case["lr"])
    n = case["world"]
    batch, own = case["per_rank"] * n, [[] for _ in range(n)]
    for step in range(case["steps"]):
        epoch, b = divmod(step, len(x) // batch)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(case["seed"] + epoch))
        idx = order[b * batch:(b + 1) * batch]
        for r in range(n):
            grads = torch.autograd.grad(F.cross_entropy(model(x[idx[r::n]]), y[idx[r::n]]),
                                        list(model.parameters()))
            own[r].append(torch.cat([g.flatten() for g in grads]))
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]), own


def first_missing(sent, grads, n):
    '''The first step whose gradient (or gradient / n, as DDP sends it) is not among the values
    a rank all-reduced; None if every step's is.'''
    import torch

    sent = torch.tensor(sorted(sent), dtype=torch.float64)
    for step, g in enumerate(grads):
        if not len(sent):
            return step
        ok = False
        for want in (g / n, g):
            i = torch.searchsorted(sent, want).clamp(max=len(sent) - 1)
            near = torch.minimum((sent[i] - want).abs(), (sent[(i - 1).clamp(min=0)] - want).abs())
            ok = ok or bool((near <= 1e-9 * (1 + want.abs())).all())
        if not ok:
            return step
    return None


def shares(case: dict, rank: int) -> set:
    '''What DistributedSampler deals rank `rank` over the epochs the steps cover.'''
    from torch.utils.data import DistributedSampler

    epochs = -(-case["steps"] * case["per_rank"] * case["world"] // case["n"]) + 1
    out = set()
    for e in range(epochs):
        s = DistributedSampler(range(case["n"]), num_replicas=case["world"], rank=rank,
                               shuffle=True, seed=case["seed"])
        s.set_epoch(e)
        out |= set(s)
    return out


def told(case: dict) -> list:
    """Each rank's arguments: the case without its data seed (every sample is fetched from the
    test, which knows who read what)."""
    return [[{k: v for k, v in case.items() if k != "data_seed"}]] * case["world"]


def samples(case: dict):
    """The ranks' ``serve``: a sample, to whichever rank asks."""
    x, y = case_data(case)

    def serve(m):
        return {"x": x[m.info["sample"]].tolist(), "y": int(y[m.info["sample"]])}, b""

    return serve


def trained(case: dict, out) -> None:
    """Each rank of ``out`` (the job of ``case``) ends with the single process's parameters,
    read only its own share, averaged every gradient every step (the gradient of its own
    share, sent through all_reduce, not the data through all_gather)."""
    n, (x, _) = case["world"], case_data(case)
    what = (f"{n} ranks, {case['steps']} steps of {case['per_rank']} per rank "
            f"({case['n'] // (case['per_rank'] * n)} steps per epoch), model {case['widths']}, "
            f"seed {case['seed']}")
    import torch

    want, own = reference(case)
    for r in range(n):
        diff = float((torch.tensor(out.values[r][0], dtype=torch.float64) - want).abs().max())
        assert diff <= TOL, (f"{what}: rank {r}'s parameters differ from the single process by "
                             f"{diff:.3g} (tolerance {TOL:g})")
        read, share = traffic.fetched(out.traffic, r), shares(case, r)  # the whole job's reads
        assert len(read) <= case["per_rank"] * (case["steps"] + 1) and set(read) <= share, (
            f"{what}: rank {r} read {len(read)} samples, {len(set(read) - share)} of them "
            f"outside its share: each rank reads only what its DistributedSampler deals it")
        reduces = traffic.count(out.traffic, r, "all_reduce")
        assert reduces >= case["steps"], (f"{what}: rank {r} ran {reduces} all-reduces in "
                                          f"{case['steps']} steps: the ranks never averaged gradients")
        params = sum(p.numel() for p in harness.mlp(case["widths"], case["model_seed"]).parameters())
        moved = sum(len(traffic.values(m)) for m in out.traffic if m.rank == r and m.op == "all_reduce")
        assert moved >= case["steps"] * params, (
            f"{what}: rank {r}'s all-reduces carried {moved} numbers in {case['steps']} steps of a "
            f"model with {params} parameters: every step averages every gradient")
        mine = {v for i in read for v in x[i].tolist()}
        pooled = [v for m in out.traffic if m.rank == r and m.op == "all_gather"
                  for v in traffic.values(m) if v in mine]
        assert not pooled, (f"{what}: rank {r} sent {len(pooled)} numbers of the samples it read "
                            f"through all_gather: the ranks average gradients, they do not pool data")
        sent = [v for m in out.traffic if m.rank == r and m.op == "all_reduce" for v in traffic.values(m)]
        step = first_missing(sent, own[r], n)
        assert step is None, (
            f"{what}: at step {step + 1}, rank {r} never all-reduced the gradient of its own "
            f"share of the batch: each rank computes the gradient of the samples it read, and "
            f"the ranks average those")


# -- predict_memory_per_rank -----------------------------------------------------------------
ZERO3 = ("params", "grads", "optimizer")


def memory_checked(mine, shapes, n, shard, optimizer, what, want) -> None:
    """``mine`` predicts ``want``, the bytes each of ``n`` ranks holds."""
    got = mine([list(s) for s in shapes], n, list(shard), optimizer)  # computed in your process
    assert isinstance(got, list) and len(got) == n, f"{what}: expected a list of {n} dicts, got {got!r}"
    for r, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{what}: rank {r}: predicted {g}, expected {w}"
    print(f"ok: {what}")


def memory_per_rank(shapes, n, shard, optimizer) -> list[dict]:
    '''The bytes per rank, computed here: torch.chunk along dim 0, float32, per-element state.'''
    import torch

    states = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    out = []
    for r in range(n):
        full = mine = 0
        for s in shapes:
            pieces = torch.arange(s[0]).chunk(n)   # FSDP2's split of dim 0; maybe fewer than n
            per_row, rows = math.prod(s[1:]), (len(pieces[r]) if r < len(pieces) else 0)
            full += 4 * s[0] * per_row
            mine += 4 * rows * per_row
        held = {k: (mine if k in shard else full) for k in ("params", "grads", "optimizer")}
        held["optimizer"] *= states
        held["total"] = sum(held.values())
        out.append(held)
    return out


def memory_computed(mine, shapes, n, shard, optimizer, what) -> None:
    """:func:`memory_checked` against :func:`memory_per_rank`'s bytes (computed here)."""
    memory_checked(mine, shapes, n, shard, optimizer, what, memory_per_rank(shapes, n, shard, optimizer))


def drawn_model(rng) -> tuple:
    """A model, a world, an optimizer and a stage drawn from ``rng``: (shapes, n, shard, optimizer)."""
    shapes = [tuple(rng.randint(1, 300) for _ in range(rng.choice((1, 2, 2, 3))))
              for _ in range(rng.randint(4, 9))]
    n, opt = rng.randint(2, 9), rng.choice(("sgd", "momentum", "adam"))
    stage = rng.choice((ZERO3, ("grads", "optimizer"), ("optimizer",), ()))
    return shapes, n, stage, opt


# -- resume_batches --------------------------------------------------------------------------
def batches_checked(mine, case, want, what) -> None:
    """``mine(*case)`` is ``want``, the batches the uninterrupted run reads."""
    got = mine(*case)  # computed in your process
    ok = isinstance(got, list) and len(got) == len(want) and all(
        isinstance(b, list) and [int(i) for i in b] == w for b, w in zip(got, want))
    assert ok, f"{what} {case}: the uninterrupted run reads {want}; you said {got!r}"
    print(f"ok: {what}")


def uninterrupted(n, world, rank, per_rank, seed, step, count):
    '''The batches of steps step+1 .. step+count, read off the loop run from the start.'''
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    batches, epoch = [], 0
    while len(batches) < step + count:
        sampler.set_epoch(epoch)
        order = list(sampler)
        batches += [order[b * per_rank:(b + 1) * per_rank] for b in range(len(order) // per_rank)]
        epoch += 1
    return batches[step:step + count]


def resumed_at(n, world, rank, per_rank, seed, step, count):
    '''The same for a run far along, straight from the epoch the step falls in.'''
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    per_epoch = len(sampler) // per_rank
    epoch, batches = step // per_epoch, []
    first = step - epoch * per_epoch
    while len(batches) < first + count:
        sampler.set_epoch(epoch)
        order = list(sampler)
        batches += [order[b * per_rank:(b + 1) * per_rank] for b in range(per_epoch)]
        epoch += 1
    return batches[first:first + count]


def resume_case(*c) -> tuple:
    """(the case, :func:`uninterrupted`'s batches of it)."""
    return c, uninterrupted(*c)


# -- scale_schedule --------------------------------------------------------------------------
def schedule_checked(mine, case, want, what) -> None:
    """``mine(*case)`` is ``want``: GradScaler's scales and skipped steps."""
    got = mine(*case)  # computed in your process
    ok = (isinstance(got, (tuple, list)) and len(got) == 2 and list(map(float, got[0])) == want[0]
          and list(map(int, got[1])) == want[1])
    assert ok, f"{what}: GradScaler gives scales {want[0]}, skipped {want[1]}; you said {got!r}"
    print(f"ok: {what}")


def scaler(grad_max, init_scale, growth_factor, backoff_factor, growth_interval):
    """torch.amp.GradScaler itself, on CPU: step k's backward yields scale * grad_max[k]
    as a float16 gradient (inf if it rounds there); step, update."""
    import torch

    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    sc = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                              backoff_factor=backoff_factor, growth_interval=growth_interval)
    scales, skipped = [], []
    for k, g in enumerate(grad_max):
        opt.zero_grad(set_to_none=True)
        scales.append(sc.get_scale())
        sc.scale((p.half().double() * g).sum()).backward()
        if not torch.isfinite(p.grad).all():
            skipped.append(k)
        sc.step(opt)
        sc.update()
    return scales, skipped


def scale_kernel(grad_max, init_scale, growth_factor, backoff_factor, growth_interval):
    """The same through the op GradScaler.update calls, for runs too long to backward."""
    import torch

    scale, tracker = torch.full((1,), init_scale), torch.zeros(1, dtype=torch.int32)
    scales, skipped = [], []
    for k, g in enumerate(grad_max):
        scales.append(float(scale))
        inf = math.isinf(float(torch.tensor(float(scale) * g, dtype=torch.float64).half()))
        skipped += [k] if inf else []
        torch._amp_update_scale_(scale, tracker, torch.tensor([float(inf)]), growth_factor,
                                 backoff_factor, growth_interval)
    return scales, skipped


def schedule_case(*c) -> tuple:
    """(the case, :func:`scaler`'s schedule of it)."""
    return c, scaler(*c)


def drawn_run(rng, n: int = 40) -> tuple:
    """A run of ``n`` steps drawn from ``rng``: gradients around float16's ceiling at a drawn scale,
    a drawn growth and backoff factor and growth interval."""
    init = 2.0 ** rng.randint(8, 24)
    run = [65520 / init * 2.0 ** rng.uniform(-4, 3) for _ in range(n)]
    return run, init, rng.choice([2.0, 4.0]), rng.choice([0.5, 0.25]), rng.randint(1, 4)
