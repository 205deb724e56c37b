"""Where a CUDA-graph-captured torch all_reduce spends its time beyond NCCL's kernel (2 GPUs).

    PYTHONPATH=. NCCL_NVLS_ENABLE=0 python3 bench/graph_probe.py OUT_DIR

Side by side in one job, 8 B all_reduce on 2 ranks, per call: eager with Flight Recorder on
(every dtlab launch's default) and off (dtlab.bench's default), and a graph of 50 captured calls
replayed; the captured graph's nodes by type (cudaGraphDebugDotPrint through
torch.cuda.CUDAGraph.debug_dump), to show what torch adds around each NCCL kernel.
"""
import collections
import os
import re
import sys

import dtlab


def probe(out, iters=200, captured=50):
    import time

    import torch
    import torch.distributed as dist

    dev = dtlab.device()
    x = torch.zeros(2, device=dev)
    for _ in range(20):
        dist.all_reduce(x)
    torch.cuda.synchronize()

    def eager():
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters * 1e6

    res = {"eager host-timed us/call": round(eager(), 2)}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    try:  # the captured graph itself must outlive instantiation for debug_dump to print it
        g = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g.enable_debug_mode()
    with torch.cuda.graph(g, stream=s):
        for _ in range(captured):
            dist.all_reduce(x)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    a.record()
    for _ in range(10):
        g.replay()
    b.record()
    b.synchronize()
    res["graph replay us/call"] = round(a.elapsed_time(b) * 1e3 / (10 * captured), 2)
    if dist.get_rank() == 0:
        path = os.path.join(out, "graph_rank0.dot")
        g.debug_dump(path)
        text = open(path).read() if os.path.exists(path) else ""
        kinds = collections.Counter(re.findall(
            r"\b(KERNEL|MEMCPY|MEMSET|HOST|GRAPH|EVENT_RECORD|WAIT_EVENT|EMPTY|MEM_ALLOC|MEM_FREE|"
            r"EXT_SEMAS_SIGNAL|EXT_SEMAS_WAIT|CONDITIONAL|BATCH_MEM_OP)\b", text))
        kernels = collections.Counter(re.findall(r"(ncclDevKernel\w*|\w*_kernel\w*)", text))
        res["nodes per call"] = {k: v / captured for k, v in kinds.items()}
        res["kernels per call"] = {k: v / captured for k, v in kernels.most_common(6)}
    del g
    torch.cuda.synchronize()
    return res


if __name__ == "__main__":
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    for fr in ("0", "2000"):
        r = dtlab.run(probe, out, nprocs=2, timeout=120,
                      env={"TORCH_FR_BUFFER_SIZE": fr, "TORCH_NCCL_TRACE_BUFFER_SIZE": fr})
        print(f"Flight Recorder buffer {fr}:")
        for rank, v in enumerate(r.values):
            print(f"  rank {rank}: {v}")
