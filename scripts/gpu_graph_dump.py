"""What a CUDA graph of torch's sendrecv holds, beside all_reduce's and NCCL's own: the graph
dtlab's graph-mode timing captures (20 calls, dtlab.bench.timing's way of posting each op),
written with CUDAGraph.debug_dump (cudaGraphDebugDotPrint), and its nodes counted by kind and
kernel name. The raw-NCCL graph comes from scripts/nccl_sendrecv_procs.cu (SR_DOT=FILE).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 scripts/gpu_graph_dump.py OUT_DIR
    python3 scripts/gpu_graph_dump.py --count FILE.dot...    # the counts of any dumped graph

Truth issue 3b: graph-mode sendrecv is ~0.8 us a call slower in dtlab than NCCL alone in two
processes; all_reduce is not. Recorded: data/h200x2-sendrecv-procs/.
"""
import collections
import re
import sys

ITERS = 20


def count(path: str) -> dict:
    """Node kinds and kernel names in a DOT file from cudaGraphDebugDotPrint."""
    text = open(path).read()
    kinds = collections.Counter(re.findall(r'label="\{?\s*([A-Z_]+)[\\| ]', text))
    kernels = collections.Counter(re.findall(r'(ncclDevKernel\w*|ncclKernel\w*|void [\w:<>]+)', text))
    return {"nodes": dict(kinds), "kernels": dict(kernels)}


def _dot(g, path: str) -> str:
    """Write graph g as DOT; torch's own debug_dump first, else cudaGraphDebugDotPrint on
    raw_cuda_graph() through ctypes. Returns what happened."""
    import ctypes
    import glob
    import os
    try:
        g.debug_dump(path)
        if os.path.exists(path):
            return "debug_dump"
    except Exception as e:  # noqa: BLE001 -- recorded, the other way is tried
        first = f"debug_dump: {type(e).__name__}: {e}"
    else:
        first = "debug_dump wrote nothing"
    import torch
    libs = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib",
                                  "libcudart.so*")) + ["libcudart.so.13", "libcudart.so"]
    for lib in libs:
        try:
            rt = ctypes.CDLL(lib)
            err = rt.cudaGraphDebugDotPrint(ctypes.c_void_p(g.raw_cuda_graph()),
                                            path.encode(), ctypes.c_uint(1))  # verbose
            return f"{first}; cudaGraphDebugDotPrint via {os.path.basename(lib)}: {err}"
        except Exception as e:  # noqa: BLE001
            first += f"; {os.path.basename(lib)}: {type(e).__name__}: {e}"
    return first


def rank_fn(out_dir: str) -> dict:
    import torch
    import torch.distributed as dist
    import dtlab
    dev = dtlab.device()
    r, n = dist.get_rank(), dist.get_world_size()
    buf = torch.full((2,), float(r + 1), device=dev)

    def sendrecv():  # as dtlab.bench.timing posts it
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, (r + 1) % n),
                                         dist.P2POp(dist.irecv, buf, (r - 1) % n)]):
            w.wait()

    report = {}
    for name, op in (("sendrecv", sendrecv), ("all_reduce", lambda: dist.all_reduce(buf))):
        for _ in range(3):
            op()
        torch.cuda.synchronize(dev)
        # eager: the kernels each call launches, with their grid and block, from the profiler
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(ITERS):
                op()
            torch.cuda.synchronize(dev)
        prof.export_chrome_trace(f"{out_dir}/eager_{name}.{r}.json")
        kern = collections.Counter(
            (e.name, str(getattr(e, "kernel_grid", "")), str(getattr(e, "kernel_block", "")))
            for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        report[f"eager {name}: kernels in {ITERS} calls"] = {" ".join(k): v for k, v in kern.items()}
        dist.barrier()
        g = torch.cuda.CUDAGraph()
        g.enable_debug_mode()
        side = torch.cuda.Stream(dev)
        with torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):
            for _ in range(ITERS):
                op()
        g.replay()
        torch.cuda.synchronize(dev)
        report[f"graph {name}: dump"] = _dot(g, f"{out_dir}/torch_{name}.{r}.dot")
        del g
        torch.cuda.synchronize(dev)
        dist.barrier()
    return report


def main(argv: list[str]) -> None:
    if argv[:1] == ["--count"]:
        for path in argv[1:]:
            print(path, count(path))
        return
    import os
    import dtlab
    out_dir = os.path.abspath(argv[0])
    os.makedirs(out_dir, exist_ok=True)
    try:
        res = dtlab.run(rank_fn, out_dir, nprocs=2, timeout=150)
        for rank, rr in enumerate(res):
            for k, v in rr.value.items():
                print(f"rank {rank}: {k}: {v}")
    except Exception as e:  # noqa: BLE001 -- what was written before is still counted below
        print(f"{type(e).__name__}: {str(e)[:2000]}")
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".dot"):
            print(name, count(os.path.join(out_dir, name)))


if __name__ == "__main__":
    main(sys.argv[1:])
