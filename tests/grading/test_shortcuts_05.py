"""05_parity: known shortcuts fail each exercise's test cell (hidden tests included); the
source's solutions pass. The machinery is test_shortcuts.py's (grade, fails, CONTEXT).

    pytest tests/grading/test_shortcuts_05.py --durations=0
"""

import pytest

from conftest import assert_no_descendants
from test_shortcuts import CONTEXT, _cells, _solution, fails, grade

CONTEXT["05_parity"] = lambda c: c["cell1"]  # imports, N, NF


def _buggy_loop() -> str:
    """The notebook's own buggy loop, handed in as the answer."""
    src = next(s for s in _cells("05_parity").values() if "def buggy_train(" in s)
    return src + "\ntrain = buggy_train\n"


def _solution_with(old: str, new: str) -> str:
    sol = _solution(_cells("05_parity")["train"])
    assert old in sol, old
    return sol.replace(old, new)


TRAIN_SHORTCUTS = {
    "dtlab's own batch order": '''
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import default_collate

def train(model, data, steps, per_rank, lr, seed):
    from dtlab.parity.setup import global_batches
    r, w = dist.get_rank(), dist.get_world_size()
    ddp, batch = DDP(model), per_rank * dist.get_world_size()
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(steps):
        epoch, b = divmod(step, len(data) // batch)
        mine = global_batches(len(data), batch, epoch, seed)[b][r::w]
        x, y = default_collate([data[int(i)] for i in mine])
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
''',
    "the buggy loop as given": None,  # _buggy_loop()
    "the sampler without set_epoch": ("        sampler.set_epoch(epoch)", "        pass"),
    # no sampler: its own shuffle, sharded for exactly 2 ranks (the visible world size)
    "no sampler, sharded for 2 ranks": '''
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import default_collate

def train(model, data, steps, per_rank, lr, seed):
    r = dist.get_rank()
    ddp, batch = DDP(model), 2 * per_rank
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(steps):
        epoch, b = divmod(step, len(data) // batch)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch))
        x, y = default_collate([data[int(i)] for i in order[b * batch:(b + 1) * batch][r::2]])
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
''',
    # every rank is the single process: parity by construction, a token all-reduce per step
    "every rank trains on the whole global batch": '''
from torch.utils.data import default_collate

def train(model, data, steps, per_rank, lr, seed):
    batch = per_rank * dist.get_world_size()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        epoch, b = divmod(step, len(data) // batch)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch))
        x, y = default_collate([data[int(i)] for i in order[b * batch:(b + 1) * batch]])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        dist.all_reduce(torch.zeros(1, dtype=torch.float64, device=x.device))
''',
}


def _train_answer(name):
    answer = TRAIN_SHORTCUTS[name]
    if answer is None:
        return _buggy_loop()
    if isinstance(answer, tuple):
        return _solution_with(*answer)
    return answer


@pytest.mark.parametrize("name", list(TRAIN_SHORTCUTS))
def test_train_shortcut_fails(name):
    fails("05_parity", "train", _train_answer(name))
    assert_no_descendants()


def test_train_solution_passes():
    grade("05_parity", "train")
    assert_no_descendants()


# what the transformer's visible cases come to (3 ranks, SGD with momentum), read off the notebook
VISIBLE = {(("params", "grads", "optimizer"), "momentum"): [37356, 37356, 35496],
           ((), "momentum"): [110208, 110208, 110208]}

MEMORY_SHORTCUTS = {
    "dtlab's own predict_memory": '''
def predict_memory_per_rank(param_shapes, nranks, shard=("params", "grads", "optimizer"),
                            optimizer="momentum"):
    from dtlab.parity.fsdp import predict_memory
    n = sum(math.prod(s) for s in param_shapes)
    d = predict_memory(n, nranks, tuple(shard), optim_states={"sgd": 0, "momentum": 1, "adam": 2}[optimizer])
    return [{k: int(v) for k, v in d.items()} for _ in range(nranks)]
''',
    "the visible answers hard-coded": f'''
VISIBLE = {VISIBLE!r}

def predict_memory_per_rank(param_shapes, nranks, shard=("params", "grads", "optimizer"),
                            optimizer="momentum"):
    key = (tuple(shard), optimizer)
    if nranks == 3 and key in VISIBLE:
        return [dict(params=b, grads=b, optimizer=b, total=3 * b) for b in VISIBLE[key]]
    per = sum(math.prod(s) for s in param_shapes) * 4 // nranks
    return [dict(params=per, grads=per, optimizer=2 * per, total=4 * per)] * nranks
''',
    "an even split, not the row chunks": '''
def predict_memory_per_rank(param_shapes, nranks, shard=("params", "grads", "optimizer"),
                            optimizer="momentum"):
    full = sum(math.prod(s) for s in param_shapes) * 4
    k = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    d = {p: (full // nranks if p in shard else full) for p in ("params", "grads", "optimizer")}
    d["optimizer"] *= k
    d["total"] = sum(d.values())
    return [d] * nranks
''',
    "sharding ignored: everything replicated": '''
def predict_memory_per_rank(param_shapes, nranks, shard=("params", "grads", "optimizer"),
                            optimizer="momentum"):
    full = sum(math.prod(s) for s in param_shapes) * 4
    k = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    return [dict(params=full, grads=full, optimizer=k * full, total=(2 + k) * full)] * nranks
''',
    "the stage ignored: all sharded or nothing": None,   # the solution, shard read as a flag
    "Adam with one state": None,                          # the solution, Adam as momentum
    "an answer that only looks right": '''
class _Yes(dict):
    def __eq__(self, other): return True

def predict_memory_per_rank(param_shapes, nranks, shard=("params", "grads", "optimizer"),
                            optimizer="momentum"):
    return [_Yes() for _ in range(nranks)]
''',
}


def _memory_answer(name):
    answer = MEMORY_SHORTCUTS[name]
    if answer is not None:
        return answer
    sol = _solution(_cells("05_parity")["predict_memory"])
    old, new = {
        "the stage ignored: all sharded or nothing": (
            "mine if part in shard else full", "mine if shard else full"),
        "Adam with one state": ('"adam": 2', '"adam": 1'),
    }[name]
    assert old in sol, old
    return sol.replace(old, new)


@pytest.mark.parametrize("name", list(MEMORY_SHORTCUTS))
def test_predict_memory_shortcut_fails(name):
    fails("05_parity", "predict_memory", _memory_answer(name))
    assert_no_descendants()


def test_predict_memory_solution_passes():
    grade("05_parity", "predict_memory")
    assert_no_descendants()
