"""What each rank runs for :func:`dtlab.bench.sweep`: buffers, fill patterns, the timed loop and
the ``#wrong`` check, for every collective, out-of-place and in-place.

Per size and column, like nccl-tests' ``BenchTime``:

1. fill the inputs with a deterministic per-rank pattern;
2. ``warmup`` untimed calls, then a barrier so the ranks start together;
3. time ``iters`` back-to-back calls -- CUDA events on the current stream under NCCL (the
   collectives run on NCCL's stream, which the current stream waits for, so the end event
   fires when the last one is done; a tiny all_reduce just before the start event lines the
   ranks' start events up on the GPUs), ``time.perf_counter`` under gloo (its calls block) --
   and divide by ``iters``. Small messages are bound by how fast the host issues eager torch
   calls (~20-25 us each on an H200 host with torch 2.11), not by the GPUs;
4. all-reduce the per-op time with MAX, so every rank reports the slowest rank's time;
5. outside the timed loop: refill with another seed, zero the outputs, run once, count the
   elements that differ from the locally computed expectation, SUM over ranks (``#wrong``).

Element ``g`` of rank ``r``'s pattern is ``((g mod 11)*5 + 3r + seed) mod 11 + 1``: small whole
numbers, so sums over ranks are exact in every dtype (bf16 up to 23 ranks, int8 up to 11).

Faults on purpose, for dtlab's own tests only: the ranks read :data:`FAULTS_VAR`
(``DTLAB_TEST_FAULTS``), a JSON object, from their environment (dtlab.runtime's launch starts
each rank with the parent's ``os.environ`` under its own variables, so ``monkeypatch.setenv`` in
a test reaches the ranks of a later launch; a Pool's ranks keep the environment they started
with). Keys:

* ``"corrupt": k`` -- bump k elements of rank 0's result before the ``#wrong`` check, to prove
  a bad result is caught;
* ``"unsupported": [op, ...]`` -- those ops fail as on a backend without them;
* ``"fail": {setting label: message}`` -- in a :func:`dtlab.tuning.sweep`, that setting's last
  rank raises RuntimeError(message), as when NCCL rejects a setting.

Nothing else reads it, and nothing in dtlab sets it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

import torch
import torch.distributed as dist

from ..vocab import nccl_tests_type
from .formulas import NCCL_TESTS_REDOP, NCCL_TESTS_ROOT, algbw, busbw, coll_shape
from .report import TABLE_HEAD, render_row
from .result import SweepConfig

# torch's in-place-only APIs: the out-of-place column of these is N/A
OOP_NA = {"all_reduce": "torch.distributed.all_reduce works in place",
          "broadcast": "torch.distributed.broadcast works in place",
          "reduce": "torch.distributed.reduce works in place"}
# nccl-tests times in-place all_to_all/sendrecv but does not check them (the send and receive
# buffers are one buffer, so the result is undefined): #wrong is N/A there, here too
IP_UNCHECKED = ("all_to_all", "sendrecv")

_UNSUPPORTED = re.compile(r"does not support|not supported|no support|unsupported|"
                          r"not implemented", re.I)

# torch >= 2.13 renames all_gather_into_tensor / reduce_scatter_tensor; older torch has only these
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def is_unsupported(exc: BaseException) -> bool:
    """Does this exception say the backend lacks the op (rather than that something broke)?"""
    return isinstance(exc, NotImplementedError) or (
        isinstance(exc, (RuntimeError, ValueError)) and bool(_UNSUPPORTED.search(str(exc))))


def _index(start: int, count: int, device) -> torch.Tensor:
    # int32 halves the scratch memory of a 1 GiB check (values stay far below 2**31)
    kind = torch.int32 if start + count < 2**31 else torch.int64
    return torch.arange(start, start + count, dtype=kind, device=device)


def pattern(rank: int, start: int, count: int, seed: int, dtype, device) -> torch.Tensor:
    g = _index(start, count, device)
    return ((g % 11 * 5 + 3 * rank + seed) % 11 + 1).to(dtype)


def summed(n: int, start: int, count: int, seed: int, dtype, device) -> torch.Tensor:
    g = _index(start, count, device) % 11 * 5 + seed
    acc = torch.zeros(count, dtype=g.dtype, device=device)
    for r in range(n):
        acc += (g + 3 * r) % 11 + 1
    return acc.to(dtype)


class Case:
    """One (op, size, column): ``run()`` is one collective; ``fill(seed)`` resets its buffers;
    ``checked`` is this rank's output to verify (None: nothing to check on this rank) and
    ``expected(seed)`` what it must hold; ``verifiable`` False means #wrong is N/A."""

    def __init__(self, op: str, chunk: int, inplace: bool, dtype, device):
        self.op, self.chunk, self.inplace = op, chunk, inplace
        self.dtype, self.device = dtype, device
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.verifiable = not (inplace and op in IP_UNCHECKED)
        self.fill(0)

    def _pat(self, rank, start, count, seed):
        return pattern(rank, start, count, seed, self.dtype, self.device)

    def fill(self, seed: int) -> None:
        op, c, r, n = self.op, self.chunk, self.rank, self.n
        zeros = lambda k: torch.zeros(k, dtype=self.dtype, device=self.device)  # noqa: E731
        if op in ("all_reduce", "reduce"):
            self.buf = self._pat(r, 0, c, seed)
        elif op == "broadcast":
            self.buf = self._pat(0, 0, c, seed) if r == 0 else zeros(c)
        elif op == "all_gather":
            self.out = zeros(c * n)
            if self.inplace:
                self.out[r * c:(r + 1) * c] = self._pat(r, 0, c, seed)
                self.inp = self.out[r * c:(r + 1) * c]  # nccl-tests' in-place: my slice of out
            else:
                self.inp = self._pat(r, 0, c, seed)
        elif op == "reduce_scatter":
            self.inp = self._pat(r, 0, c * n, seed)
            self.out = self.inp[r * c:(r + 1) * c] if self.inplace else zeros(c)
        elif op == "all_to_all":
            self.inp = self._pat(r, 0, c * n, seed)  # block j goes to rank j
            self.out = self.inp if self.inplace else zeros(c * n)
        elif op == "sendrecv":
            self.inp = self._pat(r, 0, c, seed)
            self.out = self.inp if self.inplace else zeros(c)

    def run(self) -> None:
        op, r, n = self.op, self.rank, self.n
        if op == "all_reduce":
            dist.all_reduce(self.buf)
        elif op == "broadcast":
            dist.broadcast(self.buf, 0)
        elif op == "reduce":
            dist.reduce(self.buf, 0)
        elif op == "all_gather":
            _all_gather(self.out, self.inp)
        elif op == "reduce_scatter":
            _reduce_scatter(self.out, self.inp)
        elif op == "all_to_all":
            dist.all_to_all_single(self.out, self.inp)
        elif op == "sendrecv":  # like nccl-tests: send to the next rank, receive from the previous
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, self.inp, (r + 1) % n),
                                                dist.P2POp(dist.irecv, self.out, (r - 1) % n)]):
                work.wait()

    @property
    def checked(self) -> torch.Tensor | None:
        if self.op in ("all_reduce", "broadcast"):
            return self.buf
        if self.op == "reduce":
            return self.buf if self.rank == 0 else None  # only the root's result is defined
        return self.out

    def expected(self, seed: int) -> torch.Tensor:
        op, c, r, n = self.op, self.chunk, self.rank, self.n
        if op in ("all_reduce", "reduce"):
            return summed(n, 0, c, seed, self.dtype, self.device)
        if op == "broadcast":
            return self._pat(0, 0, c, seed)
        if op == "all_gather":
            return torch.cat([self._pat(j, 0, c, seed) for j in range(n)])
        if op == "reduce_scatter":
            return summed(n, r * c, c, seed, self.dtype, self.device)
        if op == "all_to_all":  # block j came from rank j: its elements meant for me
            return torch.cat([self._pat(j, r * c, c, seed) for j in range(n)])
        return self._pat((r - 1) % n, 0, c, seed)  # sendrecv


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _agree(value: float, op, device, dtype=torch.float64) -> float:
    t = torch.tensor([value], dtype=dtype, device=device)
    dist.all_reduce(t, op=op)
    return t.item()


def time_case(case: Case, iters: int, warmup: int, device, graph: int = 0) -> float:
    """Seconds per call, the MAX over ranks; ``graph``: that many replays of the loop captured
    in a CUDA graph (graph.py); 0: eager."""
    if graph:
        from .graph import time_graphed

        return _agree(time_graphed(case, iters, warmup, device, int(graph)), dist.ReduceOp.MAX,
                      device)
    for _ in range(warmup):
        case.run()
    _sync(device)
    dist.barrier()
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Ranks leave the barrier microseconds apart on the host. Put a tiny all_reduce on the
        # stream right before the start event, without waiting for it: it completes on every GPU
        # at nearly the same moment, after the last rank enqueued it, so all start events fire
        # together and no rank's loop includes waiting for a late peer.
        dist.all_reduce(torch.zeros(1, device=device))
        start.record()
        for _ in range(iters):
            case.run()
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / iters
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            case.run()
        seconds = (time.perf_counter() - t0) / iters
    return _agree(seconds, dist.ReduceOp.MAX, device)


FAULTS_VAR = "DTLAB_TEST_FAULTS"


def faults() -> dict:
    """The faults this rank is told to make (:data:`FAULTS_VAR`, see the module docstring);
    {} when unset, as always outside dtlab's tests."""
    text = os.environ.get(FAULTS_VAR, "").strip()
    if not text:
        return {}
    got = json.loads(text)
    if not isinstance(got, dict):
        raise ValueError(f"{FAULTS_VAR}={text!r}: a JSON object, e.g. '{{\"corrupt\": 3}}'")
    return got


def check_case(case: Case, seed: int, device, corrupt: int = 0) -> int | None:
    """#wrong over all ranks for one fresh call; None where it is N/A. ``corrupt``
    (:data:`FAULTS_VAR`'s) bumps that many of rank 0's output elements first."""
    if not case.verifiable:
        return None
    case.fill(seed)
    _sync(device)
    case.run()
    _sync(device)
    out = case.checked
    wrong = 0
    if out is not None:
        if corrupt and case.rank == 0:
            out.view(-1)[:corrupt] += 1
        wrong = int((out != case.expected(seed)).sum().item())
    return int(_agree(wrong, dist.ReduceOp.SUM, device, torch.int64))


def _column(op, chunk, inplace, cfg, device, dtype, seed, inject):
    """(seconds, wrong) for one column, or the reason it cannot run on this backend."""
    try:
        if op in inject.get("unsupported", ()):
            raise RuntimeError(f"{FAULTS_VAR}: backend does not support {op}")
        case = Case(op, chunk, inplace, dtype, device)
        seconds = time_case(case, cfg.iters, cfg.warmup, device, cfg.graph)
        wrong = check_case(case, seed, device, int(inject.get("corrupt", 0))) \
            if cfg.check else None
        del case
        return seconds, wrong, None
    except Exception as e:  # noqa: BLE001 -- only "the backend lacks this" is turned into data
        if not is_unsupported(e):
            raise
        return None, None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def _exchange(me: dict, run_id: str, rank: int, n: int) -> list[dict]:
    """Every rank's device description, through the rendezvous store rather than a collective:
    an NCCL all_gather here would itself obey NCCL_ALGO/NCCL_PROTO, and NCCL refuses e.g.
    Tree for AllGather -- the sweep must not fail before it measures anything."""
    import json

    store = dist.distributed_c10d._get_default_store()
    store.set(f"dtlab/bench/{run_id}/{rank}", json.dumps(me))
    return [json.loads(store.get(f"dtlab/bench/{run_id}/{r}")) for r in range(n)]


def run_sweep(cfg: SweepConfig) -> dict | None:
    """The rank function: every op x size x column; rank 0 prints a row per size as it ends
    and returns the rows (every rank holds the same numbers after the MAX/SUM reductions)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    if n < 2:
        raise ValueError(f"a bandwidth sweep needs at least 2 ranks; this launch has {n}. "
                         f"Pass nprocs=2 (with backend='gloo' on a machine with one GPU).")
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
        else torch.device("cpu")
    dtype = getattr(torch, cfg.dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    inject = faults()
    me = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "device": str(device),
          "name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    devices = _exchange(me, cfg.run_id, rank, n)
    if cfg.graph and device.type != "cuda":
        raise ValueError("graph=True needs the NCCL backend on CUDA devices; this launch runs "
                         f"{backend}.")
    rows, unsupported, skipped = [], {}, []
    # (op, inplace) pairs the backend cannot run; out-of-place of in-place-only APIs counts too
    bad = {(op, False) for op in OOP_NA}
    total, done, show = len(cfg.ops) * len(cfg.sizes), 0, cfg.progress and rank == 0
    if show:
        print(TABLE_HEAD, flush=True)
    for op in cfg.ops:
        if show:
            print(f"# {op}: {len(cfg.sizes)} sizes, {n} ranks, {backend}, {cfg.dtype}",
                  flush=True)
        for i, requested in enumerate(cfg.sizes):
            done += 1
            shape = coll_shape(op, requested, n, elem)
            if shape.size == 0 or {(op, False), (op, True)} <= bad:
                skipped.append((op, requested))  # 0 B after nccl-tests' rounding, or no support
                continue
            row = {"op": op, "size": shape.size, "count": shape.count,
                   "type": nccl_tests_type(cfg.dtype),
                   "redop": NCCL_TESTS_REDOP[op], "root": NCCL_TESTS_ROOT.get(op, -1)}
            for inplace, g in ((False, "oop"), (True, "ip")):
                # shape.count is the NCCL count argument: per rank for the chunked collectives
                sec, wrong, why = (None, None, None) if (op, inplace) in bad else \
                    _column(op, shape.count, inplace, cfg, device, dtype, 1 + i, inject)
                if why:
                    bad.add((op, inplace))
                    unsupported.setdefault(op, {})[g] = why
                    if show:
                        kind = "in-place" if inplace else "out-of-place"
                        print(f"# {op}: {kind} unsupported on {backend}: {why}", flush=True)
                row[g] = None if sec is None else {
                    "time_us": sec * 1e6, "algbw": algbw(op, shape.size, sec, n),
                    "busbw": busbw(op, shape.size, sec, n), "wrong": wrong}
            if row["oop"] is None and row["ip"] is None:
                continue
            rows.append(row)
            if show:
                print(f"{render_row(row)}  [{done}/{total}]", flush=True)
    if rank != 0:
        return None
    return {"rows": rows, "unsupported": unsupported, "skipped": skipped, "devices": devices,
            "backend": backend, "nranks": n, "torch": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
            if backend == "nccl" else None}
