#!/usr/bin/env bash
# Notebook 04's iperf3-beside-busbw, on GPUs: NCCL all_reduce between the 2 GPUs of one machine
# forced onto NET/Socket over loopback (NCCL's TCP transport, what links two nodes without RDMA),
# beside one plain TCP stream over the same loopback measured in the same job (iperf3's role;
# the machine has no iperf3). Nothing is downloaded; bounded under 60 s.
#
#   PYTHONPATH=. bash scripts/gpu_net_socket.sh OUT_DIR
#
# Writes OUT_DIR/results.txt (machine, versions, the TCP stream's rate, the busbw table, the
# ratio) and OUT_DIR/nccl_info.txt (each rank's NCCL INFO lines: the transport it chose, proof of
# NET/Socket). NCCL_NVLS_ENABLE=0 (never NVLink multicast). BACKEND=gloo runs the same steps on
# CPUs (a dry run of the script itself, not a GPU figure).
set -u -o pipefail
OUT=${1:?usage: PYTHONPATH=. bash scripts/gpu_net_socket.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
timeout --kill-after=5 55 "$PY" - "$OUT" "${BACKEND:-nccl}" <<'EOF'
import os
import socket
import statistics
import subprocess
import sys
import time

import dtlab
from dtlab.bench import busbw

OUT, BACKEND = sys.argv[1], sys.argv[2]
# NCCL between two GPUs of one host takes P2P (NVLink/PCIe) or SHM; with both off it takes its
# network transport, and NCCL_NET=Socket + NCCL_SOCKET_IFNAME=lo make that TCP over loopback
NET_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket",
           "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
           "NCCL_NVLS_ENABLE": "0"}
SIZES = [1 << 20, 16 << 20, 64 << 20, 256 << 20]
CHUNK, STREAM_S = 1 << 20, 2.0


# the receiving end of the stream, a process of its own (as iperf3 -s): read until the sender closes
SINK = """
import socket
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
buf = bytearray(1 << 20)
while conn.recv_into(buf):
    pass
"""


def tcp_stream_gbps() -> float:
    """One TCP stream over loopback for STREAM_S s, timed until the receiver has read every byte
    and exited (it reads until the close): iperf3's default test, in Python."""
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        s = socket.create_connection(("127.0.0.1", int(sink.stdout.readline())))
        data, sent = memoryview(bytearray(CHUNK)), 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < STREAM_S:
            s.sendall(data)
            sent += CHUNK
        s.close()
        sink.wait(20)
        return sent * 8 / (time.perf_counter() - t0) / 1e9
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(5)


def sweep(sizes, iters=20, warmup=5):
    """(bytes, median us, busbw GB/s) of all_reduce on this rank's group, CUDA-event timed."""
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    out = []
    for n in sizes:
        x = torch.ones(n // 4, device=f"cuda:{torch.cuda.current_device()}" if gpu else "cpu")
        for _ in range(warmup):
            dist.all_reduce(x)
        times = []
        for _ in range(iters):
            if gpu:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); dist.all_reduce(x); b.record(); b.synchronize()
                times.append(a.elapsed_time(b) * 1e3)
            else:
                t0 = time.perf_counter(); dist.all_reduce(x); times.append((time.perf_counter() - t0) * 1e6)
        us = statistics.median(times)
        out.append((n, us, busbw("all_reduce", n, us * 1e-6, nranks=dist.get_world_size())))
    return out


if __name__ == "__main__":
    import torch

    lines = [time.strftime("date: %Y-%m-%d %H:%M UTC", time.gmtime()), f"host: {socket.gethostname()}",
             f"torch {torch.__version__}, cuda {torch.version.cuda}, nccl "
             + (".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-"),
             f"gpus: {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}",
             f"backend: {BACKEND}; NCCL env: {' '.join(f'{k}={v}' for k, v in NET_ENV.items())}"]
    if BACKEND == "nccl" and torch.cuda.device_count() < 2:
        sys.exit("needs 2 GPUs for NCCL (BACKEND=gloo for a CPU dry run)")
    streams = [tcp_stream_gbps() for _ in range(3)]
    tcp = statistics.median(streams)
    lines.append(f"tcp stream over loopback, {STREAM_S:g} s x 3: "
                 + ", ".join(f"{g:.2f}" for g in streams) + f" Gbit/s; median {tcp:.2f} Gbit/s"
                 f" = {tcp / 8:.3f} GB/s")
    t0 = time.time()
    res = dtlab.run(sweep, SIZES, nprocs=2, backend=BACKEND, env=NET_ENV, timeout=30)
    lines.append(f"all_reduce, 2 ranks, {BACKEND} ({time.time() - t0:.0f} s with start-up):")
    lines.append(f"{'bytes':>12} {'time us':>10} {'busbw GB/s':>10} {'Gbit/s':>8} {'of tcp':>7}")
    for n, us, bw in res.values[0]:
        lines.append(f"{n:>12} {us:>10.1f} {bw:>10.3f} {bw * 8:>8.2f} {bw * 8 / tcp:>7.2f}")
    with open(os.path.join(OUT, "results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(OUT, "nccl_info.txt"), "w") as f:
        for r in range(2):
            nccl = [ln for ln in (res[r].stdout + res[r].stderr).splitlines() if "NCCL" in ln]
            f.write(f"# rank {r}: {len(nccl)} NCCL lines\n" + "\n".join(nccl) + "\n")
    print("\n".join(lines))
    via = [ln for ln in open(os.path.join(OUT, "nccl_info.txt")) if " via " in ln]
    print(f"{len(via)} connection lines; transports: {sorted({ln.split(' via ')[1].split()[0] for ln in via})}")
EOF
echo "rc=$?"
