"""One trivial cell on 2 ranks: a ``dtlab.Pool`` cell vs ipyparallel's ``view.execute``.

Both run the same source on 2 engines/ranks that share a gloo process group (the ipyparallel
engines join one here, as a user would): ``t = torch.ones(1); dist.all_reduce(t); t.item()``.
Timed in one process, interleaved block by block, so machine noise hits both alike.

    pip install ipyparallel        # not a dtlab dependency
    python benchmarks/ipyparallel_cell.py --cells 200 --blocks 5
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time

CELL = "t = torch.ones(1); dist.all_reduce(t); t.item()"
JOIN = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}", GLOO_SOCKET_IFNAME="lo")
dist.init_process_group("gloo", rank={rank}, world_size={n})
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200, help="cells per block per contender")
    ap.add_argument("--blocks", type=int, default=5)
    a = ap.parse_args()
    import ipyparallel as ipp

    import dtlab

    n = 2
    cluster = ipp.Cluster(n=n, log_level=40)
    rc = cluster.start_and_connect_sync()
    try:
        rc.wait_for_engines(n, timeout=120)
        port = _free_port()
        joins = [rc[i].execute(JOIN.format(port=port, rank=i, n=n), block=False) for i in range(n)]
        for j in joins:
            j.get(timeout=120)
        view = rc[:]
        times = {"dtlab.Pool.exec": [], "ipyparallel view.execute": []}
        with dtlab.Pool(nprocs=n, backend="gloo") as pool:
            run = {"dtlab.Pool.exec": lambda: pool.exec(CELL),
                   "ipyparallel view.execute": lambda: view.execute(CELL, block=True)}
            for go in run.values():  # warm-up
                for _ in range(20):
                    go()
            for b in range(a.blocks):
                for name, go in run.items():
                    for _ in range(a.cells):
                        t0 = time.perf_counter()
                        go()
                        times[name].append(time.perf_counter() - t0)
                print(f"block {b + 1}/{a.blocks}: " + ", ".join(
                    f"{k} {statistics.median(v[-a.cells:]) * 1e3:.2f} ms" for k, v in times.items()),
                    file=sys.stderr)
    finally:
        cluster.stop_cluster_sync()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"\n{n} ranks, gloo, {a.blocks} x {a.cells} cells each, interleaved (median ms):")
    for k, v in med.items():
        print(f"  {k:<26} {v:6.2f} ms")
    print(f"  ratio ipyparallel / dtlab  {med['ipyparallel view.execute'] / med['dtlab.Pool.exec']:.1f}x")


if __name__ == "__main__":
    main()
