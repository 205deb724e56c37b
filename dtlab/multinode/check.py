"""``python -m dtlab.multinode.check``: the program a multi-node launch runs first.

Contract: run by torchrun on every rank (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR
set by the agent). Each rank prints one line -- host, node, local rank, device (GPU name, UUID,
bus id), NIC and address -- then joins the process group (NCCL with a GPU, else gloo); rank 0
gathers every rank's line and prints whether all ranks are present, duplicates (two ranks on
one GPU, a wrong LOCAL_RANK: :func:`.world.check_world`) and small all_reduce timings between
two ranks of one node (``within``) and of two nodes (``across``; against the NIC's line rate
where the kernel reports it, :func:`line_rate`), as a table or ``--json``. A rank shown fewer
GPUs than its LOCAL_RANK needs (CUDA_VISIBLE_DEVICES differs between ranks) lands on another
rank's GPU: the report names the duplicate GPU and what each of its ranks was shown. Exit
status 0 when the world is whole, 1 when check_world found a problem. ``python -m dtlab.check``
under torchrun runs this module (the cross-node part of ``dtlab check``)::

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
    """(GPU facts, device, note) of this rank. A rank that sees fewer GPUs than its LOCAL_RANK
    asks for (its CUDA_VISIBLE_DEVICES hides some) takes ``local_rank % visible``, as many
    training programs do, and says so: the rank table then shows whose GPU it took."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not n:
        return None, "cpu", ""
    i, note = local_rank, ""
    if local_rank >= n:
        i = local_rank % n
        note = (f"LOCAL_RANK {local_rank} but {n} GPU(s) visible (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}): took cuda:{i}")
    p = torch.cuda.get_device_properties(i)
    bus = getattr(p, "pci_bus_id", None)
    if bus is not None and hasattr(p, "pci_domain_id"):
        bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{getattr(p, 'pci_device_id', 0):02x}.0"
    return ({"name": p.name, "uuid": str(getattr(p, "uuid", "") or ""), "bus_id": bus},
            f"cuda:{i}", note)


def _line_rate_gbps(nic: str | None) -> dict[str, float]:
    """The line rates (Gb/s) the kernel reports: the socket NIC's (``/sys/class/net/NIC/speed``,
    Mb/s; none for loopback and most virtual NICs) and each InfiniBand/RoCE port's
    (``/sys/class/infiniband/HCA/ports/P/rate``, "400 Gb/sec (4X NDR)"), which NCCL uses
    between nodes when present."""
    out = {}
    try:
        with open(f"/sys/class/net/{nic}/speed") as f:
            mbps = int(f.read().strip())
        if mbps > 0:
            out[nic] = mbps / 1000
    except (OSError, ValueError, TypeError):
        pass
    base = "/sys/class/infiniband"
    for hca in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for port in sorted(os.listdir(f"{base}/{hca}/ports")):
            try:
                with open(f"{base}/{hca}/ports/{port}/rate") as f:
                    out[f"{hca}:{port}"] = float(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out


def me() -> dict:
    """This rank's row of the rank table (torchrun's variables, this host, its GPU and NIC)."""
    env = os.environ
    local = int(env.get("LOCAL_RANK", 0))
    gpu, device, note = _gpu(local)
    address, nic = _address_and_nic()
    return {"rank": int(env.get("RANK", 0)), "world_size": int(env.get("WORLD_SIZE", 1)),
            "node": int(env.get("GROUP_RANK", 0)), "local_rank": local,
            "local_world_size": int(env.get("LOCAL_WORLD_SIZE", 1)), "host": socket.gethostname(),
            "address": address, "nic": nic, "device": device, "gpu": gpu, "pid": os.getpid(),
            "agent_pid": os.getppid(), "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
            "device_note": note, "line_rate_Gbps": _line_rate_gbps(nic)}


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
        torch.cuda.set_device(int(row["device"].split(":")[1]))
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
            print(f"duplicate GPU: ranks {shared} share a GPU (NCCL refuses that: 'Duplicate GPU "
                  f"detected'); not timing any pair", flush=True)
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
    for m in timed.values():
        m.update(line_rate(m, table))
    rows = sorted(timed.values(), key=lambda m: (m["kind"] != "within", m["ranks"]))
    summary = {kind: [m for m in rows if m["kind"] == kind] for kind in ("within", "across")}
    return {**check_world(table), "nodes": nodes(table), "ranks": sorted(table, key=lambda r: r["rank"]),
            "pairs": rows,
            "latency_us": {k: _median(v, "latency_us") for k, v in summary.items()},
            "bandwidth_GBps": {k: _median(v, "bandwidth_GBps") for k, v in summary.items()},
            "bytes": nbytes, "iters": iters, "backend": backend}


def line_rate(pair: dict, table: list[dict]) -> dict:
    """An across-node pair's line rate in GB/s -- the slower end's fastest NIC (one NIC a rank,
    as NCCL gives a 2-rank ring) -- and the measured busbw as a fraction of it; {} within a node
    or when no rank knows its NIC's rate (a virtual NIC, loopback).

    >>> t = [{"rank": 0, "line_rate_Gbps": {"mlx5_0:1": 400.0}},
    ...      {"rank": 1, "line_rate_Gbps": {"mlx5_0:1": 200.0}}]
    >>> line_rate({"kind": "across", "ranks": [0, 1], "bandwidth_GBps": 20.0}, t)
    {'line_rate_GBps': 25.0, 'of_line_rate': 0.8}
    """
    if pair["kind"] != "across":
        return {}
    by = {r["rank"]: r for r in table}
    ends = [max((by[k].get("line_rate_Gbps") or {}).values(), default=None) for k in pair["ranks"]]
    if None in ends:
        return {}
    gbytes = min(ends) / 8
    return {"line_rate_GBps": gbytes, "of_line_rate": round(pair["bandwidth_GBps"] / gbytes, 3)}


def _median(rows: list[dict], key: str) -> float | None:
    return round(statistics.median(r[key] for r in rows), 4) if rows else None


def render(rep: dict) -> str:
    """The report as text: ranks, problems, then one line per timed pair."""
    lines = [f"world: {rep['ranks_present']} of {rep['world_size']} ranks present"
             + ("" if rep["ok"] else " -- PROBLEMS")]
    for k in ("missing", "duplicate_ranks", "out_of_range", "duplicate_gpus", "bad_local_ranks"):
        if rep[k]:
            lines.append(f"  {k.replace('_', ' ')}: {rep[k]}")
    by = {r["rank"]: r for r in rep["ranks"]}
    for group in rep["duplicate_gpus"]:  # why two ranks share one: what each was shown
        lines.append("    " + "; ".join(
            f"rank {k} CUDA_VISIBLE_DEVICES={by[k].get('cuda_visible_devices') or '(unset)'}"
            + (f" ({by[k]['device_note']})" if by[k].get("device_note") else "") for k in group))
    lines.append(f"{'rank':>4} {'node':>4} {'local':>5}  {'host':<20} {'nic':<8} {'address':<15} device")
    for r in rep["ranks"]:
        lines.append(f"{r['rank']:>4} {r['node']:>4} {r['local_rank']:>5}  {r['host']:<20.20} "
                     f"{str(r['nic']):<8} {str(r['address']):<15} {r['device']}")
    lines.append(f"{'pair':<8} {'ranks':<8} {'nodes':<8} {'latency us':>10} {'busbw GB/s':>10}"
                 "  of the NIC's line rate")
    for m in rep["pairs"]:
        lines.append(f"{m['kind']:<8} {','.join(map(str, m['ranks'])):<8} "
                     f"{','.join(map(str, m['nodes'])):<8} {m['latency_us']:>10.1f} "
                     f"{m['bandwidth_GBps']:>10.4f}"
                     + (f"  {m['of_line_rate']:.2f} of {m['line_rate_GBps']:g} GB/s"
                        if "of_line_rate" in m else ""))
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
