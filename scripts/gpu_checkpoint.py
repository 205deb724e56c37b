"""dtlab.parity.checkpoint on a 2-GPU machine (NCCL), recorded into the folder given first:

    run.txt          date, host, GPUs, torch/CUDA/NCCL versions, the command, each case's time
    nccl-2to2.json   every mode, saved and resumed on 2 GPUs (NCCL): is "full" bitwise there too?
    nccl-2to1.json   resharded 2 -> 1 GPU (augment off), "full" and "no_optimizer"
    nccl-1to2.json   resharded 1 -> 2 GPUs
    gloo-2to3.json   2 -> 3 ranks on CPU/gloo (3 ranks > 2 GPUs), this machine's torch

Usage, from the repository root (NVLink multicast stays off):

    PYTHONPATH=. python3 scripts/gpu_checkpoint.py data/h200x2-checkpoint

A case that fails is recorded as {"error": ...} and the rest still run; ~2 minutes in all.
Checkpoints go to a temporary folder each and are removed.
"""

import datetime
import json
import os
import socket
import sys
import time
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402

from dtlab.parity.checkpoint import resume  # noqa: E402

CASES = {
    "nccl-2to2": dict(save_ranks=2, load_ranks=2, backend="nccl"),
    "nccl-2to1": dict(modes=("full", "no_optimizer"), save_ranks=2, load_ranks=1,
                      backend="nccl"),
    "nccl-1to2": dict(modes=("full", "no_optimizer"), save_ranks=1, load_ranks=2,
                      backend="nccl"),
    "gloo-2to3": dict(modes=("full", "no_optimizer"), save_ranks=2, load_ranks=3,
                      backend="gloo"),
}


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    cuda = torch.cuda.is_available()
    log = [f"date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
           f"host: {socket.gethostname()}, {os.cpu_count()} CPUs",
           f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
           f"{'.'.join(map(str, torch.cuda.nccl.version())) if cuda else '-'}, "
           f"GPUs {torch.cuda.device_count()}: "
           + ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())),
           "env: " + " ".join(f"{k}={os.environ.get(k)}" for k in (
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")),
           "command: PYTHONPATH=. python3 scripts/gpu_checkpoint.py " + out]
    failed = 0
    for name, kw in CASES.items():
        t0 = time.perf_counter()
        try:
            result = resume(timeout=150, **kw)
            verdicts = ", ".join(f"{r['mode']} {r['verdict']} ({r['max_abs_diff']:.3g})"
                                 + ("" if r["ok"] else " NOT AS EXPECTED") for r in result)
        except Exception as e:   # recorded, not fatal: the other cases still run
            result, verdicts, failed = {"error": traceback.format_exc()}, f"error: {e!r}", 1
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump({"case": kw, "result": result}, f, indent=1, default=str)
        log.append(f"{name}: {time.perf_counter() - t0:.1f} s: {verdicts}")
        print(log[-1], flush=True)
    with open(os.path.join(out, "run.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    return failed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/gpu_checkpoint.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
