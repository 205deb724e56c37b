#!/usr/bin/env bash
# Small messages in CUDA-graph mode, dtlab and nccl-tests under the same NCCL settings and the
# same number of graph replays, in one job (truth issue 3b, "like for like"): `dtlab bench
# --graph` runs its ranks with NCCL_GRAPH_MIXING_SUPPORT=0, so nccl-tests -G runs with it too;
# both replay the captured loop of 20 calls 100 times (nccl-tests -G 100, dtlab's default) and
# once (-G 1, graph=1), since one replay leaves the launch skew between ranks in the figure.
# Three rounds, interleaved, so drift shows. DIRECT=1 adds nccl-tests -G 100 with
# NCCL_P2P_DIRECT_DISABLE=1 (files *_nodirect*): nccl-tests drives both GPUs from one process,
# where NCCL reaches the peer's buffers through direct pointers; dtlab's ranks are two processes,
# which never can. And NCCL_DEBUG=INFO (INIT,P2P) of one 8 B call of each side, for the
# transports and communicators each used (transports_*.txt, in rounds.tgz). PROCS=1 adds NCCL
# alone, one rank per process (scripts/nccl_sendrecv_procs.cu, files *_procs_*): sendrecv as
# dtlab's ranks run it, without torch, so a gap splits into torch's part and the processes' part.
#
#   bash scripts/gpu_graph_like.sh OUT_DIR NCCL_TESTS_SRC
#
# OUT_DIR/env.txt, rounds.tgz (r<i>_nt_<op>_G<n>.txt, r<i>_dtlab_G<n>.csv), steps.log.
# NVLink multicast stays off.
set -u -o pipefail
OUT=${1:?usage: bash scripts/gpu_graph_like.sh OUT_DIR NCCL_TESTS_SRC}; SRC=${2:?NCCL_TESTS_SRC}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:-.} DTLAB_OUTPUT=lines NGPU=${NGPU:-2}
T0=$(date +%s); log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/steps.log"; }
{ date -u +"date: %Y-%m-%d %H:%M UTC"; nvidia-smi -L; nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  env | grep -E '^NCCL_|^TORCH_SYMM|^NVSHMEM' | sort; } > "$OUT/env.txt" 2>&1
NCCL_HOME=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
[ -e "$NCCL_HOME/lib/libnccl.so" ] || ln -s libnccl.so.2 "$NCCL_HOME/lib/libnccl.so"
export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
rm -rf /tmp/nt && cp -r "$SRC" /tmp/nt
timeout 300 make -C /tmp/nt -j 16 MPI=0 NCCL_HOME="$NCCL_HOME" CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$OUT/build.txt" 2>&1
log "nccl-tests build: exit $?"
if [ -n "${PROCS:-}" ]; then
  nvcc -O2 -o /tmp/sr_procs scripts/nccl_sendrecv_procs.cu -I"$NCCL_HOME/include" -L"$NCCL_HOME/lib" \
    -lnccl -gencode=arch=compute_90,code=sm_90 >> "$OUT/build.txt" 2>&1; log "procs build: exit $?"
  NCCL_GRAPH_MIXING_SUPPORT=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P timeout 60 /tmp/sr_procs \
    "$NGPU" 8 8 1 > "$OUT/r0_transports_procs.txt" 2>&1; log "procs transports: exit $?"
fi
if [ -n "${DIRECT:-}" ]; then
  for v in "" NCCL_P2P_DIRECT_DISABLE=1; do
    env NCCL_GRAPH_MIXING_SUPPORT=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P $v timeout 60 \
      /tmp/nt/build/sendrecv_perf -b 8 -e 8 -g "$NGPU" -G 1 -n 1 -w 1 \
      > "$OUT/r0_transports_nt${v:+_nodirect}.txt" 2>&1; log "nccl-tests transports $v: exit $?"
  done
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P timeout 180 python3 -c "from dtlab import bench
bench.sweep(['sendrecv'], 8, 8, nprocs=$NGPU, graph=1, iters=1, warmup=1)" \
    > "$OUT/r0_transports_dtlab.txt" 2>&1; log "dtlab transports: exit $?"
fi
for r in 1 2 3; do
  for g in 100 1; do
    for op in all_reduce sendrecv; do
      NCCL_GRAPH_MIXING_SUPPORT=0 timeout 60 /tmp/nt/build/${op}_perf -b 8 -e 64K -f 2 -g "$NGPU" -G $g \
        > "$OUT/r${r}_nt_${op}_G$g.txt" 2>&1; log "r$r nccl-tests $op -G $g mixing off: exit $?"
      if [ -n "${DIRECT:-}" ] && [ "$g" = 100 ]; then
        NCCL_GRAPH_MIXING_SUPPORT=0 NCCL_P2P_DIRECT_DISABLE=1 timeout 60 /tmp/nt/build/${op}_perf \
          -b 8 -e 64K -f 2 -g "$NGPU" -G $g > "$OUT/r${r}_nt_${op}_G${g}_nodirect.txt" 2>&1
        log "r$r nccl-tests $op -G $g mixing off, P2P direct off: exit $?"
      fi
    done
    if [ -n "${PROCS:-}" ]; then
      NCCL_GRAPH_MIXING_SUPPORT=0 timeout 60 /tmp/sr_procs "$NGPU" 8 65536 $g \
        > "$OUT/r${r}_procs_sendrecv_G$g.txt" 2>&1; log "r$r NCCL alone, processes, -G $g: exit $?"
    fi
    timeout 180 python3 -c "import sys; from dtlab import bench
df = bench.sweep(['all_reduce', 'sendrecv'], 8, '64K', nprocs=$NGPU, graph=$g).frame
df.to_csv(sys.argv[1], index=False)" "$OUT/r${r}_dtlab_G$g.csv" > "$OUT/r${r}_dtlab_G$g.txt" 2>&1
    log "r$r dtlab bench graph=$g: exit $?"
  done
done
cd "$OUT" && tar -czf rounds.tgz r[0123]_* && rm -f r[0123]_*
log done
