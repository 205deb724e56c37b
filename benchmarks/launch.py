"""Launch overhead: ``dtlab.run`` vs ``torchrun --standalone`` doing the same trivial all_reduce.

Four contenders, interleaved round-robin so machine noise hits all of them alike:

* ``dtlab.run (warm)``  -- the call from a live interpreter that has already imported torch,
  as from a notebook cell (what a learner waits for); its ranks are forked from the rank zygote
  (``dtlab.runtime.procs``);
* ``dtlab.run (warm, no zygote)`` -- the same with ``DTLAB_RANK_ZYGOTE=0``: each rank a fresh
  interpreter that imports torch itself, as before the zygote;
* ``dtlab.run (cold)``  -- ``python -c "import dtlab; dtlab.run(...)"``: interpreter start included,
  the like-for-like comparison with a command;
* ``torchrun``          -- ``python -m torch.distributed.run --standalone --nproc_per_node=N s.py``.

Each does: N ranks start, join the default group, all_reduce one element, tear down.

    python benchmarks/launch.py                    # 2 ranks, auto backend, 7 rounds
    python benchmarks/launch.py --rounds 11 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # benchmarks/common.py: the work being timed

TORCHRUN_SCRIPT = """
import os, sys, torch, torch.distributed as dist
backend = sys.argv[1]
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    t = torch.ones(1, device="cuda")
else:
    dist.init_process_group("gloo")
    t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
"""

COLD = """
import sys
sys.path[:0] = [{root!r}, {root!r} + "/benchmarks"]
import dtlab
from common import trivial_all_reduce
assert dtlab.run(trivial_all_reduce, nprocs={n}, backend={backend!r}).values == [{n}.0] * {n}
"""



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the raw timings here")
    a = ap.parse_args()

    os.environ.setdefault("DTLAB_OUTPUT", "none")
    import torch  # noqa: F401  (warm: the caller has torch imported, like a notebook kernel)

    import dtlab
    from dtlab.runtime.plan import resolve

    backend = resolve(a.nprocs, a.backend).backend
    tmp = tempfile.mkdtemp(prefix="dtlab-bench-")
    script = os.path.join(tmp, "s.py")
    with open(script, "w") as f:
        f.write(TORCHRUN_SCRIPT)
    from common import trivial_all_reduce

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")]))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={a.nprocs}", script, backend]
    cold = [sys.executable, "-c", COLD.format(root=ROOT, n=a.nprocs, backend=backend)]

    def warm_call():
        assert dtlab.run(trivial_all_reduce, nprocs=a.nprocs, backend=backend).values == \
            [float(a.nprocs)] * a.nprocs

    def command(argv):
        def go():
            p = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp)
            if p.returncode:
                raise SystemExit(f"{argv[:4]} failed:\n{p.stdout}\n{p.stderr}")
        return go

    def no_zygote_call():
        os.environ["DTLAB_RANK_ZYGOTE"] = "0"
        try:
            warm_call()
        finally:
            del os.environ["DTLAB_RANK_ZYGOTE"]

    contenders = {"dtlab.run (warm)": warm_call, "dtlab.run (warm, no zygote)": no_zygote_call,
                  "dtlab.run (cold)": command(cold),
                  "torchrun --standalone": command(torchrun)}
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for name, go in contenders.items():  # one untimed round each: disk caches, bytecode
        go()
    for i in range(a.rounds):
        for name, go in contenders.items():
            t0 = time.perf_counter()
            go()
            times[name].append(time.perf_counter() - t0)
        print(f"round {i + 1}/{a.rounds}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
              file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["torchrun --standalone"]
    print(f"\n{a.nprocs} ranks, backend {backend}, torch {torch.__version__}, {a.rounds} rounds "
          f"(median wall seconds; ratio = / torchrun)")
    for k, v in med.items():
        print(f"  {k:<24} {v:6.2f} s   ratio {v / base:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nprocs": a.nprocs, "backend": backend, "torch": torch.__version__,
                       "rounds": a.rounds, "times": times, "median": med,
                       "ratio_vs_torchrun": {k: v / base for k, v in med.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
