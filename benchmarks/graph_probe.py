"""Where a CUDA-graph-captured torch all_reduce (or sendrecv) spends its time beyond NCCL's
kernel (2 GPUs).

    PYTHONPATH=. NCCL_NVLS_ENABLE=0 python3 benchmarks/graph_probe.py OUT_DIR [OP]

Side by side in one job, 8 B all_reduce on 2 ranks (or sendrecv posted as dtlab.bench.timing
posts it: batch_isend_irecv, waiting on each work; sendrecv_last waits on the last work only,
sendrecv_sync posts the pair in a synchronous coalescing manager), per call: eager with Flight Recorder on
(every dtlab launch's default) and off (dtlab.bench's default), and a graph of 50 captured calls
replayed; the captured graph's nodes by type (cudaGraphDebugDotPrint through
torch.cuda.CUDAGraph.debug_dump), to show what torch adds around each NCCL kernel.
"""
import collections
import os
import re
import sys

import dtlab


def probe(out, op="all_reduce", iters=200, captured=50):
    import time

    import torch
    import torch.distributed as dist

    dev = dtlab.device()
    x = torch.zeros(2, device=dev)
    r, n = dist.get_rank(), dist.get_world_size()

    def call():
        if op == "all_reduce":
            dist.all_reduce(x)
        elif op == "sendrecv_sync":  # one group on the current stream: no side stream to join
            with dist._coalescing_manager(device=dev, async_ops=False):
                dist.isend(x, (r + 1) % n)
                dist.irecv(x, (r - 1) % n)
        else:
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (r + 1) % n),
                                            dist.P2POp(dist.irecv, x, (r - 1) % n)])
            for w in works if op == "sendrecv" else works[-1:]:  # sendrecv_last: the last only
                w.wait()

    for _ in range(20):
        call()
    torch.cuda.synchronize()

    def eager():
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
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
            call()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g.enable_debug_mode()
    with torch.cuda.graph(g, stream=s):
        for _ in range(captured):
            call()
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
        path = os.path.join(out, f"graph_{op}_rank0.dot")
        g.debug_dump(path)
        text = open(path).read() if os.path.exists(path) else ""
        kinds = collections.Counter(re.findall(
            r"\b(KERNEL|MEMCPY|MEMSET|HOST|GRAPH|EVENT_RECORD|WAIT_EVENT|EMPTY|MEM_ALLOC|MEM_FREE|"
            r"EXT_SEMAS_SIGNAL|EXT_SEMAS_WAIT|CONDITIONAL|BATCH_MEM_OP)\b", text))
        kernels = collections.Counter(re.findall(r"(ncclDevKernel\w*|\w*_kernel\w*)", text))
        res["nodes per call"] = {k: v / captured for k, v in kinds.items()}
        res["edges"] = text.count(" -> ")
        res["kernels per call"] = {k: v / captured for k, v in kernels.most_common(6)}
    del g
    torch.cuda.synchronize()
    return res


if __name__ == "__main__":
    out = os.path.abspath(sys.argv[1])
    op = sys.argv[2] if len(sys.argv) > 2 else "all_reduce"
    os.makedirs(out, exist_ok=True)
    for fr in ("0", "2000"):
        r = dtlab.run(probe, out, op, nprocs=2, timeout=120,
                      env={"TORCH_FR_BUFFER_SIZE": fr, "TORCH_NCCL_TRACE_BUFFER_SIZE": fr})
        print(f"Flight Recorder buffer {fr}:")
        for rank, v in enumerate(r.values):
            print(f"  rank {rank}: {v}")
