"""The loop shared by the scripts that record a library function's cases on a GPU machine
(scripts/gpu_checkpoint.py, scripts/gpu_precision.py): each case's rows as JSON, a failure
recorded and not fatal, and run.txt with the date, host, versions, the multicast variables,
the command and each case's time and verdicts."""

import datetime
import json
import os
import socket
import time
import traceback

import torch


def machine_lines(script: str, out: str, extra: tuple[str, ...] = ()) -> list[str]:
    cuda = torch.cuda.is_available()
    return [f"date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
            f"host: {socket.gethostname()}, {os.cpu_count()} CPUs",
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
            f"{'.'.join(map(str, torch.cuda.nccl.version())) if cuda else '-'}, "
            f"GPUs {torch.cuda.device_count()}: "
            + ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())),
            *extra,
            "env: " + " ".join(f"{k}={os.environ.get(k)}" for k in (
                "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")),
            f"command: PYTHONPATH=. python3 scripts/{script} {out}"]


def record_cases(out: str, script: str, cases: dict, run, summary, extra: tuple[str, ...] = ()) -> int:
    """``run(**case)`` for each case of ``cases``, its rows into ``out/<name>.json``; ``summary``
    makes one row's words for run.txt. Returns 1 if a case failed, else 0."""
    os.makedirs(out, exist_ok=True)
    log, failed = machine_lines(script, out, extra), 0
    for name, kw in cases.items():
        t0 = time.perf_counter()
        try:
            result = run(timeout=150, **kw)
            verdicts = "; ".join(summary(r) for r in result)
        except Exception as e:   # recorded, not fatal: the other cases still run
            result, verdicts, failed = {"error": traceback.format_exc()}, f"error: {e!r}", 1
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump({"case": kw, "result": result}, f, indent=1, default=str)
        log.append(f"{name}: {time.perf_counter() - t0:.1f} s: {verdicts}")
        print(log[-1], flush=True)
    with open(os.path.join(out, "run.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    return failed
