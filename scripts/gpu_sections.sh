#!/usr/bin/env bash
# One device call for sections 01-03 on a 2-GPU machine, from the repository root:
#
#   bash scripts/gpu_sections.sh OUT_DIR NCCL_TESTS_SRC
#
# nccl-tests builds (in /tmp, in the background) while the GPU tests of bench, collectives and
# topology run; then section 02's recording (scripts/gpu_bandwidth.sh), `dtlab validate` on NCCL
# (every collective), and section 03's (scripts/gpu_topology.sh). Each part leaves one file or
# one .tgz in OUT_DIR, written as soon as it is done, so a run cut short keeps what finished.
set -u -o pipefail
OUT=${1:?usage: bash scripts/gpu_sections.sh OUT_DIR NCCL_TESTS_SRC}; SRC=${2:?NCCL_TESTS_SRC}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/sections.log"; }

rm -rf /tmp/nt && cp -r "$SRC" /tmp/nt
NCCL_HOME=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')
[ -e "$NCCL_HOME/lib/libnccl.so" ] || ln -s libnccl.so.2 "$NCCL_HOME/lib/libnccl.so"
( timeout 300 make -C /tmp/nt -j 12 MPI=0 NCCL_HOME="$NCCL_HOME" CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nt_build.txt 2>&1
  echo "make exit $?" >> /tmp/nt_build.txt ) &
BUILD=$!
el "machine: $(nvidia-smi -L | tr '\n' ' ')"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/bench tests/collectives \
  tests/topology > "$OUT/pytest_gpu.txt" 2>&1
el "pytest -m gpu: exit $? ($(tail -1 "$OUT/pytest_gpu.txt"))"
timeout 120 python3 -m dtlab validate --backend nccl --nprocs 2 --timeout 90 > "$OUT/validate_nccl.txt" 2>&1
el "dtlab validate nccl 2 ranks: exit $?"
wait $BUILD; el "nccl-tests build: $(tail -1 /tmp/nt_build.txt)"; tail -3 /tmp/nt_build.txt >> "$OUT/sections.log"
bash scripts/gpu_bandwidth.sh /tmp/bw /tmp/nt > /tmp/bw.console 2>&1
el "gpu_bandwidth.sh: exit $?"; cp /tmp/bw.console /tmp/bw/console.txt 2>/dev/null
tar -C /tmp -czf "$OUT/bandwidth.tgz" bw
bash scripts/gpu_topology.sh /tmp/topology > /dev/null 2>&1
el "gpu_topology.sh: exit $?"
tar -C /tmp -czf "$OUT/topology.tgz" topology
el done
