"""NCCL tuning sweep on 2 GPUs, recorded for notebook 06 (dtlab.tuning).

On a machine with 2+ GPUs, from the repo root:

    PYTHONPATH=. python3 benchmarks/tuning_gpu.py --out DIR

runs :func:`dtlab.tuning.sweep` for all_reduce, 1 KiB .. 1 GiB (x2), 5 warm-up + 20 timed calls
per size, under these settings, each in fresh ranks with NCCL_NVLS_ENABLE=0:

    default                         NCCL's own choices
    P2P_DISABLE=1                   no GPU-to-GPU path: NCCL falls back to SHM (host memory)
    P2P_DISABLE=1 SHM_DISABLE=1     neither: the network transport (Socket without IB); swept to
                                    --net-max (128M) only, because a socket moves ~1 GB/s
    ALGO=Ring / ALGO=Tree           the algorithm forced
    PROTO=LL / LL128 / Simple       the protocol forced
    MAX_NCHANNELS=1 / 4             fewer channels (SMs and connections) than NCCL would use

plus the default once more with NCCL logging off, to show what NCCL_DEBUG=INFO costs. Every
setting logs NCCL_DEBUG=INFO (INIT,GRAPH,ENV,TUNING) into DIR/nccl-logs/<setting>/, and each row
gets NCCL's algorithm, protocol, channels and transport from those logs. About 1.5 minutes on
2x H200; it stops starting new sweeps after --budget seconds (150). Writes into DIR:

* ``tuning.csv``  -- every row (:func:`dtlab.tuning.columns`);
* ``tuning.png``  -- busbw vs size, one line per setting;
* ``tuning.txt``  -- machine, notes, per-setting tables, a busbw matrix, the best setting per
  size with its margin over the default, and the logging-overhead check;
* ``nccl-logs/``  -- the NCCL logs parsed (one file per rank process, not edited);
* ``topo.txt``    -- ``nvidia-smi topo -m``;
* ``README.md``   -- provenance: date, GPUs, driver, torch/CUDA/NCCL versions, the command.

``--backend gloo`` runs the same script on CPU ranks (to try it; NCCL settings then do nothing).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NVLINK4_X18 = (450.0, "NVLink4 x18: 450 GB/s/dir")  # 18 links x 25 GB/s of data each way (NVIDIA: 900 both ways)
MAIN = ["default", "shm", "ring", "tree", "ll", "ll128", "simple", "max_channels_1",
        "max_channels_4"]


def _cmd(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def provenance(torch) -> dict:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    driver = (_cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
              .split() or ["?"])[0]
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-"
    return {
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{socket.gethostname()}, {platform.machine()}, {os.cpu_count()} CPU cores, "
                   f"kernel {platform.release()}",
        "GPUs": f"{len(gpus)} x {', '.join(sorted(set(gpus))) or 'none'}; driver {driver}",
        "software": f"Python {platform.python_version()}, torch {torch.__version__}, "
                    f"CUDA {torch.version.cuda}, NCCL {nccl}",
        "NCCL_* in the environment": " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                                              if k.startswith("NCCL_")) or "(none)",
        "command": "PYTHONPATH=. python3 " + " ".join(shlex.quote(a) for a in sys.argv),
    }


def overhead(logged, bare, bench) -> list[str]:
    """default with NCCL_DEBUG=INFO vs without, per size: the cost of the per-call log line."""
    a = logged[(logged["setting"] == "default") & (logged["status"] == "ok")].set_index("size")
    b = bare[bare["status"] == "ok"].set_index("size")
    out = ["NCCL_DEBUG=INFO overhead: default setting, logged vs not (time_us; ratio > 1: the "
           "log line costs time)", f"{'size':>6s}  {'logged':>10s}  {'bare':>10s}  {'ratio':>6s}"]
    for size in a.index.intersection(b.index):
        t1, t0 = a.loc[size, "time_us"], b.loc[size, "time_us"]
        out.append(f"{bench.format_size(int(size)):>6s}  {t1:10.2f}  {t0:10.2f}  {t1 / t0:6.3f}")
    return out


def readme(prov: dict, args, wall: dict, res, log_bytes: int, skipped: list[str]) -> str:
    df = res.frame
    ok = sorted(set(df.loc[df["status"] == "ok", "setting"]), key=list(df["setting"]).index)
    failed = res.failed
    where = "GPUs" if args.backend == "nccl" else f"CPU ranks ({args.backend}: a trial run)"
    timing = "CUDA-event timing" if args.backend == "nccl" else "perf_counter timing"
    lines = [f"# NCCL tuning sweep (dtlab.tuning), all_reduce on {where}", "",
             "Real output of `benchmarks/tuning_gpu.py`, not edited.", ""]
    lines += [f"- {k}: {v}" for k, v in prov.items()]
    lines += ["- interconnect: `topo.txt` (`nvidia-smi topo -m`)",
              "- NCCL_NVLS_ENABLE=0 in every setting (NVLink multicast kept off)",
              f"- method: `dtlab.tuning.sweep`, each setting in fresh ranks (`dtlab.run`), "
              f"{args.warmup} warm-up + {args.iters} timed calls per size, {timing}, "
              f"MAX over ranks, `#wrong` check per size; sizes {args.minbytes}..{args.maxbytes} "
              f"(network setting to {args.net_max})",
              f"- NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING, "
              f"NCCL_DEBUG_FILE=nccl-logs/<setting>/nccl.%h.%p.log ({log_bytes / 1e6:.2f} MB)",
              "- wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items()),
              f"- settings that ran: {', '.join(ok)}"]
    lines += [f"- failed: {k}: {v}" for k, v in failed.items()]
    lines += [f"- skipped (time budget): {s}" for s in skipped]
    lines += ["", "Files: `tuning.txt` (tables, best setting per size, logging overhead), "
              "`tuning.csv`, `tuning.png`, `topo.txt`, `nccl-logs/<setting>/` (what was parsed)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for the CSV, PNG, text, logs, README")
    p.add_argument("-b", "--minbytes", default="1K")
    p.add_argument("-e", "--maxbytes", default="1G")
    p.add_argument("--net-max", default="128M", help="largest size for the network setting")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--nprocs", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--timeout", type=float, default=90, help="seconds per setting")
    p.add_argument("--budget", type=float, default=150, help="start no new sweep after this")
    p.add_argument("--backend", default="nccl", help="nccl (default); gloo only to try it")
    args = p.parse_args(argv)

    import torch

    from dtlab import bench, tuning

    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.backend == "nccl" and ngpu < 2:
        print(f"tuning_gpu.py: needs 2+ GPUs (found {ngpu}); try --backend gloo on CPUs.",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    logs = os.path.join(args.out, "nccl-logs")
    prov = provenance(torch)
    topo = _cmd(["nvidia-smi", "topo", "-m"])
    with open(os.path.join(args.out, "topo.txt"), "w") as f:
        f.write(topo or "(nvidia-smi topo -m gave nothing)\n")
    common = dict(op="all_reduce", min_bytes=args.minbytes, iters=args.iters,
                  warmup=args.warmup, nprocs=args.nprocs or max(ngpu, 2), backend=args.backend,
                  timeout=args.timeout)
    t0 = time.monotonic()
    wall, frames, skipped = {}, [], []
    frames.append(tuning.sweep(MAIN, max_bytes=args.maxbytes, log_dir=logs, **common))
    wall["main sweep"] = time.monotonic() - t0
    bare = None
    for name, run in (("network setting", lambda: tuning.sweep(
                          ["net"], max_bytes=args.net_max, log_dir=logs, with_default=False,
                          **common)),
                      ("default without NCCL log", lambda: tuning.sweep(
                          ["default"], max_bytes=args.maxbytes, nccl_log=False, **common))):
        if time.monotonic() - t0 > args.budget:
            skipped.append(name)
            continue
        t1 = time.monotonic()
        got = run()
        wall[name] = time.monotonic() - t1
        if name.startswith("network"):
            frames.append(got)
        else:
            bare = got.frame
    res = tuning.combine(*frames)
    df = res.frame
    wall["total"] = time.monotonic() - t0

    df.to_csv(os.path.join(args.out, "tuning.csv"), index=False)
    import matplotlib

    matplotlib.use("Agg")
    names = sorted({d["name"] for d in res.header.get("devices", [])})
    link = NVLINK4_X18 if "NV18" in topo else (None, None)
    ax = tuning.plot(res, link_limit_gbps=link[0], link_label=link[1],
                     title=f"all_reduce busbw per NCCL setting, {names[0] if names else '?'} "
                           f"x{common['nprocs']} ({args.backend})")
    ax.figure.savefig(os.path.join(args.out, "tuning.png"), dpi=120, bbox_inches="tight")

    text = ["# dtlab.tuning sweep", *[f"{k:<26s} {v}" for k, v in prov.items()],
            "wall time                  " + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items()),
            "", res.render(), "", tuning.wide_text(res)]
    if bare is not None:
        text += ["", *overhead(df, bare, bench)]
    text += [f"skipped (time budget): {s}" for s in skipped]
    for label, err in res.errors.items():
        text += ["", f"# {label}: the error in full", err]
    with open(os.path.join(args.out, "tuning.txt"), "w") as f:
        f.write("\n".join(text) + "\n")
    log_bytes = sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(logs)
                    for n in files) if os.path.isdir(logs) else 0
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(prov, args, wall, res, log_bytes, skipped))
    print("\n" + tuning.best_text(df))
    print(f"\nwrote {args.out}: tuning.csv, tuning.png, tuning.txt, README.md, topo.txt, "
          f"nccl-logs/ ({log_bytes / 1e6:.2f} MB); {wall['total']:.0f} s")
    wrong = (df["wrong"].fillna(0) > 0).any()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
