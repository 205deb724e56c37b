"""busbw of every collective through torch.distributed + NCCL, next to the recorded nccl-tests.

On a machine with 2+ GPUs (one rank per GPU, NCCL, CUDA-event timing), from the repo root:

    PYTHONPATH=. python3 benchmarks/bandwidth_gpu.py --out bandwidth_gpu.txt

runs :func:`dtlab.bench.sweep` over all_reduce, all_gather, reduce_scatter, broadcast, reduce,
all_to_all and sendrecv from 8 B to 1 GiB (x2), 5 warmup + 20 timed calls per size and column,
with the ``#wrong`` check, in one launch (about a minute on 2 H200s), and writes

* ``OUT``      -- the machine, a busbw table (size x collective), the ratio to the recorded
                  nccl-tests runs in data/h200x2-nccl-tests/ (all_reduce, broadcast), and every
                  row in nccl-tests' own layout;
* ``OUT.csv``  -- every number (:data:`dtlab.bench.FRAME_COLUMNS`);
* ``OUT.png``  -- busbw vs size, with nccl-tests' curves and the NVLink line.

Ratios compare like with like: torch's all_reduce and broadcast work in place, so their busbw is
set against nccl-tests' in-place column. The reference was measured on 2x H200 (NV18); on other
cards the script says so above the ratios. It never sets NCCL_* variables (NCCL_NVLS_ENABLE
stays as the machine has it); they are printed for the record.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import platform
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

REF_DIR = os.path.join(ROOT, "data", "h200x2-nccl-tests")
NVLINK4_X18 = (450.0, "NVLink4 x18: 450 GB/s/dir")  # 18 links x 25 GB/s of data each way (NVIDIA: 900 both ways)


def machine(torch) -> list[str]:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.split()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        driver = "?"
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-"
    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))
    return [f"date       {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"host       {socket.gethostname()} ({platform.machine()}, {os.cpu_count()} cores)",
            f"gpus       {len(gpus)} x {', '.join(sorted(set(gpus)))}; driver {driver}",
            f"software   python {platform.python_version()}, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, NCCL {nccl}",
            f"NCCL env   {env or '(none set)'}",
            f"command    {' '.join([os.path.basename(sys.executable)] + sys.argv)}"]


def busbw_table(df, bench) -> list[str]:
    """size x op; out-of-place busbw where torch has the API, else in-place (marked 'ip')."""
    ops = list(dict.fromkeys(df["op"]))
    col = {op: "oop" if df.loc[df["op"] == op, "oop_busbw"].notna().any() else "ip" for op in ops}
    head = f"{'size':>6s}" + "".join(f"  {op + ('(ip)' if col[op] == 'ip' else ''):>18s}" for op in ops)
    out = ["busbw (GB/s); (ip) = in-place, the only form torch has for that op", head]
    for size in sorted(set(df["size"])):
        cells = []
        for op in ops:
            v = df.loc[(df["op"] == op) & (df["size"] == size), f"{col[op]}_busbw"]
            cells.append(f"  {v.iloc[0]:18.2f}" if len(v) and v.notna().iloc[0] else f"  {'-':>18s}")
        out.append(f"{bench.format_size(int(size)):>6s}" + "".join(cells))
    return out


def _f(value: float, width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value == value else f"{'-':>{width}s}"  # NaN -> '-'


def ratio_table(df, refs: dict, headers: dict, bench) -> list[str]:
    """For each op with a recorded nccl-tests run (``headers``: its nccl-tests header): busbw
    side by side and the ratio dtlab / nccl-tests per column that both measured (> 1:
    torch.distributed is faster)."""
    out = []
    for op, ref in refs.items():
        mine = df[df["op"] == op].set_index("size")
        if mine.empty:
            continue
        out += ["", f"{op}: dtlab (torch.distributed) vs nccl-tests "
                    f"({headers[op].get('nccl_tests_version')}, "
                    f"{headers[op]['devices'][0]['name']}), busbw GB/s",
                f"{'size':>6s}  {'nt oop':>8s}  {'nt ip':>8s}  {'dtlab oop':>9s}  {'dtlab ip':>8s}"
                f"  {'ratio oop':>9s}  {'ratio ip':>8s}  {'nt us':>8s}  {'dtlab us':>8s}"]
        for _, r in ref.iterrows():
            if r["size"] not in mine.index:
                continue
            m = mine.loc[r["size"]]
            # busbw ratio = time ratio at equal size and formula; times are printed to 4-5
            # digits where small busbw values are rounded to 0.00
            ratios = [r[f"{g}_time_us"] / m[f"{g}_time_us"] for g in ("oop", "ip")]
            t_mine = m["oop_time_us"] if m["oop_time_us"] == m["oop_time_us"] else m["ip_time_us"]
            t_ref = r["oop_time_us"] if m["oop_time_us"] == m["oop_time_us"] else r["ip_time_us"]
            out.append(f"{bench.format_size(int(r['size'])):>6s}  {_f(r['oop_busbw'], 8)}  "
                       f"{_f(r['ip_busbw'], 8)}  {_f(m['oop_busbw'], 9)}  {_f(m['ip_busbw'], 8)}  "
                       f"{_f(ratios[0], 9, 3)}  {_f(ratios[1], 8, 3)}  {_f(t_ref, 8)}  "
                       f"{_f(t_mine, 8)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="text report path; .csv and .png go beside it")
    p.add_argument("--op", default="all")
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="1G")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--nprocs", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--reference", default=REF_DIR, help="folder of nccl-tests outputs (*.txt)")
    p.add_argument("--timeout", type=float, default=420, help="seconds before it is a hang")
    p.add_argument("--backend", default="nccl", help="nccl (default); gloo only to try the script")
    args = p.parse_args(argv)

    import torch

    import dtlab
    from dtlab import bench

    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.backend == "nccl" and ngpu < 2:
        print(f"bandwidth_gpu.py: needs 2+ GPUs (found {ngpu}); use `dtlab bench --backend gloo` "
              f"on CPUs.", file=sys.stderr)
        return 2
    lines = ["# dtlab.bench sweep vs recorded nccl-tests", *machine(torch), ""]
    print("\n".join(lines), flush=True)
    t0 = time.monotonic()
    res = bench.sweep(args.op, args.minbytes, args.maxbytes, 2, args.iters, args.warmup,
                      nprocs=args.nprocs or max(ngpu, 2), backend=args.backend,
                      timeout=args.timeout)
    df, header = res.frame, res.header
    wall = time.monotonic() - t0
    refs, ref_headers = {}, {}
    for path in sorted(glob.glob(os.path.join(args.reference, "*.txt"))):
        for rep in bench.parse_nccl_tests_all(path):
            refs[rep["header"]["op"]] = bench.to_frame(rep)
            ref_headers[rep["header"]["op"]] = rep["header"]
    names = sorted({d["name"] for d in header["devices"]})
    ref_names = sorted({d["name"] for h in ref_headers.values() for d in h["devices"]})
    wrong = int(df[["oop_wrong", "ip_wrong"]].fillna(0).to_numpy().sum())
    lines += [f"sweep      {len(df)} rows in {wall:.1f} s (launch and NCCL setup included); "
              f"{header['nranks']} ranks; #wrong total {wrong}",
              f"dtlab      {dtlab.__version__}; {args.warmup} warmup + {args.iters} timed calls "
              f"per size and column; time = MAX over ranks of (the loop's "
              f"{'CUDA-event' if args.backend == 'nccl' else 'perf_counter'} time / iters)",
              ""] + busbw_table(df, bench)
    if refs and names != ref_names:
        lines += ["", f"NOTE: reference measured on {', '.join(ref_names)}; this machine has "
                      f"{', '.join(names)}: the ratios below compare different cards."]
    lines += ratio_table(df, refs, ref_headers, bench)
    for op, why in res.unsupported.items():
        lines.append(f"{op}: unsupported columns {why}")
    lines += ["", "# every row, nccl-tests layout", res.render()]
    base = os.path.splitext(args.out)[0]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    df.to_csv(base + ".csv", index=False)
    import matplotlib

    matplotlib.use("Agg")
    title = f"{names[0] if names else '?'} x{len(header['devices'])}: " \
            f"torch.distributed ({args.backend}) vs nccl-tests"
    ax = bench.plot([df] + list(refs.values()), link_limit_gbps=NVLINK4_X18[0],
                    link_label=NVLINK4_X18[1], title=title)
    ax.figure.savefig(base + ".png", dpi=120, bbox_inches="tight")
    print("\n".join(lines[lines.index("") + 1:lines.index("# every row, nccl-tests layout")]))
    print(f"wrote {args.out}, {base}.csv, {base}.png")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
