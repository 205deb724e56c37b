"""This tree vs another commit, side by side in one run: a pool cell and a one-shot launch.

A change to the runtime must not make either slower; on a shared, noisy machine only a
comparison measured in the same run, interleaved round by round, can say so. The other commit
is checked out into a temporary git worktree; each round runs ``benchmarks/versus.py --probe`` once
per tree, in a fresh interpreter with that tree first on ``sys.path``.

    python benchmarks/versus.py --base HEAD~5 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELL = "t = torch.ones(1, device=device); dist.all_reduce(t); t.item()"


def probe(cells: int, launches: int, backend: str) -> None:
    """In the tree on sys.path: median pool cell (ms) and median warm dtlab.run (s)."""
    import torch  # warm, as in a notebook kernel

    import dtlab

    def reduce_one():
        import torch.distributed as dist

        t = torch.ones(1, device=dtlab.device())
        dist.all_reduce(t)
        return t.item()

    with dtlab.Pool(nprocs=2, backend=backend) as pool:
        for _ in range(20):
            pool.exec(CELL)
        cell, inside = [], []
        for _ in range(cells):
            t0 = time.perf_counter()
            res = pool.exec(CELL)
            cell.append(time.perf_counter() - t0)
            inside.append(max(r.duration_s for r in res))
    runs = []
    for _ in range(launches):
        t0 = time.perf_counter()
        dtlab.run(reduce_one, nprocs=2, backend=backend)
        runs.append(time.perf_counter() - t0)
    print(json.dumps({"tree": os.path.dirname(dtlab.__file__),
                      "cell_ms": statistics.median(cell) * 1e3,
                      "in_rank_ms": statistics.median(inside) * 1e3, "run_s": statistics.median(runs)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD~1", help="the commit to compare with")
    ap.add_argument("--base-tree", help="or: a folder holding the other tree (no git needed; "
                    "e.g. made with `git archive REF | tar -x -C DIR`)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--backend", default="gloo", help="gloo, or nccl on a machine with 2 GPUs")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        return probe(a.cells, a.launches, a.backend)
    tmp = tempfile.mkdtemp(prefix="dtlab-versus-")
    base = os.path.abspath(a.base_tree) if a.base_tree else os.path.join(tmp, "base")
    if not a.base_tree:
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", base, a.base],
                       check=True, capture_output=True)
    trees = {"this tree": ROOT, f"base {a.base_tree or a.base}": base}
    got = {k: [] for k in trees}
    try:
        for i in range(a.rounds):
            order = list(trees.items())
            for name, tree in (order if i % 2 == 0 else order[::-1]):  # no first-mover bias
                env = dict(os.environ, PYTHONPATH=tree, DTLAB_OUTPUT="none")
                p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "versus.py"),
                                    "--probe", "--cells", str(a.cells), "--launches",
                                    str(a.launches), "--backend", a.backend], env=env, cwd=tmp, capture_output=True,
                                   text=True)
                if p.returncode:
                    raise SystemExit(f"{name}: probe failed\n{p.stderr[-2000:]}")
                row = json.loads(p.stdout.strip().splitlines()[-1])
                assert row["tree"].startswith(tree), (row["tree"], tree)
                got[name].append(row)
            print(f"round {i + 1}/{a.rounds}: " + ", ".join(
                f"{k}: cell {v[-1]['cell_ms']:.2f} ms, run {v[-1]['run_s']:.2f} s"
                for k, v in got.items()), file=sys.stderr)
    finally:
        if not a.base_tree:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("cell_ms", "in_rank_ms", "run_s")}
           for k, v in got.items()}
    (new, old) = med.values()
    print(f"\n2 ranks, {a.backend}, {a.rounds} rounds x ({a.cells} cells + {a.launches} launches), medians:")
    for k, v in med.items():
        print(f"  {k:<22} pool cell {v['cell_ms']:6.2f} ms (in the ranks {v['in_rank_ms']:.3f} ms)"
              f"   dtlab.run {v['run_s']:5.2f} s")
    print(f"  ratio this / base      pool cell {new['cell_ms'] / old['cell_ms']:.2f}        "
          f"dtlab.run {new['run_s'] / old['run_s']:.2f}")


if __name__ == "__main__":
    main()
