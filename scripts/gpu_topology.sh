#!/usr/bin/env bash
# Record this GPU machine's topology for data/ (section 03, dtlab.topology) into folder $1:
#
#   nvidia-smi-topo.txt     nvidia-smi topo -m              (the matrix, NIC legend, affinity)
#   nvidia-smi-nvlink.txt   nvidia-smi nvlink -s            (per-link rate)
#   nvidia-smi-q.txt        nvidia-smi -q                   (PCIe generation/width: "GPU Link Info")
#   dtlab-topo.json / .txt  python3 -m dtlab topo [--json]  (parsed + NVML + torch peer access)
#   nccl-topo.xml           NCCL_TOPO_DUMP_FILE of a one-op all_reduce over every GPU
#                           (python3 -m dtlab validate --op all_reduce), its NCCL logs in nccl-logs/
#   run.txt                 date, host, versions, the commands and their exit status
#
# Usage, from the repository root on the GPU machine (NVLink multicast stays off):
#   PYTHONPATH=. scripts/gpu_topology.sh data/h200x2-topology
# Every step is bounded by `timeout` and a failed step is recorded, not fatal.
set -u
out=${1:?usage: scripts/gpu_topology.sh OUT_DIR}
mkdir -p "$out/nccl-logs" || exit 2
log="$out/run.txt"
export NCCL_NVLS_ENABLE=0 PYTHONPATH=${PYTHONPATH:-.}

. "$(dirname "$0")/steps.sh"  # step SECONDS OUTFILE CMD...

{ echo "date (UTC): $(date -u '+%Y-%m-%d %H:%M')"; echo "host: $(hostname), $(nproc) CPUs, kernel $(uname -r)"
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader
  timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "GPUs", torch.cuda.device_count())'
} >"$log" 2>&1
step 30 "$out/nvidia-smi-topo.txt" nvidia-smi topo -m
step 30 "$out/nvidia-smi-nvlink.txt" nvidia-smi nvlink -s
step 60 "$out/nvidia-smi-q.txt" nvidia-smi -q
step 60 "$out/dtlab-topo.json" python3 -m dtlab topo --json
step 60 "$out/dtlab-topo.txt" python3 -m dtlab topo
ngpu=$(timeout 20 nvidia-smi -L | grep -c '^GPU')
NCCL_TOPO_DUMP_FILE="$out/nccl-topo.xml" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV \
  NCCL_DEBUG_FILE="$out/nccl-logs/%h.%p.log" \
  step 300 "$out/validate.txt" python3 -m dtlab validate --op all_reduce --nprocs "$ngpu" --backend nccl --timeout 120
python3 -m dtlab topo "$out/nccl-topo.xml" >"$out/nccl-topo-parsed.txt" 2>>"$out/stderr.txt"
echo "exit $?: python3 -m dtlab topo nccl-topo.xml > nccl-topo-parsed.txt" >>"$log"
cat "$log"
