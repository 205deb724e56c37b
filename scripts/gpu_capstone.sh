#!/usr/bin/env bash
# Section 08 (capstone, first slice) on a 2-GPU machine, recorded into folder $1:
#
#   run.txt              date, host, GPUs, driver, torch/CUDA/NCCL/transformers, every step's exit
#   train-tiny.json      dtlab capstone train --size tiny --steps 30 --backend nccl --json
#   train-1b.json        dtlab capstone train --size 1b --steps 20 --json  (stdlib bytes; loss,
#                        ms/step, tokens/s, peak memory and MFU per GPU)
#   train-1b.err         its live progress lines ([capstone] step k/N loss ...)
#   vs-hf.txt, vs-hf.json  benchmarks/capstone_vs_hf.py: the same step time comparison with
#                        transformers' LlamaForCausalLM (same shape, FSDP2 settings, batches),
#                        3 interleaved rounds x 10 steps, median
#
# Usage, from the repository root, with torch + transformers installed (nothing is downloaded):
#   PYTHONPATH=. bash scripts/gpu_capstone.sh data/h200x2-capstone
# PYTHON=python3 by default. Each step bounded by `timeout`; a failed step is recorded, not
# fatal; the whole script stays under ~10 minutes. NVLink multicast stays off.
set -u
out=${1:?usage: scripts/gpu_capstone.sh OUT_DIR}
mkdir -p "$out" || exit 2
log="$out/run.txt"
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONPATH=${PYTHONPATH:-.} DTLAB_OUTPUT=lines

step() {  # step SECONDS OUTFILE CMD...: run bounded, keep stdout (stderr beside it), note exit
    local secs=$1 file=$2 t0; shift 2
    t0=$(date +%s)
    timeout --kill-after=15 "$secs" "$@" >"$file" 2>"${file%.*}.err"
    echo "exit $? in $(( $(date +%s) - t0 )) s (${secs} s limit): $* > $(basename "$file")" >>"$log"
}

{ echo "date (UTC): $(date -u '+%Y-%m-%d %H:%M')"; echo "host: $(hostname), $(nproc) CPUs"
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  timeout 20 nvidia-smi topo -m
  timeout 60 "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "GPUs", torch.cuda.device_count(), "transformers", transformers.__version__)'
} >"$log" 2>&1
step 120 "$out/train-tiny.json" "$PY" -m dtlab capstone train --size tiny --steps 30 --nprocs 2 --backend nccl --json
step 240 "$out/train-1b.json" "$PY" -m dtlab capstone train --size 1b --steps 20 --nprocs 2 --backend nccl --json
step 300 "$out/vs-hf.txt" "$PY" benchmarks/capstone_vs_hf.py --size 1b --nprocs 2 --backend nccl --steps 10 --rounds 3 --json "$out/vs-hf.json"
cat "$log"; cat "$out/vs-hf.txt"
