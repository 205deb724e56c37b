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

import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

from dtlab.parity.checkpoint import resume  # noqa: E402
from recorded_cases import record_cases  # noqa: E402  (beside this script)

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
    return record_cases(out, "gpu_checkpoint.py", CASES, resume, lambda r: (
        f"{r['mode']} {r['verdict']} ({r['max_abs_diff']:.3g})" + ("" if r["ok"] else " NOT AS EXPECTED")))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/gpu_checkpoint.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
