"""Section 00's last part: a DDP training script written by hand and run with torchrun.

What the learner's ``train_ddp.py`` must do is fixed by :data:`SPEC`; this module holds what a
test needs to judge it without running it -- the data, and what DDP on N ranks must produce
from that data, computed in one process by following DDP's rules step by step::

    path = make_data(folder, n=64, d=4, seed=0)             # data.pt: {"x": [n, d], "y": [n, 1]}
    want = expected(path, nprocs=2, epochs=2, batch_size=8, lr=0.1, seed=0)
    want["state"], want["losses"]                           # final weights, each epoch's loss
    problems(run, want)                                     # [] when the run did all of it

:func:`expected` is DDP's arithmetic, not a DDP run: each rank's batches are the ones
``DistributedSampler(num_replicas=N, rank=r, shuffle=True, seed=seed)`` gives it after
``set_epoch(epoch)`` (through a ``DataLoader`` of ``batch_size``, the last batch short); at each
step every rank's gradient of its own batch's mean squared error is computed, DDP's all-reduce
averages them (sum of ``g_r / N``), and SGD takes one step on every rank with that average. The
epoch's loss is the mean of all ranks' batch losses. A real DDP run adds the gradients in
another order, so the two agree within float32 rounding (:data:`WEIGHT_TOL`), not bitwise.

The classic failures (``classic.py``, :func:`run_mistake`) and DataParallel vs DDP (:mod:`.dp`)
are the section's other parts.
"""

from __future__ import annotations

import io
import math
import os
import re

SPEC = {
    "command": "torchrun --standalone --nproc-per-node N train_ddp.py --data DATA --out OUT "
               "--epochs E --batch-size B --lr LR --seed S",
    "model": "torch.manual_seed(S), then nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 1))",
    "log": "rank 0 only, once per epoch: 'epoch <e> loss <L>', L the mean of every rank's batch losses",
    "checkpoint": "rank 0 saves the unwrapped model's state_dict to OUT/model.pt",
}
HIDDEN = 16           # the model's hidden width (SPEC)
# float32 weights after a few dozen SGD steps, DDP's all-reduce order against this module's:
# measured 1e-8..1e-7 (tests/byhand); forgetting set_epoch or averaging nothing moves them by
# 1e-3 and more (hidden inputs are drawn so that it is at least 20x this)
WEIGHT_TOL = 1e-5
LOSS_TOL = 2e-5       # the log prints 6 decimals
_EPOCH = re.compile(r"^\s*epoch\s+(\d+)\s+loss\s+([-+0-9.eEnaif]+)\s*$")


def build(d: int, seed: int):
    """The model of :data:`SPEC`, as every rank builds it."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def make_data(folder: str, n: int = 64, d: int = 4, seed: int = 0, name: str = "data.pt") -> str:
    """A regression set, ``y = sin(x @ w) + noise``, saved as ``folder/name`` for the script."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    torch.save({"x": x, "y": y}, path)
    return path


def expected(data: str, nprocs: int, epochs: int, batch_size: int, lr: float, seed: int,
             set_epoch: bool = True) -> dict:
    """What DDP on ``nprocs`` ranks must end with (module docstring): ``{"state": {name:
    tensor}, "losses": [per epoch], "rank0_losses": [rank 0's own batches only], "sent": [per
    rank: [per step: the gradients of its own batch / nprocs, flat]]}`` -- what each rank must
    give DDP's all-reduce at each step (in DDP's bucket order, which :func:`synced` ignores)."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    blob = torch.load(data)
    ds = TensorDataset(blob["x"], blob["y"])
    model = build(blob["x"].shape[1], seed)
    params = list(model.parameters())
    samplers = [DistributedSampler(ds, num_replicas=nprocs, rank=r, shuffle=True, seed=seed)
                for r in range(nprocs)]
    losses, rank0 = [], []
    sent: list[list] = [[] for _ in range(nprocs)]   # per rank, per step: its gradients / N
    for epoch in range(epochs):
        if set_epoch:
            for s in samplers:
                s.set_epoch(epoch)
        batches = [list(DataLoader(ds, batch_size=batch_size, sampler=s)) for s in samplers]
        total, mine = [], []
        for step in range(len(batches[0])):
            avg = [torch.zeros_like(p) for p in params]
            for r in range(nprocs):
                x, y = batches[r][step]
                loss = torch.nn.functional.mse_loss(model(x), y)
                grads = [g / nprocs for g in torch.autograd.grad(loss, params)]
                for a, g in zip(avg, grads):
                    a += g
                sent[r].append(torch.cat([g.flatten() for g in grads]))
                total.append(loss.item())
                if r == 0:
                    mine.append(loss.item())
            with torch.no_grad():
                for p, a in zip(params, avg):
                    p -= lr * a
        losses.append(sum(total) / len(total))
        rank0.append(sum(mine) / len(mine))
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "losses": losses, "rank0_losses": rank0, "sent": sent}


def max_diff(a: dict, b: dict) -> float:
    """The largest |difference| between two state dicts with the same keys and shapes."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def logged(run) -> dict[int, list[tuple[int, float]]]:
    """{rank: [(epoch, loss), ...]} of the 'epoch <e> loss <L>' lines each rank printed."""
    out: dict[int, list[tuple[int, float]]] = {}
    for r in range(len(run.codes)):
        for ln in run.lines(r):
            m = _EPOCH.match(ln)
            if m:
                try:
                    out.setdefault(r, []).append((int(m.group(1)), float(m.group(2))))
                except ValueError:
                    pass
    return out


def load_state(blob: bytes):
    """A saved state dict, read as data only (``weights_only``: no code from the file runs)."""
    import torch

    return torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")


def synced(traffic, want: dict) -> list[str]:
    """Whether each rank gave DDP's all-reduce the gradients of its own batches, step by step:
    rank r's float32 all-reduces of all the model's parameters at once (DDP's one bucket, for a
    model this small) must be, in order, ``want["sent"][r]`` -- each compared as a sorted list
    of numbers, so that the bucket's order does not matter -- within float32 rounding. Empty
    when they are; else what is missing, in words. A run that computes the right weights some
    other way (one rank playing every rank, say) sends nothing of the kind."""
    import torch

    from ..course.traffic import values

    out = []
    for r, steps in enumerate(want["sent"]):
        numel = steps[0].numel() if steps else 0
        sent = [m for m in traffic if m.rank == r]
        other = _beyond_ddp(r, sent, numel, len(steps), len(want["losses"]))
        if other:
            out.append(other)
            continue
        mine = [m for m in sent if m.op == "all_reduce" and m.dtype == "float32"
                and m.numel == numel]
        if len(mine) != len(steps):
            out.append(f"rank {r} all-reduced all {numel} gradients at once {len(mine)} times; "
                       f"DDP does it once a step, {len(steps)} steps here")
            continue
        for k, (m, g) in enumerate(zip(mine, steps)):
            got = torch.tensor(sorted(values(m)))
            ref = torch.sort(g).values
            if not torch.allclose(got, ref, rtol=1e-4, atol=1e-7):
                out.append(f"rank {r}'s gradients at step {k} are not those of its own batch "
                           f"(largest difference {float((got - ref).abs().max()):.3g})")
                break
    return out


def _beyond_ddp(rank: int, mine: list, numel: int, steps: int, epochs: int) -> str:
    """What rank ``rank`` sent that a DDP script does not, in words ("" if nothing): DDP's
    constructor broadcasts from rank 0 (a few messages, at most the model's size) and gathers
    one shape check; besides the gradients, a script reduces its loss -- a couple of numbers a
    step or an epoch. A rank that moved data (another rank's samples, their gradients) needs
    more than that."""
    casts = [m for m in mine if m.op == "broadcast"]
    if len(casts) > 6 or any(m.root not in (0, None) or m.numel > numel for m in casts):
        return (f"rank {rank} broadcast {len(casts)} tensors (from ranks "
                f"{sorted({m.root for m in casts}, key=str)}, the largest of "
                f"{max(m.numel for m in casts)} numbers): building DDP broadcasts at most 6, "
                f"from rank 0, none larger than the model's {numel} parameters")
    gathers = [m for m in mine if m.op == "all_gather"]
    if len(gathers) > 2 or any(m.numel > 16 for m in gathers):
        return f"rank {rank} all-gathered {len(gathers)} times: more than building DDP does"
    small = [m for m in mine if m.op == "all_reduce" and m.numel != numel]
    if len(small) > steps + 2 * epochs + 4 or any(m.numel > 2 for m in small):
        return (f"rank {rank} all-reduced {len(small)} tensors besides the gradients (up to "
                f"{max((m.numel for m in small), default=0)} numbers each): more than a loss")
    return ""


def problems(run, want: dict, hints: dict | None = None) -> list[str]:
    """What is wrong with a run of the learner's script against :func:`expected`'s ``want``
    (empty: nothing): the ranks' exit, the log, the saved weights and what the ranks
    all-reduced (:func:`synced`). ``hints``: other ``expected`` results by name that name a
    failure when the weights match one of them."""
    if not run.ok:
        return [run.failure()]
    out = synced(run.traffic, want)
    logs = logged(run)
    extra = sorted(r for r in logs if r != 0)
    if extra:
        out.append(f"rank{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} printed "
                   f"'epoch ... loss ...' too: the log is rank 0's alone")
    got = logs.get(0, [])
    epochs = len(want["losses"])
    if [e for e, _ in got] != list(range(epochs)):
        out.append(f"rank 0 printed the epochs {[e for e, _ in got]}; expected one line per epoch "
                   f"0..{epochs - 1}, as 'epoch <e> loss <L>'")
    else:
        bad = [(e, v, w) for (e, v), w in zip(got, want["losses"]) if not _same_loss(v, w)]
        if bad:
            mine = all(_same_loss(v, w) for (_, v), w in zip(got, want["rank0_losses"]))
            e, v, w = bad[0]
            out.append(f"epoch {e}: loss {v:.6f} printed, {w:.6f} expected"
                       + (" -- that is rank 0's own batches: the loss of the epoch is every "
                          "rank's (all-reduce it)" if mine else ""))
    if "model.pt" not in run.files:
        out.append(f"no model.pt in the output folder (it holds {sorted(run.files) or 'nothing'})")
        return out
    try:
        state = load_state(run.files["model.pt"])
    except Exception as e:  # noqa: BLE001 - a file that is not a state dict is an answer
        out.append(f"model.pt could not be read as a state dict: {type(e).__name__}: {e}")
        return out
    keys = sorted(state) if isinstance(state, dict) else None
    if keys != sorted(want["state"]):
        hint = " -- saved from the DDP wrapper: save model.module's state_dict" \
            if keys and all(k.startswith("module.") for k in keys) else ""
        out.append(f"model.pt holds {keys if keys is not None else type(state).__name__}, not "
                   f"the model's {sorted(want['state'])}{hint}")
        return out
    if any(tuple(state[k].shape) != tuple(v.shape) for k, v in want["state"].items()):
        out.append("model.pt's tensors have other shapes than the model's")
        return out
    diff = max_diff(state, want["state"])
    if not diff <= WEIGHT_TOL:
        named = [name for name, other in (hints or {}).items()
                 if max_diff(state, other["state"]) <= WEIGHT_TOL]
        out.append(f"the saved weights differ from DDP's by up to {diff:.3g} (allowed "
                   f"{WEIGHT_TOL:g})" + (f"; they are what {named[0]} gives" if named else ""))
    return out


def _same_loss(printed: float, want: float) -> bool:
    """A logged loss against the expected one: 6 printed decimals, float32 rounding (NaN: no)."""
    return abs(printed - want) <= LOSS_TOL + 1e-5 * abs(want)


HINTS = {"no_set_epoch": "a sampler without set_epoch(epoch)"}


def hidden_case(rng) -> dict:
    """A hidden case for the graded run: sizes, hyperparameters and a seed drawn from ``rng``
    (a ``random.Random``), each batch count uneven, and far enough from the usual mistakes."""
    nprocs = rng.choice([2, 3])
    batch = rng.choice([4, 5, 6])
    while True:
        n = rng.randrange(36, 80)
        if n % (nprocs * batch):
            break
    return {"nprocs": nprocs, "n": n, "d": rng.randrange(3, 7), "epochs": rng.choice([2, 3]),
            "batch_size": batch, "lr": rng.choice([0.05, 0.1, 0.2]),
            "seed": rng.randrange(1, 10**6)}


def args_of(case: dict) -> list[str]:
    """The script's command-line arguments for ``case`` (``{inputs}``, ``{out}``: its folders,
    as :func:`dtlab.course.script` fills them in)."""
    return ["--data", "{inputs}/data.pt", "--out", "{out}", "--epochs", str(case["epochs"]),
            "--batch-size", str(case["batch_size"]), "--lr", str(case["lr"]),
            "--seed", str(case["seed"])]


def prepare(case: dict, folder: str) -> tuple[list[str], dict, dict]:
    """(one data file per rank, ``expected``, hints) for ``case``. The data is drawn again
    (seed + 1, ...) until forgetting set_epoch or logging rank 0's own loss moves the result at
    least 20x past the tolerances, so that such a script cannot pass by luck. Each rank's file
    is the data with *decoys* (:func:`decoyed`) where that rank never reads: a DDP script sees
    only true samples; a rank that plays the other ranks' part cannot."""
    for attempt in range(20):
        path = make_data(folder, case["n"], case["d"], case["seed"] + attempt)
        kw = dict(nprocs=case["nprocs"], epochs=case["epochs"], batch_size=case["batch_size"],
                  lr=case["lr"], seed=case["seed"])
        want = expected(path, **kw)
        other = expected(path, set_epoch=False, **kw)
        apart = max_diff(want["state"], other["state"]) > 20 * WEIGHT_TOL
        own = max(abs(a - b) for a, b in zip(want["losses"], want["rank0_losses"]))
        if apart and own > 20 * LOSS_TOL and all(map(math.isfinite, want["losses"])):
            return decoyed(path, case), want, {HINTS["no_set_epoch"]: other}
    raise RuntimeError(f"no data for {case} separates the usual mistakes")


def read_by(n: int, nprocs: int, epochs: int, seed: int) -> list[set[int]]:
    """The samples each rank reads over ``epochs`` epochs of ``DistributedSampler(shuffle=True,
    seed=seed)`` with ``set_epoch``: what a DDP script's rank ``r`` ever looks at."""
    from torch.utils.data import DistributedSampler

    out = []
    for r in range(nprocs):
        s, seen = DistributedSampler(range(n), num_replicas=nprocs, rank=r, shuffle=True,
                                     seed=seed), set()
        for e in range(epochs):
            s.set_epoch(e)
            seen |= set(s)
        out.append(seen)
    return out


def decoyed(path: str, case: dict) -> list[str]:
    """One copy of the data file per rank, beside it, in which every sample that rank never
    reads (:func:`read_by`) is replaced by a fresh draw of the same kind: the same shapes and
    spread, other numbers. Grading gives rank ``r`` the ``r``-th copy."""
    import torch

    blob = torch.load(path)
    n = blob["x"].shape[0]
    g = torch.Generator().manual_seed(case["seed"] + 7919)
    out = []
    for r, seen in enumerate(read_by(n, case["nprocs"], case["epochs"], case["seed"])):
        x, y = blob["x"].clone(), blob["y"].clone()
        for i in sorted(set(range(n)) - seen):
            x[i] = torch.randn(x.shape[1], generator=g)
            y[i] = torch.randn(1, generator=g)
        p = f"{os.path.splitext(path)[0]}.rank{r}.pt"
        torch.save({"x": x, "y": y}, p)
        out.append(p)
    return out


GPU_ONLY = ("device_mismatch", "wrap_before_move", "no_set_device")
RECORDED = "h100x2-byhand"


def run_mistake(bug: str, nproc: int = 2, epochs: int = 2):
    """``classic.py --bug <bug>`` under torchrun, live where this machine can show it (the GPU
    mistakes need ``nproc`` GPUs); else the console recorded on 2x H100 (``data/h100x2-byhand``),
    its telling lines printed. Returns the :class:`dtlab.Torchrun` or the recorded observation."""
    from ..runtime.torchrun import torchrun
    from .classic import BUGS

    if bug not in BUGS:
        raise ValueError(f"bug={bug!r} is not one of {', '.join(BUGS)}")
    import torch

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classic.py")
    crash = bug in GPU_ONLY
    if not crash or torch.cuda.device_count() >= nproc:
        # a crash's console is long: its telling lines only
        run = torchrun(here, "--bug", bug, "--epochs", str(epochs), nproc=nproc, show=not crash)
        if crash:
            for ln in [f"$ {run.command}", *telling(run.console),
                       f"[torchrun: exit status {run.code}, {run.seconds:.1f} s]"]:
                print(ln)
        return run
    from ..course.recorded import recorded

    rec = recorded(f"{RECORDED}/classic-{bug}.txt")
    for ln in telling(rec.text):
        print(ln)
    return rec


_TELLING = re.compile(r"(\b(?!ChildFailed)\w*(Error|Exception): |Duplicate GPU|exitcode\s+:"
                      r"|^\$ torchrun)")


def telling(console: str, limit: int = 12) -> list[str]:
    """The lines of a torchrun console that say what went wrong (errors, NCCL's reason, exit
    codes), each once, in order; tracebacks' frames and torchrun's banners left out."""
    out: list[str] = []
    for ln in console.splitlines():
        if _TELLING.search(ln) and ln not in out:
            out.append(ln)
    return out[:limit]


def data_parallel_table():
    """DataParallel vs DDP as a DataFrame: measured here on 2+ GPUs (:func:`.dp.compare`), else
    the table recorded on 2x H100 (said on screen)."""
    import json

    import pandas as pd
    import torch

    from . import dp

    if torch.cuda.device_count() >= 2:
        return pd.DataFrame(dp.compare())
    from ..course.recorded import recorded

    return pd.DataFrame(json.loads(recorded(f"{RECORDED}/dp-vs-ddp.json").text))
