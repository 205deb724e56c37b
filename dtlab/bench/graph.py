"""CUDA-graph timing for :func:`dtlab.bench.sweep` (``graph=True``, ``dtlab bench --graph``):
the timed loop of ``iters`` collectives captured once in a ``torch.cuda.CUDAGraph``, then
replayed, so that the host's per-call cost (the Python call, torch's checks, the work object,
the watchdog's bookkeeping, the kernel launch) leaves the figure and what remains is the GPUs'
and the links' own time -- what nccl-tests ``-G N`` reports (src/common.cu, ``BenchTime``: the
loop is captured with ``cudaStreamBeginCapture`` in thread-local mode and launched N times).

Rank-side contract (runs inside a rank of :func:`dtlab.run`, NCCL backend only):

1. ``warmup`` eager calls first: NCCL creates its communicators, and for send/recv its
   point-to-point connections, on first use, and that allocates memory and opens connections,
   which a graph capture cannot contain;
2. capture ``iters`` calls on a side stream (``torch.cuda.graph(g, stream=s)``, thread-local
   capture mode as nccl-tests uses), then one untimed replay (the graph's first launch uploads
   it);
3. barrier; a tiny eager all_reduce aligns the ranks' GPUs (as in the eager path,
   :func:`dtlab.bench.timing.time_case`); CUDA events around ``launches`` replays (default
   100, :data:`dtlab.bench.engine.GRAPH_LAUNCHES`, as nccl-tests ``-G 100``); seconds per
   call = elapsed / (iters * launches); the caller takes the MAX over ranks;
4. always, error or not: ``del g`` and a device synchronize before returning, so no captured
   NCCL work is alive when the process group is destroyed (a job hung in
   ``destroy_process_group`` after a capture whose graph was still alive). Every step is
   bounded by the launch's ``timeout``: the supervisor stops a rank that outlives it.

The sweep's ranks run with NCCL_GRAPH_MIXING_SUPPORT=0 (:func:`dtlab.bench.engine.quiet_env`):
NCCL's default support for graph launches beside outstanding eager calls on one communicator cost
a captured 8 B all_reduce 18.6 us instead of 4.6 on 2x H200 (BENCHMARKS.md).

Not run by this repository's CPU CI: the GPU tests (``pytest -m gpu tests/bench``, passed on 2x
H200) and ``scripts/gpu_bandwidth.sh`` exercise it.

>>> df = bench.sweep("all_reduce", 8, "64K", nprocs=2, graph=True)    # doctest: +SKIP
"""

from __future__ import annotations

import torch
import torch.distributed as dist

def check_graph_possible(backend: str | None = None) -> None:
    """ValueError, one line, when graph mode cannot run here (no CUDA, or a CPU backend)."""
    if not torch.cuda.is_available():
        raise ValueError("graph mode captures the timed loop in a CUDA graph: it needs CUDA "
                         "GPUs and the NCCL backend; this machine has no CUDA device: time "
                         "eagerly, without graph mode.")
    if backend not in (None, "auto", "nccl"):
        raise ValueError(f"graph mode needs backend='nccl' (got {backend!r}): gloo runs on the "
                         f"CPU and has nothing to capture.")


def time_graphed(case, iters: int, warmup: int, device, launches: int) -> float:
    """Seconds per call of ``case.run()`` replayed from a CUDA graph (this rank's; the caller
    reduces over ranks)."""
    if device.type != "cuda":
        raise ValueError("graph timing needs the NCCL backend on CUDA devices.")
    for _ in range(max(warmup, 1)):  # at least one eager call: connections exist before capture
        case.run()
    torch.cuda.synchronize(device)
    dist.barrier()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)
    try:
        with torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):
            for _ in range(iters):
                case.run()
        g.replay()  # first launch: upload, untimed
        torch.cuda.synchronize(device)
        dist.barrier()
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.all_reduce(torch.zeros(1, device=device))  # line the ranks' GPUs up (timing.py)
        start.record()
        for _ in range(launches):
            g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / (iters * launches)
    finally:
        del g
        torch.cuda.synchronize(device)
