"""Why does a CUDA-graph-replayed torch all_reduce take ~2x nccl-tests -G with the same kernel?
Variants side by side in one job, 8 B all_reduce on 2 ranks (2 GPUs), per call:

    PYTHONPATH=. NCCL_NVLS_ENABLE=0 python3 benchmarks/graph_variants.py

Each variant is a fresh 2-rank launch (NCCL reads its variables when a rank starts): eager
(host-timed loop of 200 calls) and graph replays, with `iters` calls captured per graph and
`launches` replays timed (dtlab bench --graph: 20 x 1). Flight Recorder is off in every variant.
Printed as one table; scripts/gpu_sections.sh runs nccl-tests beside it.
"""
import sys

import dtlab

VARIANTS = [
    ("default, 20 calls x 1 replay (dtlab bench --graph)", {}, 20, 1),
    ("default, 100 calls x 10 replays", {}, 100, 10),
    ("NCCL_GRAPH_MIXING_SUPPORT=0", {"NCCL_GRAPH_MIXING_SUPPORT": "0"}, 100, 10),
    ("NCCL_PROTO=LL NCCL_ALGO=Ring", {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}, 100, 10),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING=0", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, 100, 10),
]


def probe(iters, launches, eager_calls=200):
    import time

    import torch
    import torch.distributed as dist

    dev = dtlab.device()
    x = torch.zeros(2, device=dev)
    for _ in range(20):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(eager_calls):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t0) / eager_calls * 1e6
    g, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    try:
        with torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):
            for _ in range(iters):
                dist.all_reduce(x)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        dist.all_reduce(torch.zeros(1, device=dev))
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(launches):
            g.replay()
        b.record()
        b.synchronize()
        graph = a.elapsed_time(b) * 1e3 / (iters * launches)
    finally:
        del g
        torch.cuda.synchronize()
    return round(eager, 2), round(graph, 2)


if __name__ == "__main__":
    print(f"{'variant':<52} {'eager us/call (r0, r1)':>24} {'graph us/call (r0, r1)':>24}")
    for name, env, iters, launches in VARIANTS:
        env = {"TORCH_FR_BUFFER_SIZE": "0", **env}
        try:
            res = dtlab.run(probe, iters, launches, nprocs=2, timeout=120, env=env).values
            print(f"{name:<52} {str([r[0] for r in res]):>24} {str([r[1] for r in res]):>24}",
                  flush=True)
        except Exception as e:  # one variant failing says so and the rest still run
            print(f"{name:<52} failed: {str(e).splitlines()[0]}", file=sys.stdout, flush=True)
