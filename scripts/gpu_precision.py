"""dtlab.parity.mixed_precision on a 2-GPU machine (NCCL), recorded into the folder given first:

    run.txt          date, host, GPUs, torch/CUDA/NCCL versions, matmul flags, each case's time
    nccl-2.json      every mode on 2 GPUs (NCCL), 8 steps: within the derived tolerances there?
    nccl-2-20.json   the same, 20 steps: how drift and the scale evolve further
    gloo-2.json      every mode on 2 CPU ranks (gloo), this machine's torch: the CPU baseline

Usage, from the repository root (NVLink multicast stays off):

    PYTHONPATH=. python3 scripts/gpu_precision.py data/h200x2-precision

A case that fails is recorded as {"error": ...} and the rest still run; ~1-2 minutes in all.
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

from dtlab.parity import mixed_precision  # noqa: E402

CASES = {
    "nccl-2": dict(nprocs=2, backend="nccl"),
    "nccl-2-20": dict(nprocs=2, backend="nccl", steps=20),
    "gloo-2": dict(nprocs=2, backend="gloo"),
}


def _summary(r: dict) -> str:
    out = (f"{r['mode']} {r['verdict']} (max |dp| {r['max_abs_diff'][-1]:.3g}, |dp|_2 "
           f"{r['param_l2_diff'][-1]:.3g} <= {r['tolerance'][-1]:.3g})")
    if r.get("gradient_error_u") is not None:
        out += f" grad err {r['gradient_error_u']:.2f} u"
    if r["reduce_error"]:
        out += f" reduce err {max(r['reduce_error']):.2g}"
    if r["skipped"] is not None:
        out += f" skipped {r['skipped']}"
    return out + ("" if r["ok"] else " NOT AS EXPECTED")


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    cuda = torch.cuda.is_available()
    m = torch.backends.cuda.matmul
    log = [f"date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
           f"host: {socket.gethostname()}, {os.cpu_count()} CPUs",
           f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
           f"{'.'.join(map(str, torch.cuda.nccl.version())) if cuda else '-'}, "
           f"GPUs {torch.cuda.device_count()}: "
           + ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())),
           f"matmul: allow_tf32={m.allow_tf32}, allow_bf16_reduced_precision_reduction="
           f"{m.allow_bf16_reduced_precision_reduction}, allow_fp16_reduced_precision_reduction="
           f"{m.allow_fp16_reduced_precision_reduction}",
           "env: " + " ".join(f"{k}={os.environ.get(k)}" for k in (
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")),
           "command: PYTHONPATH=. python3 scripts/gpu_precision.py " + out]
    failed = 0
    for name, kw in CASES.items():
        t0 = time.perf_counter()
        try:
            result = mixed_precision(timeout=150, **kw)
            verdicts = "; ".join(_summary(r) for r in result)
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
        sys.exit("usage: python3 scripts/gpu_precision.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
