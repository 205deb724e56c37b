"""The hand-written DDP section's GPU evidence, recorded into the folder given first:

    run.txt              date, host, GPUs, versions, each part's exit status and time
    classic-<bug>.txt    dtlab/byhand/classic.py --bug <bug> under torchrun on 2 GPUs: its console
    dp-vs-ddp.json       dtlab.byhand.dp.compare(): one GPU, DataParallel, DDP

    PYTHONPATH=. python3 scripts/gpu_byhand.py data/h100x2-byhand

A failing part is recorded, not fatal. NVLink multicast stays off.
"""

import json
import os
import subprocess
import sys
import time
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

from dtlab.byhand import dp  # noqa: E402
from dtlab.byhand.classic import BUGS  # noqa: E402
from recorded_cases import machine_lines  # noqa: E402  (beside this script)

CLASSIC = os.path.join(os.path.dirname(os.path.abspath(dp.__file__)), "classic.py")


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    log = machine_lines("gpu_byhand.py", out)
    for bug in BUGS:
        t0 = time.perf_counter()
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", CLASSIC, "--bug", bug]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            code, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            code, text = "timeout", f"{e.stdout or ''}{e.stderr or ''}"
        with open(os.path.join(out, f"classic-{bug}.txt"), "w") as f:
            f.write(f"$ torchrun --standalone --nproc-per-node 2 dtlab/byhand/classic.py --bug {bug}\n")
            f.write(text if isinstance(text, str) else text.decode(errors="replace"))
        log.append(f"classic --bug {bug}: exit {code}, {time.perf_counter() - t0:.1f} s")
        print(log[-1], flush=True)
    t0 = time.perf_counter()
    try:
        rows = dp.compare()
    except Exception:
        rows = {"error": traceback.format_exc()}
    with open(os.path.join(out, "dp-vs-ddp.json"), "w") as f:
        json.dump(rows, f, indent=1)
    log.append(f"dp.compare: {time.perf_counter() - t0:.1f} s: {rows}")
    print(log[-1], flush=True)
    with open(os.path.join(out, "run.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
