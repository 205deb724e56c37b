#!/usr/bin/env bash
# The whole course's GPU check on the N GPUs of one host (issue "Run the course on 8 GPUs"), from
# the repository root; each part leaves one .tgz or file in OUT_DIR as soon as it is done:
#
#   NGPU=8 bash scripts/gpu_all.sh OUT_DIR NCCL_TESTS_SRC [WHEELS_DIR]
#
#   machine.txt        GPUs, driver, versions, nvidia-smi topo -m
#   validate.txt       dtlab validate on NCCL, NGPU ranks (every collective)
#   bandwidth.tgz      scripts/gpu_bandwidth.sh with NGPU ranks, nccl-tests -g NGPU built beside
#   topology.tgz       scripts/gpu_topology.sh (topo -m, nvlink -s, NCCL's topology dump)
#   parity.tgz         scripts/gpu_parity.sh (2 and 4 ranks; add NGPU where it is larger)
#   hangs.tgz          every dtlab hang kind on NGPU ranks (NCCL) with dtlab's diagnosis
#   capstone.txt       the ~0.85B model vs transformers' Llama under FSDP2 on NGPU ranks
#   notebooks.txt      notebooks 01-05 executed live (needs nbclient/ipykernel wheels in WHEELS_DIR)
#   all.log            each part's exit status and seconds
#
# Every step is bounded; a failed step is logged, never fatal. NCCL_NVLS_ENABLE=0 throughout.
set -u -o pipefail
OUT=${1:?usage: NGPU=N bash scripts/gpu_all.sh OUT_DIR NCCL_TESTS_SRC [WHEELS_DIR]}
SRC=${2:?NCCL_TESTS_SRC}; WHEELS=${3:-}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export NGPU=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${WHEELS:+:/tmp/site}
T0=$(date +%s); log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/all.log"; }
if [ -n "$WHEELS" ]; then pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl >/dev/null 2>&1; fi
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c 'import torch; print("torch", torch.__version__,
"cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'; } > "$OUT/machine.txt" 2>&1
log "NGPU=$NGPU"

timeout 300 python3 -m dtlab validate --backend nccl --nprocs "$NGPU" --timeout 240 > "$OUT/validate.txt" 2>&1
log "validate: exit $?"

rm -rf /tmp/nt && cp -r "$SRC" /tmp/nt
bash scripts/gpu_bandwidth.sh /tmp/all-bw /tmp/nt > /tmp/all-bw.console 2>&1
log "bandwidth: exit $?"; cp /tmp/all-bw.console /tmp/all-bw/console.txt; tar -C /tmp -czf "$OUT/bandwidth.tgz" all-bw

bash scripts/gpu_topology.sh /tmp/all-topo > /dev/null 2>&1
log "topology: exit $?"; tar -C /tmp -czf "$OUT/topology.tgz" all-topo

bash scripts/gpu_parity.sh /tmp/all-parity > /dev/null 2>&1
log "parity: exit $?"; tar -C /tmp -czf "$OUT/parity.tgz" all-parity

mkdir -p /tmp/all-hangs
for kind in $(python3 -c 'from dtlab.hang.kinds import KINDS; print(" ".join(KINDS))'); do
  timeout 240 python3 -m dtlab hang "$kind" --backend nccl --nprocs "$NGPU" --out "/tmp/all-hangs/$kind" \
    > "/tmp/all-hangs/$kind.console.txt" 2>&1
  log "hang $kind: exit $? ($(grep -m1 -o 'Diagnosis[^.]*' "/tmp/all-hangs/$kind.console.txt"))"
done
tar -C /tmp -czf "$OUT/hangs.tgz" all-hangs

timeout 420 python3 benchmarks/capstone_vs_hf.py --size 1b --nprocs "$NGPU" --backend nccl --steps 10 \
  --rounds 3 > "$OUT/capstone.txt" 2>&1
log "capstone vs HF: exit $?"

if [ -n "$WHEELS" ]; then
  for nb in 01_collectives 02_bandwidth 03_topology 04_multinode 05_parity; do
    DTLAB_OUTPUT=lines timeout 300 python3 scripts/run_notebook.py "notebooks/$nb.ipynb" "/tmp/nb_$nb.txt" 2>&1 \
      | tail -1 >> "$OUT/notebooks.txt"
  done
  log "notebooks: $(tr '\n' ';' < "$OUT/notebooks.txt")"
fi
log done
