"""``python -m dtlab.multinode.check``: the program a multi-node launch runs first.

Contract: run by torchrun on every rank (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR
set by the agent). Each rank prints one line -- host, node, local rank, device (GPU name, UUID,
bus id), NIC and address -- then joins the process group (NCCL with a GPU, else gloo); rank 0
gathers every rank's line and prints whether all ranks are present, duplicates (two ranks on
one GPU, a wrong LOCAL_RANK: :func:`.world.check_world`) and small all_reduce timings between
two ranks of one node (``within``) and of two nodes (``across``), as a table or ``--json``.
Exit status 0 when the world is whole, 1 when check_world found a problem::

    torchrun --nnodes 2 --node-rank $NODE --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint $MASTER:29400 -m dtlab.multinode.check [--json] [--out FILE]

Timings: latency is the median of ``--iters`` single-element all_reduce calls, each timed alone
(end minus start, after a barrier); bandwidth is ``--bytes`` over the median time of a large
all_reduce, as bus bandwidth (2(n-1)/n x bytes / time; n = 2 ranks, so bytes / time).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import threading
import time

from .world import check_world, nodes, pairs


def _address_and_nic() -> tuple[str | None, str | None]:
    """The address this rank's traffic leaves from: the interface GLOO/NCCL_SOCKET_IFNAME names,
    else the one the route to MASTER_ADDR takes (a UDP connect sends nothing)."""
    import psutil

    addrs = {nic: [a.address for a in al if a.family == socket.AF_INET]
             for nic, al in psutil.net_if_addrs().items()}
    want = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
    if want and not want.startswith(("^", "=")):
        nic = want.split(",")[0]
        return (addrs.get(nic) or [None])[0], nic
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((os.environ.get("MASTER_ADDR", "127.0.0.1"),
                       int(os.environ.get("MASTER_PORT", "29400"))))
            ip = s.getsockname()[0]
    except OSError:
        return None, None
    return ip, next((nic for nic, al in addrs.items() if ip in al), None)


def _gpu(local_rank: int):
    import torch

    if not torch.cuda.is_available() or local_rank >= torch.cuda.device_count():
        return None, "cpu"
    p = torch.cuda.get_device_properties(local_rank)
    bus = getattr(p, "pci_bus_id", None)
    if bus is not None and hasattr(p, "pci_domain_id"):
        bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{getattr(p, 'pci_device_id', 0):02x}.0"
    return {"name": p.name, "uuid": str(getattr(p, "uuid", "") or ""), "bus_id": bus}, f"cuda:{local_rank}"


def me() -> dict:
    """This rank's row of the rank table (torchrun's variables, this host, its GPU and NIC)."""
    env = os.environ
    local = int(env.get("LOCAL_RANK", 0))
    gpu, device = _gpu(local)
    address, nic = _address_and_nic()
    return {"rank": int(env.get("RANK", 0)), "world_size": int(env.get("WORLD_SIZE", 1)),
            "node": int(env.get("GROUP_RANK", 0)), "local_rank": local,
            "local_world_size": int(env.get("LOCAL_WORLD_SIZE", 1)), "host": socket.gethostname(),
            "address": address, "nic": nic, "device": device, "gpu": gpu, "pid": os.getpid(),
            "agent_pid": os.getppid()}


def _time_pair(group, device, iters: int, nbytes: int) -> tuple[float, float]:
    """(latency in us, bus bandwidth in GB/s) of all_reduce on a two-rank group."""
    import torch
    import torch.distributed as dist

    def one(t) -> float:
        dist.barrier(group=group)
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        if device != "cpu":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    small = torch.ones(1, device=device)
    big = torch.ones(max(1, nbytes // 4), device=device)
    for _ in range(3):
        one(small)
    lat = statistics.median(one(small) for _ in range(iters))
    one(big)
    t_big = statistics.median(one(big) for _ in range(max(3, iters // 10)))
    return lat * 1e6, big.numel() * 4 / t_big / 1e9


def run(iters: int = 50, nbytes: int = 1 << 20, timeout: float = 120.0) -> dict | None:
    """Report, join, time; rank 0 returns the whole report, the others None."""
    import torch
    import torch.distributed as dist

    row = me()
    gpu = row["gpu"]
    print(f"rank {row['rank']}/{row['world_size']} node {row['node']} local_rank "
          f"{row['local_rank']} host {row['host']} nic {row['nic']} address {row['address']} "
          f"device {row['device']}" + (f" {gpu['name']} {gpu['uuid']} {gpu['bus_id']}" if gpu else ""),
          flush=True)
    backend = "nccl" if row["device"] != "cpu" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(row["local_rank"])
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    try:
        # the rank table travels on gloo even on GPUs: NCCL creates its communicator at the first
        # GPU collective and refuses two ranks on one GPU ("Duplicate GPU detected"); found
        # first, such a world is reported as such and never timed
        meta = dist.new_group(backend="gloo") if backend == "nccl" else None
        table: list = [None] * dist.get_world_size()
        dist.all_gather_object(table, row, group=meta)
        shared = check_world(table)["duplicate_gpus"]
        if shared and row["rank"] == 0:
            print(f"ranks {shared} share a GPU: NCCL refuses that; not timing any pair",
                  flush=True)
        measured = []
        for p in ([] if shared else pairs(table)):
            group = dist.new_group(p["ranks"])  # every rank creates every group, in order
            if row["rank"] in p["ranks"]:
                lat, bw = _time_pair(group, row["device"], iters, nbytes)
                measured.append({**p, "latency_us": round(lat, 1), "bandwidth_GBps": round(bw, 4)})
            dist.barrier()
        everyone: list = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, measured, group=meta)
    finally:
        dist.destroy_process_group()
    if row["rank"] != 0:
        return None
    timed = {(m["kind"], tuple(m["ranks"])): m for ms in everyone for m in ms}  # both ranks agree
    rows = sorted(timed.values(), key=lambda m: (m["kind"] != "within", m["ranks"]))
    summary = {kind: [m for m in rows if m["kind"] == kind] for kind in ("within", "across")}
    return {**check_world(table), "nodes": nodes(table), "ranks": sorted(table, key=lambda r: r["rank"]),
            "pairs": rows,
            "latency_us": {k: _median(v, "latency_us") for k, v in summary.items()},
            "bandwidth_GBps": {k: _median(v, "bandwidth_GBps") for k, v in summary.items()},
            "bytes": nbytes, "iters": iters, "backend": backend}


def _median(rows: list[dict], key: str) -> float | None:
    return round(statistics.median(r[key] for r in rows), 4) if rows else None


def render(rep: dict) -> str:
    """The report as text: ranks, problems, then one line per timed pair."""
    lines = [f"world: {rep['ranks_present']} of {rep['world_size']} ranks present"
             + ("" if rep["ok"] else " -- PROBLEMS")]
    for k in ("missing", "duplicate_ranks", "out_of_range", "duplicate_gpus", "bad_local_ranks"):
        if rep[k]:
            lines.append(f"  {k.replace('_', ' ')}: {rep[k]}")
    lines.append(f"{'rank':>4} {'node':>4} {'local':>5}  {'host':<20} {'nic':<8} {'address':<15} device")
    for r in rep["ranks"]:
        lines.append(f"{r['rank']:>4} {r['node']:>4} {r['local_rank']:>5}  {r['host']:<20.20} "
                     f"{str(r['nic']):<8} {str(r['address']):<15} {r['device']}")
    lines.append(f"{'pair':<8} {'ranks':<8} {'nodes':<8} {'latency us':>10} {'busbw GB/s':>10}")
    for m in rep["pairs"]:
        lines.append(f"{m['kind']:<8} {','.join(map(str, m['ranks'])):<8} "
                     f"{','.join(map(str, m['nodes'])):<8} {m['latency_us']:>10.1f} "
                     f"{m['bandwidth_GBps']:>10.4f}")
    return "\n".join(lines)


def _watch_parent() -> None:
    """A rank whose agent died (SIGKILL) ends itself instead of waiting out its timeout."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dtlab.multinode.check", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="rank 0 prints the report as JSON")
    ap.add_argument("--out", help="rank 0 also writes the JSON report here")
    ap.add_argument("--iters", type=int, default=50, help="timed small all_reduce calls per pair")
    ap.add_argument("--bytes", type=int, default=1 << 20, help="size of the bandwidth all_reduce")
    ap.add_argument("--timeout", type=float, default=120, help="process-group timeout (s)")
    a = ap.parse_args(argv)
    _watch_parent()
    rep = run(a.iters, a.bytes, a.timeout)
    if rep is None:
        return 0
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump(rep, f)
        os.replace(a.out + ".tmp", a.out)
    print(json.dumps(rep) if a.json else render(rep), flush=True)
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
