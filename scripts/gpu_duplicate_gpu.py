"""Two ranks on one GPU, on purpose: what NCCL and torch say when a launch puts them there (a GPU
hidden from one rank, CUDA_VISIBLE_DEVICES differing between ranks). Every rank takes cuda:0;
NCCL refuses at the communicator's creation ("Duplicate GPU detected", src/init.cc) and torch
raises it. scripts/gpu_check_full.sh runs it under torchrun and records the text that
:func:`dtlab.check.failures.name_failure` must name::

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 scripts/gpu_duplicate_gpu.py
"""

import torch
import torch.distributed as dist

torch.cuda.set_device(0)
dist.init_process_group("nccl")
try:
    t = torch.ones(1, device="cuda:0")
    dist.all_reduce(t)  # NCCL creates its communicator here, and checks the ranks' bus ids
    torch.cuda.synchronize()
    print(f"rank {dist.get_rank()}: all_reduce returned {t.item()}: NCCL did not refuse", flush=True)
finally:
    dist.destroy_process_group()
