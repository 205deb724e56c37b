"""What runs on each rank of a rank exercise, around the learner's function (rank side).

A test cell picks one of these and gives each rank its own arguments (plain data: a rank knows
only its own inputs); the learner's function comes as a :class:`Learner`, rebuilt on the rank
from its source. Nothing here knows an answer: the ranks run the learner's code, so whatever a
rank holds, the learner can read. What the test checks -- the values returned, and every message
the ranks exchanged -- it checks in its own process (:mod:`dtlab.course.ranks`)::

    Ranks(3, offer={"send", "recv"}).run(gathers, "ring_all_gather", [calls_0, calls_1, calls_2])
"""

from __future__ import annotations

import os
from typing import Any


class Learner:
    """The learner's function as it travels to a rank: its name and source (or, for a function
    without a notebook cell, the function pickled), rebuilt where it runs."""

    def __init__(self, name: str, source: dict):
        self.name, self.source = name, source
        self._fn = None

    def __call__(self, *args, **kwargs) -> Any:
        if self._fn is None:
            from .learner import _build

            self._fn, _ = _build({"name": self.name, **self.source})
        return self._fn(*args, **kwargs)


def _mark(**info) -> None:
    from ..runtime.observed import mark

    mark(info)


def _tensor(values: list, shape: list, dtype: str):
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype)).reshape(shape)


def _flat(t) -> list:
    return t.detach().reshape(-1).cpu().tolist()


def call(fn: Learner, args: list) -> Any:
    """``fn(*args)``."""
    return fn(*args)


def with_pid(fn: Learner, pid: int) -> Any:
    """``fn()`` while ``os.getpid()`` returns ``pid``: a number only this rank was given, which
    the other ranks can learn only from it."""
    os.getpid = lambda: pid
    return fn()


def gathers(fn: Learner, calls: list[dict]) -> list:
    """All-gather implementations: for each ``{"shape", "dtype", "mine"}`` (this rank's values,
    flat), ``fn(slots, tensor)`` into slots filled with -1; every slot back, flat, per call."""
    import torch
    import torch.distributed as dist

    out = []
    for i, c in enumerate(calls):
        _mark(call=i)
        t = _tensor(c["mine"], c["shape"], c["dtype"])
        slots = [torch.full(c["shape"], -1, dtype=t.dtype) for _ in range(dist.get_world_size())]
        fn(slots, t)
        out.append([_flat(s) for s in slots])
    _mark(call=len(calls))
    return out


def reductions(fn: Learner, calls: list[dict]) -> list:
    """All-reduce implementations: for each ``{"shape", "dtype", "op", "mine"}``, ``fn(tensor,
    dist.ReduceOp.<op>)`` in place; the tensor back, flat, with its shape, per call."""
    import torch.distributed as dist

    out = []
    for i, c in enumerate(calls):
        _mark(call=i)
        t = _tensor(c["mine"], c["shape"], c["dtype"])
        fn(t, getattr(dist.ReduceOp, c["op"]))
        out.append({"shape": list(t.shape), "values": _flat(t)})
    _mark(call=len(calls))
    return out


def relayed_all_gather(tensor_list, tensor, group=None, async_op=False):
    """An all-gather served by the relay itself (op ``impl:all_gather``): the implementation a
    validator is handed. Whether it is right is the grader's choice, made in the relay per case
    (:mod:`dtlab.course.faults`); nothing on this rank says which."""
    import torch.distributed as dist

    work = dist.group.WORLD._op("impl:all_gather", [tensor], list(tensor_list))
    if async_op:
        return work
    work.wait()


def checks(fn: Learner, cases: int) -> list:
    """Validators: ``fn(relayed_all_gather)`` once per case; the verdicts, in case order."""
    out = []
    for k in range(cases):
        _mark(case=k)
        out.append(fn(relayed_all_gather))
    _mark(case=cases)
    return out


# ---- 05's parity exercise ----------------------------------------------------------------

def mlp(widths: list[int], seed: int):
    """The float64 MLP of a parity case (Linear, Tanh, ..., Linear), built the same on every rank
    and in the test's own reference."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    layers: list = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1]).double()


class Samples:
    """A map-style dataset of ``(x, y)`` pairs held by the test, not by the rank: each sample is
    fetched when asked for, so the test knows which samples each rank read (and there is no
    ``data.x`` to read them all from)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        import torch

        from ..runtime.observed import fetch

        i = int(i)
        if not -self.n <= i < self.n:
            raise IndexError(i)
        header, _ = fetch({"sample": i % self.n})
        return torch.tensor(header["x"], dtype=torch.float64), torch.tensor(header["y"])


def ddp_cases(fn: Learner, cases: list[dict]) -> list:
    """``fn(model, data, steps, per_rank, lr, seed)`` for each parity case (marked as a case);
    the trained parameters back, flat, per case."""
    out = []
    for k, case in enumerate(cases):
        _mark(case=k)
        model = mlp(case["widths"], case["model_seed"])
        fn(model, Samples(case["n"]), case["steps"], case["per_rank"], case["lr"], case["seed"])
        out.append([v for p in model.parameters() for v in _flat(p)])
    _mark(case=len(cases))
    return out


# ---- 00's hand-written DDP script ---------------------------------------------------------

SCRIPT_FILES_BYTES = 8 << 20   # what one rank's output folder may bring back


def script(_unused, job: dict) -> dict:
    """A learner's whole script on this rank, as ``torchrun`` would run it: ``job`` = {"filename",
    "source", "argv", "inputs": {name: base64}}. The script's own ``init_process_group`` joins
    the group this rank already has -- the relay, its only way to the other ranks (each rank is
    a sandbox of its own, without a network) -- and it runs with ``__name__ == "__main__"`` and
    ``sys.argv = [filename, *argv]``, ``{inputs}`` and ``{out}`` in ``argv`` standing for its
    input and output folders. Returns ``{"exit": status, "files": {path: base64}}``: what it
    wrote under ``{out}``; its prints and its traceback (its own frames only) are its output."""
    import base64
    import runpy
    import sys
    import tempfile
    import traceback

    import torch.distributed as dist

    here = tempfile.mkdtemp(prefix="dtlab-script-rank-")
    inputs, out = os.path.join(here, "inputs"), os.path.join(here, "out")
    os.makedirs(inputs)
    for name, blob in job["inputs"].items():
        with open(os.path.join(inputs, os.path.basename(name)), "wb") as f:
            f.write(base64.b64decode(blob))
    path = os.path.join(inputs, os.path.basename(job["filename"]))
    with open(path, "w") as f:
        f.write(job["source"])
    rank, n = dist.get_rank(), dist.get_world_size()
    os.environ.update(GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(n),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")

    def joined(backend=None, *args, **kwargs):  # the group is there already: the relay's
        return None

    dist.init_process_group = dist.distributed_c10d.init_process_group = joined
    sys.argv = [path, *(a.replace("{inputs}", inputs).replace("{out}", out) for a in job["argv"])]
    status = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: BLE001 - the script's failure is its exit status
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != path:
            tb = tb.tb_next  # from the script's own frames on
        traceback.print_exception(type(e), e, tb)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    files, used = {}, 0
    for root, _, names in os.walk(out):
        for name in sorted(names):
            full = os.path.join(root, name)
            size = os.path.getsize(full)
            if os.path.isfile(full) and not os.path.islink(full) and used + size <= SCRIPT_FILES_BYTES:
                with open(full, "rb") as f:
                    files[os.path.relpath(full, out)] = base64.b64encode(f.read()).decode()
                used += size
    return {"exit": status, "files": files}
