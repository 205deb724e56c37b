"""Record real NCCL_DEBUG logs on this machine into a data/ capture folder, with provenance.

Each variant runs the same small workload (all_reduce at three sizes, all_gather,
reduce_scatter, broadcast, a send/recv pair) on every GPU through ``dtlab.run``, with
``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,GRAPH,TUNING,ENV`` and one log file per process
(``NCCL_DEBUG_FILE=<variant>/%h.%p.log``):

    default          NCCL's own choices
    p2p_disabled     NCCL_P2P_DISABLE=1           (GPU-to-GPU copies must go through SHM)
    net_socket       NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1   (only the network transport is left)
    tree_ll          NCCL_ALGO=Tree NCCL_PROTO=LL
    count_mismatch   rank 1 all_reduces a tensor one element longer at the 3rd collective

    PYTHONPATH=. python scripts/record_nccl_logs.py data/h100x2-nccl-logs
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys

import torch

import dtlab

VARIANTS = {
    "default": {},
    "p2p_disabled": {"NCCL_P2P_DISABLE": "1"},
    "net_socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    "tree_ll": {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"},
    "count_mismatch": {},
}


def workload(mismatch: bool = False):
    import torch.distributed as dist

    r, n, dev = dist.get_rank(), dist.get_world_size(), dtlab.device()
    for numel in (256, 1 << 16, 1 << 24):
        if mismatch and numel == 1 << 24 and r == 1:
            numel += 1  # the bug under study: one rank's tensor is one element longer
        t = torch.ones(numel, device=dev)
        dist.all_reduce(t)
    out = torch.empty(n * 4096, device=dev)
    dist.all_gather_into_tensor(out, torch.full((4096,), float(r), device=dev))
    rs = torch.empty(4096, device=dev)
    dist.reduce_scatter_tensor(rs, torch.ones(n * 4096, device=dev))
    b = torch.arange(1 << 20, device=dev, dtype=torch.float32)
    dist.broadcast(b, src=0)
    if n >= 2 and r < 2:
        p = torch.ones(1 << 16, device=dev)
        if r == 0:
            dist.send(p, dst=1)
        else:
            dist.recv(p, src=0)
    torch.cuda.synchronize()
    return float(t[0].item())


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({' '.join(cmd)} failed: {e})\n"


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "nvidia-smi.txt"), "w") as f:
        f.write(sh(["nvidia-smi"]))
    with open(os.path.join(out, "nvidia-smi-topo.txt"), "w") as f:
        f.write(sh(["nvidia-smi", "topo", "-m"]))
    with open(os.path.join(out, "nvidia-smi-nvlink.txt"), "w") as f:
        f.write(sh(["nvidia-smi", "nvlink", "-s"]))
    results = {}
    for name, extra in VARIANTS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL,GRAPH,TUNING,ENV",
               "NCCL_DEBUG_FILE": os.path.abspath(os.path.join(d, "%h.%p.log")), **extra}
        try:
            res = dtlab.run(workload, name == "count_mismatch", env=env, timeout=60)
            results[name] = f"ok: {res.values}"
        except (dtlab.HangError, dtlab.RankError) as e:
            results[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            with open(os.path.join(d, "dtlab-error.txt"), "w") as f:
                f.write(str(e) + "\n")
                for r, s in getattr(e, "stacks", {}).items():
                    f.write(f"\n===== rank {r} stack =====\n{s}")
        print(f"{name}: {results[name]}", flush=True)
    smi = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).strip()
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(f"""# Real NCCL_DEBUG=INFO logs, {torch.cuda.device_count()} GPUs

Recorded by `scripts/record_nccl_logs.py` (the workload and variants are in its docstring).
Not edited.

- date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}
- machine: {platform.node()}, {os.cpu_count()} CPU cores, kernel {platform.release()}
- GPUs (nvidia-smi name, driver): {'; '.join(smi.splitlines())}
- interconnect: see `nvidia-smi-topo.txt` and `nvidia-smi-nvlink.txt`
- torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, Python {platform.python_version()}
- NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', '(unset)')} (NVLink multicast kept off)
- command: `PYTHONPATH=. python scripts/record_nccl_logs.py {out}`
- each variant folder: one `HOST.PID.log` per rank process (NCCL_DEBUG_FILE=%h.%p),
  `NCCL_DEBUG_SUBSYS=INIT,COLL,GRAPH,TUNING,ENV`

| variant | extra environment | outcome |
|---|---|---|
""")
        for name, extra in VARIANTS.items():
            envs = " ".join(f"{k}={v}" for k, v in extra.items()) or "-"
            if name == "count_mismatch":
                envs += " (rank 1's 3rd all_reduce has one extra element)"
            f.write(f"| {name} | {envs} | {results[name]} |\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/nccl-logs")
