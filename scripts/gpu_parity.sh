#!/usr/bin/env bash
# Section 05 (dtlab.parity) on a GPU machine with 2 or 4 GPUs, recorded into folder $1:
#
#   run.txt                     date, host, GPUs, driver, torch/CUDA/NCCL, commands, exit codes
#   pytest-gpu.txt              pytest -m gpu tests/parity (NCCL parity, SyncBatchNorm, FSDP2)
#   ddp-n<N>.json               every bug and its fix vs one process, one launch (compare_many)
#   batchnorm-fix-n<N>.json     python3 -m dtlab parity --bug batchnorm --fix --backend nccl --json
#   fsdp-n<N>.json              python3 -m dtlab parity --fsdp --backend nccl --json
#                               (FSDP2 vs DDP, bf16 mixed precision, memory measured per rank)
#   scaling.json                DDP weak scaling on 1, 2 (and 4) GPUs over NCCL, the profiler's
#                               compute/comm overlap, bucket_cap_mb, find_unused_parameters' cost
#                               (dtlab.parity.scaling.report; a failed part is recorded as error)
#
# Usage, from the repository root (NVLink multicast stays off):
#   PYTHONPATH=. scripts/gpu_parity.sh data/h100x2-parity
# N is 2, and also 4 when the machine has 4 or more GPUs. Every step is bounded by `timeout`;
# a failed step is recorded, not fatal. The whole script stays under ~12 minutes.
set -u
out=${1:?usage: scripts/gpu_parity.sh OUT_DIR}
mkdir -p "$out" || exit 2
log="$out/run.txt"
export NCCL_NVLS_ENABLE=0 PYTHONPATH=${PYTHONPATH:-.}

. "$(dirname "$0")/steps.sh"  # step SECONDS OUTFILE CMD...

{ echo "date (UTC): $(date -u '+%Y-%m-%d %H:%M')"; echo "host: $(hostname), $(nproc) CPUs"
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  timeout 20 nvidia-smi topo -m
  timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "GPUs", torch.cuda.device_count())'
} >"$log" 2>&1
ngpu=$(timeout 20 nvidia-smi -L | grep -c '^GPU')
step 240 "$out/pytest-gpu.txt" python3 -m pytest -m gpu tests/parity -q --durations=0 -p no:cacheprovider
sizes=2; [ "$ngpu" -ge 4 ] && sizes="2 4"
for n in $sizes; do
  step 90 "$out/fsdp-n$n.json" python3 -m dtlab parity --fsdp --nprocs "$n" --backend nccl --json
  step 180 "$out/ddp-n$n.json" python3 -c "import json; from dtlab.parity import BUGS, compare_many
runs = [('none', False)] + [(b, f) for b in BUGS[1:] for f in (False, True)]
print(json.dumps([r.to_dict() for r in compare_many(runs, nprocs=$n, backend='nccl', timeout=150)], indent=1))"
  step 60 "$out/batchnorm-fix-n$n.json" python3 -m dtlab parity --bug batchnorm --fix --nprocs "$n" --backend nccl --json
done
step 300 "$out/scaling.json" python3 -c "import json; from dtlab.parity.scaling import report
print(json.dumps(report([1, 2, 4] if $ngpu >= 4 else [1, 2], backend='nccl', model='mlp-large', per_rank_batch=512, steps=20, command='scripts/gpu_parity.sh', keep_going=True), indent=1, default=str))"
cat "$log"
