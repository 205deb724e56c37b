"""dtlab.parity.mixed_precision on a 2-GPU machine (NCCL), recorded into the folder given first:

    run.txt          date, host, GPUs, torch/CUDA/NCCL versions, matmul flags, each case's time
    nccl-2.json      every mode on 2 GPUs (NCCL), 8 steps: within the derived tolerances there?
    nccl-2-20.json   the same, 20 steps: how drift and the scale evolve further
    gloo-2.json      every mode on 2 CPU ranks (gloo), this machine's torch: the CPU baseline

Usage, from the repository root (NVLink multicast stays off):

    PYTHONPATH=. python3 scripts/gpu_precision.py data/h100x2-precision

A case that fails is recorded as {"error": ...} and the rest still run; ~1-2 minutes in all.
"""

import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402

from dtlab.parity import mixed_precision  # noqa: E402
from dtlab.parity.precision import line  # noqa: E402
from recorded_cases import record_cases  # noqa: E402  (beside this script)

CASES = {
    "nccl-2": dict(nprocs=2, backend="nccl"),
    "nccl-2-20": dict(nprocs=2, backend="nccl", steps=20),
    "gloo-2": dict(nprocs=2, backend="gloo"),
}


def main(out: str) -> int:
    m = torch.backends.cuda.matmul
    return record_cases(out, "gpu_precision.py", CASES, mixed_precision, line, extra=(
        f"matmul: allow_tf32={m.allow_tf32}, allow_bf16_reduced_precision_reduction="
        f"{m.allow_bf16_reduced_precision_reduction}, allow_fp16_reduced_precision_reduction="
        f"{m.allow_fp16_reduced_precision_reduction}",))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/gpu_precision.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
