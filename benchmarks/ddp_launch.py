"""What building DDP adds to a warm ``dtlab.run`` launch: a launch whose ranks construct
``DistributedDataParallel`` on a tiny module against one whose ranks return at once, interleaved.

DDP's constructor imports ``torch._dynamo`` (~800 modules); the rank zygote imports it once
(``dtlab/runtime/procs.py``, WARM_PRELOAD), so a forked rank finds it imported.

    python benchmarks/ddp_launch.py --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plain() -> int:
    return 1


def with_ddp() -> int:
    import torch

    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    return 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    os.environ.setdefault("DTLAB_OUTPUT", "none")
    import torch  # noqa: F401  (warm: as from a notebook kernel)

    import dtlab

    dtlab.run(plain, nprocs=a.nprocs)  # the zygote starts here, untimed
    times = {"plain": [], "ddp": []}
    for _ in range(a.rounds):
        for name, fn in (("plain", plain), ("ddp", with_ddp)):
            t0 = time.perf_counter()
            dtlab.run(fn, nprocs=a.nprocs, backend="gloo")
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{a.nprocs} ranks, gloo, {a.rounds} rounds, median: plain {med['plain']:.2f} s, "
          f"with DDP {med['ddp']:.2f} s, DDP adds {med['ddp'] - med['plain']:.2f} s "
          f"(ratio {med['ddp'] / med['plain']:.2f})")


if __name__ == "__main__":
    main()
