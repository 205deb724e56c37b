#!/usr/bin/env bash
# `dtlab check` on a GPU machine: clean, then with each fault the check must catch, one device
# call (issue 25's "catch a broken machine, not only bless a good one"):
#   [LEVEL=standard] [CASES="clean p2p_off"] bash scripts/gpu_machine_check.sh OUT_DIR
# OUT_DIR/machine.txt, check_<case>.txt (the table, its exit status last), and checks.tgz
# holding those with each case's --json output and stderr.
# The full level and the cross-node part (torchrun, a duplicate GPU): scripts/gpu_check_full.sh.
# NVLink multicast stays off throughout (the lent machines' rule).
set -uo pipefail
out=${1:?OUT_DIR}; mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u +"date: %Y-%m-%d %H:%M UTC"; nvidia-smi -L; nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  python3 -c 'import pynvml; print("nvidia-ml-py present")' 2>&1 | tail -1; } > "$out/machine.txt" 2>&1
one() {  # one() NAME [VAR=VALUE ...]
  local name=$1; shift
  local t0=$(date +%s)
  env "$@" timeout 400 python3 -m dtlab check --level "${LEVEL:-quick}" --json > "$out/check_$name.json" 2> "$out/check_$name.err"
  local rc=$?
  env "$@" python3 -c "import json,sys; from dtlab.check import Report, Row
d=json.load(open(sys.argv[1])); r=Report([Row(**x) for x in d['rows']], level=d['level'], backend=d['backend'], nprocs=d['nprocs'])
print(r.render())" "$out/check_$name.json" > "$out/check_$name.txt" 2>&1
  echo "exit status $rc, wall $(( $(date +%s) - t0 )) s, environment: ${*:-(clean)}" >> "$out/check_$name.txt"
  echo "$name: rc $rc"; tail -1 "$out/check_$name.txt"
}
declare -A FAULT=([clean]="" [p2p_off]="NCCL_P2P_DISABLE=1" [ll_forced]="NCCL_PROTO=LL"
                  [sockets_only]="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1")
for c in ${CASES:-clean p2p_off ll_forced}; do one "$c" ${FAULT[$c]}; done
(cd "$out" && tar czf checks.tgz check_* && rm -f check_*.json check_*.err)
