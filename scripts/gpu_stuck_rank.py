"""A rank stuck inside NCCL, on purpose, for the native-stack recording (scripts/gpu_native.sh):
both ranks all-reduce once (the communicator is made), then rank 0 all-reduces again while rank
1 never does -- rank 0's kernel waits on the GPU for a peer that never sends, and its host thread
waits in ``torch.cuda.synchronize``; rank 1 sleeps in Python. Each rank writes its pid to
``PIDS/rank<r>``. Run under torchrun; the recording script kills it::

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 scripts/gpu_stuck_rank.py PIDS
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=600))
rank = dist.get_rank()
t = torch.ones(1 << 20, device=device)
dist.all_reduce(t)
torch.cuda.synchronize()
with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == 0:
    dist.all_reduce(t)          # rank 1 never joins this one
    torch.cuda.synchronize()    # the host waits here, the kernel on the GPU
else:
    time.sleep(3600)
