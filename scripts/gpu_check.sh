#!/usr/bin/env bash
# One device call: the runtime's GPU tests, the pool/launch comparison with an earlier tree, and
# hang evidence, on a 2-GPU machine (see ARCHITECTURE.md; run from the repository root):
#   bash scripts/gpu_check.sh OUT_DIR [BASE_TREE]
# BASE_TREE holds an earlier dtlab/ (git archive REF dtlab | tar -x -C BASE_TREE) for benchmarks/versus.py.
set -uo pipefail
out=${1:?OUT_DIR}; base=${2:-}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'; } 2>&1 | tee "$out/machine.txt"
python3 -m pytest -m gpu -q -p no:cacheprovider tests/runtime tests/bench tests/tuning 2>&1 | tee "$out/pytest_gpu.txt"
if [ -n "$base" ]; then
  python3 benchmarks/versus.py --base-tree "$base" --backend nccl --rounds 5 --cells 200 --launches 1 2>&1 | tee "$out/versus_nccl.txt"
fi
for kind in ${HANG_KINDS:-p2p_deadlock}; do
  python3 -m dtlab hang "$kind" --backend nccl --nprocs 2 --out "$out/hang-$kind" > "$out/hang-$kind.console.txt" 2>&1
  echo "hang $kind: rc $?"; tail -5 "$out/hang-$kind.console.txt"
done
(cd "$out" && tar czf hang.tgz hang-* && rm -rf hang-*/)
