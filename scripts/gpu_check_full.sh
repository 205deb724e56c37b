#!/usr/bin/env bash
# `dtlab check --level full` on a GPU machine, and the check's cross-node part under torchrun on
# this one machine -- clean, and with a GPU hidden from one rank (a duplicate GPU), one device call:
#   bash scripts/gpu_check_full.sh OUT_DIR
# Writes, in OUT_DIR:
#   machine.txt, check_clean.txt, checks.tgz   scripts/gpu_machine_check.sh at LEVEL=full, clean
#   numa.txt                                   lscpu's NUMA lines and /sys's node CPU lists (a
#                                              wrong-NUMA pin can only be made with 2+ nodes)
#   cross_clean.txt/.json                      torchrun, 2 ranks, -m dtlab.check (the cross-node
#                                              part: dtlab.multinode.check); exit status last
#   cross_hidden_gpu.txt/.json                 the same, rank 1 shown CUDA_VISIBLE_DEVICES=0: it
#                                              lands on rank 0's GPU; must be named a duplicate GPU
#   nccl_duplicate.txt                         two ranks on cuda:0 (scripts/gpu_duplicate_gpu.py):
#                                              NCCL's and torch's own words, then what
#                                              dtlab.check.failures.name_failure makes of them
# NVLink multicast stays off throughout (the lent machines' rule).
set -uo pipefail
out=${1:?OUT_DIR}; mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LEVEL=full CASES=clean bash scripts/gpu_machine_check.sh "$out"
{ lscpu | grep -i numa; for n in /sys/devices/system/node/node*; do
    echo "$(basename "$n"): CPUs $(cat "$n/cpulist")"; done; } > "$out/numa.txt" 2>&1
run=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
t0=$(date +%s)
timeout 180 "${run[@]}" -m dtlab.check --out "$out/cross_clean.json" > "$out/cross_clean.txt" 2>&1
echo "exit status $?, wall $(( $(date +%s) - t0 )) s" >> "$out/cross_clean.txt"
t0=$(date +%s)
timeout 180 "${run[@]}" --no-python bash -c \
  '[ "$LOCAL_RANK" = 1 ] && export CUDA_VISIBLE_DEVICES=0; exec python3 -m dtlab.check --out "$0"' \
  "$out/cross_hidden_gpu.json" > "$out/cross_hidden_gpu.txt" 2>&1
echo "exit status $?, wall $(( $(date +%s) - t0 )) s, rank 1 with CUDA_VISIBLE_DEVICES=0" >> "$out/cross_hidden_gpu.txt"
NCCL_DEBUG=WARN timeout 180 "${run[@]}" scripts/gpu_duplicate_gpu.py > "$out/nccl_duplicate.txt" 2>&1
echo "exit status $?" >> "$out/nccl_duplicate.txt"
python3 -c 'import sys; from dtlab.check.failures import name_failure
print("name_failure:", name_failure(open(sys.argv[1]).read()))' "$out/nccl_duplicate.txt" >> "$out/nccl_duplicate.txt" 2>&1
for f in check_clean cross_clean cross_hidden_gpu nccl_duplicate; do echo "$f: $(tail -1 "$out/$f.txt")"; done
