#!/usr/bin/env bash
# The GPU tests and some notebooks executed live on the GPUs of one host, from the repository
# root (one device call; nbclient, ipykernel and py-spy carried as wheels in .whl/):
#
#   GPU_TESTS=1 bash scripts/gpu_live.sh OUT_DIR 04_multinode 05_parity ...
#   GPU_TESTS=1 GPU_TEST_DIRS="tests/bench tests/tuning" bash scripts/gpu_live.sh OUT_DIR
#
#   OUT_DIR/pytest_gpu.txt   pytest -m gpu over every package (GPU_TESTS=1)
#   OUT_DIR/nb_<name>.txt    each notebook's text outputs (scripts/run_notebook.py)
#   OUT_DIR/live.log         what ran, its exit status (a notebook's: the cells that raised
#                            unexpectedly) and seconds
#
# Bounded per part; a failed part is logged, never fatal. NVLink multicast stays off.
set -u -o pipefail
OUT=${1:?usage: bash scripts/gpu_live.sh OUT_DIR NOTEBOOK...}; shift
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DTLAB_OUTPUT=lines PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH
T0=$(date +%s); log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/live.log"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/pip.txt" 2>&1
  log "wheels: exit $?"
fi
log "machine: $(nvidia-smi -L | tr '\n' ' ') $(python3 -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
if [ "${GPU_TESTS:-0}" = 1 ]; then
  timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rs -x \
    ${GPU_TEST_DIRS:-tests/runtime tests/multinode tests/parity tests/capstone tests/hang} \
    > "$OUT/pytest_gpu.txt" 2>&1
  log "pytest -m gpu: exit $? ($(tail -1 "$OUT/pytest_gpu.txt"))"
fi
for nb in "$@"; do
  t=$(date +%s)
  timeout 420 python3 scripts/run_notebook.py "notebooks/$nb.ipynb" "$OUT/nb_$nb.txt" > "$OUT/nb_$nb.run.txt" 2>&1
  log "$nb: exit $? in $(( $(date +%s) - t )) s: $(tail -1 "$OUT/nb_$nb.run.txt")"
done
log done
