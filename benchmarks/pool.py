"""Round trip of one trivial cell: ``dtlab.Pool`` vs relaunching with ``dtlab.run``.

The cell all-reduces one element on 2 ranks. The pool pays the launch once; ``dtlab.run`` pays it
every cell. Both are timed in this one process, interleaved (a block of pool cells, then one
relaunch), so machine noise hits both alike.

    python benchmarks/pool.py                      # 2 ranks, auto backend
    python benchmarks/pool.py --cells 200 --relaunches 5 --json out.json

Goal (issue 3): <= 20 ms per cell on 2-core CPU gloo, and >= 200x faster than relaunching.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import trivial_all_reduce  # noqa: E402  (benchmarks/common.py, beside this script)

CELL = "t = torch.ones(1, device=device); dist.all_reduce(t); t.item()"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--cells", type=int, default=200, help="pool cells per block")
    ap.add_argument("--relaunches", type=int, default=5, help="blocks, each with one dtlab.run")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ.setdefault("DTLAB_OUTPUT", "none")
    import torch

    import dtlab

    pool_times, run_times, fn_times = [], [], []
    with dtlab.Pool(nprocs=a.nprocs, backend=a.backend) as pool:
        for _ in range(20):  # warm-up: first collectives set up connections
            pool.exec(CELL)
        for block in range(a.relaunches):
            for _ in range(a.cells):
                t0 = time.perf_counter()
                res = pool.exec(CELL)
                pool_times.append(time.perf_counter() - t0)
                fn_times.append(max(r.duration_s for r in res))
            assert res.values == [float(a.nprocs)] * a.nprocs
            t0 = time.perf_counter()
            assert dtlab.run(trivial_all_reduce, nprocs=a.nprocs, backend=pool.backend).values \
                == [float(a.nprocs)] * a.nprocs
            run_times.append(time.perf_counter() - t0)
            print(f"block {block + 1}/{a.relaunches}: pool median "
                  f"{statistics.median(pool_times[-a.cells:]) * 1e3:.2f} ms, "
                  f"dtlab.run {run_times[-1]:.2f} s", file=sys.stderr)
        backend = pool.backend
    pm, rm = statistics.median(pool_times), statistics.median(run_times)
    p95 = sorted(pool_times)[int(0.95 * len(pool_times))]
    print(f"\n{a.nprocs} ranks, {backend}, torch {torch.__version__}: "
          f"{len(pool_times)} pool cells, {len(run_times)} relaunches")
    print(f"  pool cell round trip  median {pm * 1e3:.2f} ms  p95 {p95 * 1e3:.2f} ms  "
          f"(inside the ranks: {statistics.median(fn_times) * 1e3:.3f} ms)")
    print(f"  dtlab.run relaunch    median {rm:.2f} s")
    print(f"  speed-up              {rm / pm:.0f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nprocs": a.nprocs, "backend": backend, "torch": torch.__version__,
                       "pool_ms_median": pm * 1e3, "pool_ms_p95": p95 * 1e3,
                       "in_rank_ms_median": statistics.median(fn_times) * 1e3,
                       "run_s_median": rm, "speedup": rm / pm, "run_times": run_times}, f, indent=2)


if __name__ == "__main__":
    main()
