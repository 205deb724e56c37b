#!/usr/bin/env bash
# Below Python: a rank stuck inside NCCL (scripts/gpu_stuck_rank.py, 2 GPUs), seen by py-spy
# (Python, and --native: the C/C++ frames under it), by cuda-gdb (host threads, and the kernel on
# the GPU) and by NCCL's RAS client (ncclras, built here from NCCL's own client source for the
# NCCL version torch carries: .device/ncclras/, Apache-2.0, NVIDIA/nccl v2.28.9-1 src/ras/client.cc).
#
#   bash scripts/gpu_native.sh OUT_DIR      (from the repository root; py-spy on PATH)
#
# OUT_DIR: run.txt (machine, times, exit codes), nvidia-smi.txt, ncclras.txt, ncclras-v.txt,
# ncclras.json, pyspy-rank<r>.txt, pyspy-native-rank<r>.txt, cuda-gdb-rank0.txt, torchrun.txt.
# Each step bounded; nothing is left running. NVLink multicast stays off.
set -u
OUT=${1:?usage: bash scripts/gpu_native.sh OUT_DIR}; mkdir -p "$OUT/pids"; OUT=$(cd "$OUT" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/run.txt"; }
log "date (UTC) $(date -u '+%Y-%m-%d %H:%M'); $(nvidia-smi -L | tr '\n' ' ')"
log "$(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))')"
CUDA_INC=$(dirname "$(command -v nvcc)")/../include
g++ -O2 -I"$CUDA_INC" -I.device/ncclras .device/ncclras/client.cc -o /tmp/ncclras > "$OUT/ncclras-build.txt" 2>&1
log "ncclras build: exit $?"
python3 -m torch.distributed.run --standalone --nproc-per-node 2 scripts/gpu_stuck_rank.py "$OUT/pids" > "$OUT/torchrun.txt" 2>&1 &
JOB=$!
for _ in $(seq 120); do [ -f "$OUT/pids/rank0" ] && [ -f "$OUT/pids/rank1" ] && break; sleep 0.5; done
sleep 5   # rank 0 is inside its second all_reduce by now
P0=$(cat "$OUT/pids/rank0"); P1=$(cat "$OUT/pids/rank1")
log "ranks: 0 = pid $P0, 1 = pid $P1"
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv > "$OUT/nvidia-smi.txt" 2>&1
timeout 30 /tmp/ncclras > "$OUT/ncclras.txt" 2>&1; log "ncclras: exit $?"
timeout 30 /tmp/ncclras -v > "$OUT/ncclras-v.txt" 2>&1; log "ncclras -v: exit $?"
timeout 30 /tmp/ncclras -f json > "$OUT/ncclras.json" 2>&1; log "ncclras -f json: exit $?"
for r in 0 1; do
  P=$(cat "$OUT/pids/rank$r")
  timeout 30 py-spy dump --pid "$P" > "$OUT/pyspy-rank$r.txt" 2>&1; log "py-spy rank $r: exit $?"
  timeout 60 py-spy dump --native --pid "$P" > "$OUT/pyspy-native-rank$r.txt" 2>&1; log "py-spy --native rank $r: exit $?"
done
timeout 150 cuda-gdb -q -batch -p "$P0" -ex "info threads" -ex "thread apply all bt 25" \
  -ex "info cuda kernels" -ex "info cuda devices" -ex "detach" > "$OUT/cuda-gdb-rank0.txt" 2>&1
log "cuda-gdb rank 0: exit $?"
kill -TERM "$JOB" 2>/dev/null; sleep 5; kill -KILL "$JOB" "$P0" "$P1" 2>/dev/null; wait "$JOB" 2>/dev/null
log "torchrun ended: $(pgrep -f gpu_stuck_rank.py | wc -l) processes left"
