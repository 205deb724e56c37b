#!/usr/bin/env bash
# Section 02 (bandwidth) evidence from one 2-GPU machine, nccl-tests and dtlab side by side in
# the same job. Bounded: every step under `timeout`, the whole script < 8 minutes.
#
#   PYTHONPATH=. bash scripts/gpu_bandwidth.sh OUT_DIR NCCL_TESTS_SRC
#
# OUT_DIR: where results go (created). NCCL_TESTS_SRC: a checkout of github.com/NVIDIA/nccl-tests,
# built there with `make MPI=0 NCCL_HOME=<the nvidia-nccl wheel's folder>` (nothing downloaded).
# Records: env.txt (GPUs, driver, topo, nvlink -s, versions); nccl-tests all_reduce_perf and
# sendrecv_perf -b 8 -e 64K eager and -G 100, all_reduce_perf -b 8 -e 1G; dtlab bench eager and
# --graph for all_reduce,sendrecv 8 B-64 KiB; a dtlab 8 B-1 GiB all_reduce sweep (the fit);
# overhead.txt (where torch's per-call time goes); p2p.csv; bucketing.csv; pitfalls.csv;
# fit.txt; steps.log (each step's command, exit status, seconds). NCCL_NVLS_ENABLE=0 throughout.
set -u -o pipefail
OUT=${1:?usage: bash scripts/gpu_bandwidth.sh OUT_DIR NCCL_TESTS_SRC}
SRC=${2:?usage: bash scripts/gpu_bandwidth.sh OUT_DIR NCCL_TESTS_SRC}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONPATH=${PYTHONPATH:-.} DTLAB_OUTPUT=lines
export NGPU=${NGPU:-2}  # GPUs (ranks) for every step: nccl-tests -g NGPU, dtlab NGPU ranks
PY=${PYTHON:-python3}
START=$(date +%s)

step() {  # step NAME SECONDS CMD...: run bounded, log status and time, never abort the script
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc in $(( $(date +%s) - t0 )) s (limit $limit s; total $(( $(date +%s) - START )) s)" \
    | tee -a "$OUT/steps.log"
}

{ date -u +"date: %Y-%m-%d %H:%M UTC"; hostname; nproc; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi topo -m; nvidia-smi nvlink -s
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"; } > "$OUT/env.txt" 2>&1

# --- nccl-tests, built against the NCCL that torch uses ------------------------------------
NCCL_HOME=$($PY -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null \
  || $PY -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
[ -e "$NCCL_HOME/lib/libnccl.so" ] || ln -s libnccl.so.2 "$NCCL_HOME/lib/libnccl.so"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
[ -x "$SRC/build/sendrecv_perf" ] || step build 240 make -C "$SRC" -j 16 MPI=0 NCCL_HOME="$NCCL_HOME" CUDA_HOME="$CUDA_HOME" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"
NT="$SRC/build"
for op in all_reduce sendrecv; do
  step "nt_${op}_small_eager" 60 "$NT/${op}_perf" -b 8 -e 64K -f 2 -g "$NGPU"
  step "nt_${op}_small_graph" 60 "$NT/${op}_perf" -b 8 -e 64K -f 2 -g "$NGPU" -G 100
done
step nt_all_reduce_1G 120 "$NT/all_reduce_perf" -b 8 -e 1G -f 2 -g "$NGPU"

# --- dtlab, the same sizes, eager and CUDA graph ----------------------------------------------
step dtlab_small_eager 90 $PY -m dtlab bench --nprocs "$NGPU" --op all_reduce,sendrecv -b 8 -e 64K \
  --csv "$OUT/dtlab_small_eager.csv"
step dtlab_small_graph 90 $PY -m dtlab bench --nprocs "$NGPU" --op all_reduce,sendrecv -b 8 -e 64K --graph \
  --csv "$OUT/dtlab_small_graph.csv"
step dtlab_all_reduce_1G 120 $PY -m dtlab bench --nprocs "$NGPU" --op all_reduce -b 8 -e 1G \
  --csv "$OUT/dtlab_all_reduce_1G.csv"
step p2p 60 $PY -m dtlab bench --p2p -e 256M --csv "$OUT/p2p.csv"

# --- torch's per-call cost, bucketing, pitfalls, the fit -------------------------------------
step overhead 90 $PY - <<'EOF'
"""Where an eager torch all_reduce's host time goes (8 B, NCCL, 2 ranks): the pieces timed one
by one, and torch.profiler's table over 50 calls."""
import os, time, torch, torch.distributed as dist, dtlab

def pieces(n=200):
    dev = dtlab.device(); x = torch.zeros(2, device=dev)
    for _ in range(20): dist.all_reduce(x)
    torch.cuda.synchronize(); dist.barrier()
    def per(fn):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(n): fn()
        t = (time.perf_counter() - t0) / n * 1e6; torch.cuda.synchronize(); return round(t, 2)
    ev = torch.cuda.Event()
    out = {"event record (us)": per(lambda: ev.record()),
           "all_reduce async_op=True, returns Work (us)": per(lambda: dist.all_reduce(x, async_op=True)),
           "all_reduce + work.wait() (us)": per(lambda: dist.all_reduce(x, async_op=True).wait()),
           "all_reduce blocking call (us)": per(lambda: dist.all_reduce(x))}
    torch.cuda.synchronize()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(50): dist.all_reduce(x)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return out, table if dist.get_rank() == 0 else None

res = dtlab.run(pieces, nprocs=int(os.environ["NGPU"]), timeout=80)
for r, (out, table) in enumerate(res.values):
    print(f"rank {r}:", out)
print(res.values[0][1])
EOF
step bucketing 120 $PY -c '
import os, dtlab.bench as b
df = b.bucketing("1G", ["1G", "4M", "256K"], nprocs=int(os.environ["NGPU"]), iters=3, timeout=110)
df.to_csv("'"$OUT"'/bucketing.csv", index=False); print(df.to_string())'
step pitfalls 90 $PY -c '
import os, pandas as pd, dtlab.bench as b
df = pd.concat([b.timing_pitfalls("all_reduce", s, nprocs=int(os.environ["NGPU"]), timeout=40).assign(size=s) for s in ("8", "64M")])
df.to_csv("'"$OUT"'/pitfalls.csv", index=False); print(df.to_string())'
step fit 30 $PY -c '
import dtlab.bench as b
for f in ("'"$OUT"'/nt_all_reduce_1G.txt", "'"$OUT"'/dtlab_all_reduce_1G.csv"):
    try:
        fit = b.fit(b.to_frame(f), max_bytes="256M"); print(f, fit)
        print("  1 GiB predicted", round(fit.predict(1 << 30), 1), "us; busbw on 4/8 ranks",
              round(fit.predict_busbw(4, 1 << 30), 1), round(fit.predict_busbw(8, 1 << 30), 1))
    except Exception as e: print(f, "no fit:", e)'
echo "total $(( $(date +%s) - START )) s" | tee -a "$OUT/steps.log"
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")" && echo "wrote $OUT.tar.gz"
