"""What torch launches for one sendrecv as dtlab.bench.timing posts it (batch_isend_irecv,
waiting on each work), beside one all_reduce: 20 eager calls under torch.profiler on 2 GPUs,
the kernels counted by name, grid, block and dynamic shared memory, and the CUDA runtime calls
counted (each rank's chrome trace kept). NCCL's own graph of the same sendrecv comes from
scripts/nccl_sendrecv_procs.cu (SR_DOT=FILE); --count reads such a DOT file.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 scripts/gpu_sendrecv_kernels.py OUT_DIR
    python3 scripts/gpu_sendrecv_kernels.py --count FILE.dot...

Truth issue 3b: graph-mode sendrecv is ~0.8 us a call slower in dtlab than NCCL alone in two
processes; all_reduce is not. Recorded: data/h200x2-sendrecv-procs/.
"""
import collections
import re
import sys

ITERS = 20


def count(path: str) -> dict:
    """Node kinds, kernel launches (name<<<grid, block, shared memory>>>) and dependency edges in
    a DOT file from cudaGraphDebugDotPrint."""
    text = open(path).read()
    kinds = collections.Counter(re.findall(r'label="\{([A-Z_]+)\n', text))
    kernels = collections.Counter(re.findall(r'\| (\w+\\<\\<\\<[\d,]+\\>\\>\\>)', text))
    return {"nodes": dict(kinds), "kernels": dict(kernels), "edges": text.count(" -> ")}


def trace_counts(path: str) -> dict:
    """Kernels (name, grid, block, dynamic shared memory) and CUDA runtime/driver calls in a
    chrome trace from torch.profiler."""
    import json
    events = json.load(open(path))["traceEvents"]
    kernels = collections.Counter(
        f"{e['name']} grid {e['args'].get('grid')} block {e['args'].get('block')} "
        f"shared {e['args'].get('shared memory')}" for e in events if e.get("cat") == "kernel")
    calls = collections.Counter(e["name"] for e in events
                                if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    return {"kernels": dict(kernels), "runtime calls": dict(calls)}


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
        path = f"{out_dir}/eager_{name}.{r}.json"
        prof.export_chrome_trace(path)
        report[f"eager {name}, {ITERS} calls"] = trace_counts(path)
        dist.barrier()
    return report


def main(argv: list[str]) -> None:
    if argv[:1] == ["--count"]:
        for path in argv[1:]:
            print(path, count(path) if path.endswith(".dot") else trace_counts(path))
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
