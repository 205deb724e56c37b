"""``dtlab ...``: the library from a terminal. Each subcommand is a thin call into a module.

    dtlab doctor [--json] [--no-launch]     is this machine ready? (dtlab.doctor)
    dtlab check [--level quick] [--json]    is it healthy? verdicts against its own hardware
    dtlab validate [--op OP,...] [--json]   every collective checked on live ranks (dtlab.collectives)
    dtlab nccl-log FILE... [--json]         what NCCL logged, rank by rank (dtlab.nccl_log)
    dtlab topo [FILE] [--json]              how the GPUs and NICs connect, and what it predicts (dtlab.topology)
    dtlab tune [--algo Ring,Tree] [--json]  busbw under a grid of NCCL settings (dtlab.tuning)
    dtlab course release|validate|autograde|feedback|report   the nbgrader course (dtlab.course)
    dtlab hang KIND [--nprocs N] [--backend B] [--out DIR]    reproduce a failure (dtlab.hang)
    dtlab diagnose DIR [--json]             name the cause from the evidence (dtlab.hang)
    dtlab topo [FILE] [--json]              GPU/NIC topology and predicted transports (dtlab.topology)
    dtlab parity [--bug B] [--fsdp] [--precision] [--json]   DDP/FSDP2 vs one process
    dtlab multinode script|simulate ...     cluster launch lines; a rehearsal on one machine
    dtlab capstone train [--size S] [--json]   a small Llama with FSDP2 (dtlab.capstone)

Bad input -- a wrong flag value, a file that is not there -- is one line on stderr,
``dtlab CMD: what is wrong and what to do``, and exit status 2, before any rank starts
(ARCHITECTURE.md, "Contracts"). Each command checks its arguments inside ``with arguments():``; only what is
raised there, and :class:`dtlab.LaunchError` (raised before a launch by definition), is reported
that way. A failure while ranks run keeps its traceback: it is not the user's typo. Every path a
command reads goes through :mod:`dtlab.paths`; the files and folders any command writes
(``--csv``, ``--plot``, ``--log-dir``) are checked before it runs (:func:`check_outputs`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys


class BadInput(ValueError):
    """A command's arguments are wrong; nothing has run."""


@contextlib.contextmanager
def arguments(flags: dict[str, str] | None = None):
    """Checks of a command's arguments go in here: ValueError and FileNotFoundError raised inside
    become :class:`BadInput`. ``flags`` renames the Python parameters the library's messages name
    into the command's flags (``{"min_bytes": "-b"}``: "min_bytes='1X' ..." -> "-b '1X' ...")."""
    try:
        yield
    except BadInput:
        raise
    except (ValueError, FileNotFoundError) as e:
        msg = one_line(e)
        for name, flag in (flags or {}).items():
            msg = re.sub(rf"(?<![\w-]){name}=", f"{flag} ", msg)
        raise BadInput(msg) from None


def one_line(e: BaseException) -> str:
    """The error's message on one line (FileNotFoundError: its text, not the errno tuple)."""
    text = e.args[0] if isinstance(e, (FileNotFoundError, KeyError)) and e.args else str(e)
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip()) \
        or type(e).__name__


# Output paths, by argparse dest, that any command may take: checked before the command runs
# (dtlab.paths), so a typo costs one line, not the measurement before it. Evidence folders
# (--out) are each command's own check: new or empty, so two runs never mix.
OUTPUT_FILES = {"csv": "--csv", "plot": "--plot"}
OUTPUT_FOLDERS = {"log_dir": "--log-dir"}


# what matplotlib's savefig writes (its canvas's get_supported_filetypes, Agg backend)
PICTURES = {"png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp", "pgf",
            "raw", "rgba", "avif", "gif"}


def check_outputs(args) -> None:
    from .paths import check_output_file, check_output_folder

    for dest, flag in OUTPUT_FILES.items():
        if getattr(args, dest, None):
            check_output_file(getattr(args, dest), flag)
    plot = getattr(args, "plot", None)
    ext = os.path.splitext(plot)[1].lstrip(".").lower() if plot else ""
    if plot and ext not in PICTURES:  # matplotlib picks the format by it, after the measuring
        raise ValueError(f"--plot {plot}: {'.' + ext if ext else 'no extension'} is not a picture "
                         f"format matplotlib writes: end the name in .png, .svg or .pdf")
    for dest, flag in OUTPUT_FOLDERS.items():
        if getattr(args, dest, None):
            check_output_folder(getattr(args, dest), flag)


def _doctor(args) -> int:
    from . import doctor

    return doctor.main(as_json=args.json, launch=not args.no_launch)


def _validate(args) -> int:
    import json

    from . import collectives
    from .collectives.validation import check_op
    from .runtime.plan import check_timeout, resolve

    with arguments({"op": "--op", "nprocs": "--nprocs", "backend": "--backend",
                    "timeout": "--timeout"}):
        names = None if args.op.strip().lower() == "all" else args.op.split(",")
        if names is not None and not all(n.strip() for n in names):  # '' or 'a,,b': a slip
            raise ValueError(f"--op {args.op!r}: an empty name; give op names separated by "
                             f"commas, e.g. all_reduce,all_to_all (or all).")
        ops = [check_op(n.strip()) for n in names] if names is not None else list(collectives.OPS)
        if args.nprocs is not None and args.nprocs < 2:
            raise ValueError(f"--nprocs {args.nprocs}: a collective needs at least 2 ranks.")
        check_timeout(args.timeout)
        resolve(args.nprocs, args.backend)
    rep = collectives.validate_all(ops, nprocs=args.nprocs, backend=args.backend,
                                   timeout=args.timeout)
    print(json.dumps(rep.to_dict(), indent=1) if args.json else rep.table())
    return 0 if rep.ok else 1


def _nccl_log(args) -> int:
    from .nccl_log import report

    return report.main(args.files, as_json=args.json, comm=args.comm)


# the Python parameters dtlab.bench / dtlab.tuning name in their errors -> the flags here
SWEEP_FLAGS = {"op": "--op", "min_bytes": "-b", "max_bytes": "-e", "factor": "-f",
               "iters": "-n", "warmup": "-w", "dtype": "-d", "nprocs": "--nprocs",
               "backend": "--backend", "timeout": "--timeout", "graph": "--graph"}


def _bench(args) -> int:
    import json

    from . import bench
    from .bench.engine import make_config
    from .runtime.plan import check_timeout, resolve

    if args.p2p:
        return _bench_p2p(args)
    with arguments(SWEEP_FLAGS):
        make_config(args.op, args.minbytes, args.maxbytes, args.stepfactor, args.iters,
                    args.warmup_iters, args.datatype, nprocs=args.nprocs, graph=args.graph)
        check_timeout(args.timeout)
        resolve(args.nprocs, args.backend)
        if args.graph:
            from .bench.graph import check_graph_possible

            check_graph_possible(args.backend)
    df = bench.sweep(args.op, args.minbytes, args.maxbytes, args.stepfactor, args.iters,
                     args.warmup_iters, dtype=args.datatype, nprocs=args.nprocs,
                     backend=args.backend, progress=not args.json, timeout=args.timeout,
                     graph=args.graph)
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        bench.plot(df).figure.savefig(args.plot, dpi=120, bbox_inches="tight")
    reports = bench.to_reports(df)
    print(json.dumps(reports, indent=1) if args.json else bench.render_text(reports))
    wrong = any((r[g] or {}).get("wrong") for rep in reports for r in rep["rows"] for g in ("oop", "ip"))
    return 2 if df.empty else 1 if wrong else 0


def _topo(args) -> int:
    import json

    from . import topology

    with arguments():  # a file that is not there or holds no topology; no nvidia-smi here
        topo = topology.load(args.file) if args.file else topology.local()
    print(json.dumps(topology.to_json(topo), indent=1) if args.json else topology.render(topo))
    return 0


def _bench_p2p(args) -> int:
    """``dtlab bench --p2p``: copy-engine GB/s and latency between every GPU pair, one process."""
    import json

    from .bench import p2p

    with arguments({"size": "-e"}):
        size = args.maxbytes if args.maxbytes != "128M" else "256M"  # -e's sweep default
        p2p.parse_size(size, "size")
        if args.iters < 1 or args.warmup_iters < 0:
            raise ValueError("-n must be >= 1 and -w >= 0.")
        p2p.check_p2p_possible()
    df = p2p.p2p_matrix(size=size, iters=args.iters, warmup=args.warmup_iters)
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        p2p.plot_p2p(df, "uni_GBps").figure.savefig(args.plot, dpi=120, bbox_inches="tight")
    slow = p2p.slow_pairs(df, "uni_GBps")
    if args.json:
        print(json.dumps({"pairs": df.to_dict(orient="records"), "slow_pairs": slow}, indent=1))
    else:
        print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        print(f"slow pairs (< 0.75 x median uni GB/s): {slow or 'none'}")
    return 1 if slow else 0


def _nccl_tests(args) -> int:
    import json

    from .bench import parse_nccl_tests_all, summary_text

    reports = []
    with arguments():  # reading is all this command does: a file it cannot read is bad input
        for path in args.files:
            reports += parse_nccl_tests_all(path)
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=1))
    else:
        print("\n\n".join(summary_text(r) for r in reports))
    return 0


def _tune(args) -> int:
    import json

    from . import tuning
    from .runtime.plan import check_timeout
    from .tuning.runner import check as check_sweep

    axes = {}
    for dest, var in TUNE_AXES.items():
        given = getattr(args, dest)
        if given:  # "Ring,Tree" -> ["Ring", "Tree"]; "default" -> None (NCCL's own choice)
            axes[var] = [None if v.strip().lower() == "default" else v.strip()
                         for v in given.split(",") if v.strip()]
    sweep_args = dict(op=args.op, min_bytes=args.minbytes, max_bytes=args.maxbytes,
                      factor=args.stepfactor, iters=args.iters, warmup=args.warmup_iters,
                      dtype=args.datatype, nprocs=args.nprocs, backend=args.backend)
    with arguments(SWEEP_FLAGS):  # bad settings, sizes, ranks: nothing ran
        settings = [s for name in (args.preset or "").split(",") if name.strip()
                    for s in tuning.preset(name)]
        if axes:
            settings += tuning.grid(**axes)  # the cartesian product of the flags given
        if not settings:
            settings = tuning.preset("quick")  # default, Ring, Tree, LL, Simple
        check_sweep(settings, **sweep_args)
        check_timeout(args.timeout)
    df = tuning.sweep(settings, timeout=args.timeout, log_dir=args.log_dir, progress=True,
                      progress_stream=sys.stderr if args.json else None, **sweep_args)
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot and (df["status"] == "ok").any():
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        tuning.plot(df).figure.savefig(args.plot, dpi=120, bbox_inches="tight")
    print(json.dumps(tuning.to_json(df), indent=1) if args.json else tuning.table(df))
    ok = df[df["status"] == "ok"]
    return 2 if ok.empty else 1 if (ok["wrong"].fillna(0) > 0).any() else 0


# `dtlab tune` flag -> the NCCL variable it sweeps (comma lists; "default" = leave unset)
TUNE_AXES = {"algo": "NCCL_ALGO", "proto": "NCCL_PROTO", "channels": "NCCL_MAX_NCHANNELS",
             "min_channels": "NCCL_MIN_NCHANNELS", "p2p_disable": "NCCL_P2P_DISABLE",
             "shm_disable": "NCCL_SHM_DISABLE", "buffsize": "NCCL_BUFFSIZE"}


def _hang(args) -> int:
    from .hang import reproduce
    from .hang.diagnose import render
    from .hang.reproduce import check_args

    with arguments({"nprocs": "--nprocs", "backend": "--backend", "timeout": "--timeout",
                    "delay": "--delay", "out": "--out"}):
        check_args(args.kind, args.nprocs, args.backend, args.timeout, args.out, args.delay,
                   detail=args.detail)
    rep = reproduce(args.kind, nprocs=args.nprocs, backend=args.backend, timeout=args.timeout,
                    out=args.out, detail=args.detail, delay=args.delay)
    print(f"\n{args.kind}: {rep.outcome}" + (f" ({rep.error})" if rep.error else ""))
    print(f"evidence: {rep.out}\n")
    print(render(rep.diagnosis))
    return 0


def _diagnose(args) -> int:
    from .hang.diagnose import main as diagnose_main

    return diagnose_main(args.dir, as_json=args.json)


def _parity(args) -> int:
    import json

    from .parity import compare
    from .parity.fsdp import fsdp_vs_ddp
    from .parity.report import check_args
    from .runtime.plan import resolve

    with arguments({"bug": "--bug", "nprocs": "--nprocs", "steps": "--steps",
                    "dtype": "--dtype", "backend": "--backend"}):
        check_args(args.bug, args.nprocs, args.steps, args.dtype)
        if args.fsdp and (args.bug != "none" or args.fix):
            raise ValueError("--fsdp compares FSDP2 with DDP and takes no --bug/--fix.")
        if args.scaling and (args.bug != "none" or args.fix or args.fsdp):
            raise ValueError("--scaling measures DDP throughput and takes no --bug/--fix/--fsdp.")
        if args.precision and (args.bug != "none" or args.fix or args.fsdp or args.scaling):
            raise ValueError("--precision compares mixed precision with float32 and takes no "
                             "--bug/--fix/--fsdp/--scaling.")
        resolve(args.nprocs, args.backend)
    if args.scaling:
        from .parity.scaling import report

        rep = report(list(range(1, args.nprocs + 1)), backend=args.backend, steps=args.steps,
                     command="dtlab parity --scaling")
        print(json.dumps(rep, indent=1, default=str) if args.json else "\n".join(
            f"{k}: {v}" for k, v in rep.items()))
        return 0
    if args.precision:
        from .parity.precision import line, mixed_precision

        rows = mixed_precision(nprocs=args.nprocs, backend=args.backend, steps=args.steps)
        print(json.dumps(rows, indent=1) if args.json else "\n".join(map(line, rows)))
        return 0 if all(r["ok"] for r in rows) else 1
    reports = (fsdp_vs_ddp(nprocs=args.nprocs, backend=args.backend, steps=args.steps)
               if args.fsdp else [compare(args.bug, args.fix, nprocs=args.nprocs,
                                          backend=args.backend, steps=args.steps,
                                          dtype=args.dtype)])
    if args.json:
        out = [r.to_json() for r in reports]
        print(json.dumps(out if args.fsdp else out[0], indent=1))
    else:
        print("\n".join(map(str, reports)))
    return 0


def _multinode(args) -> int:
    from .multinode import cli as multinode_cli

    with arguments():
        multinode_cli.check(args)
    return multinode_cli.run(args)


def _course(args) -> int:
    from .course import cli as course_cli

    return course_cli.run(args)


def _check(args) -> int:
    from .check import cli as check_cli

    with arguments():
        check_cli.check(args)
    return check_cli.run(args)


def _capstone(args) -> int:
    from .capstone import cli as capstone_cli

    with arguments({"size": "--size", "steps": "--steps", "nprocs": "--nprocs",
                    "backend": "--backend", "batch": "--batch", "seq": "--seq", "data": "--data",
                    "bug": "--bug", "out": "--out", "culprit": "--culprit",
                    "at_step": "--at-step", "baseline": "--baseline"}):
        capstone_cli.check(args)
    return capstone_cli.run(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtlab", description="Distributed-training lab: tools and course.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("doctor", help="check torch, GPUs, links, NCCL/gloo, py-spy, /dev/shm")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument("--no-launch", action="store_true", help="skip the live 2-rank all_reduce")
    d.set_defaults(func=_doctor)
    ck = sub.add_parser("check", help="is this machine healthy for distributed training? "
                        "software, GPUs, collectives, bandwidth vs the links, the failure path "
                        "(dtlab.check)",
                        epilog="exit status: 0 all PASS or SKIP, 1 a WARN or FAIL, 2 bad input")
    from .check.cli import add_arguments as add_check_arguments

    add_check_arguments(ck)
    ck.set_defaults(func=_check)
    v = sub.add_parser("validate", help="check every collective on this machine's ranks: known "
                       "values, random vs a float64 reference, odd sizes (dtlab.collectives)",
                       epilog="exit status: 0 nothing failed, 1 something failed, 2 bad input")
    v.add_argument("--op", default="all", help="all_reduce, all_gather, reduce_scatter, "
                   "broadcast, reduce, all_to_all, gather, scatter, sendrecv, batch_isend_irecv, "
                   "a comma list, or all (default all)")
    v.add_argument("--nprocs", type=int, default=None, help="ranks (default: GPUs, else 2)")
    v.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    v.add_argument("--timeout", type=float, default=120, help="seconds before the run is a hang")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=_validate)
    b = sub.add_parser("bench", help="nccl-tests-style busbw sweep of collectives (dtlab.bench)")
    b.add_argument("--op", default="all_reduce",
                   help="all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, "
                        "sendrecv, a comma list, or all (default all_reduce)")
    b.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 1K (default 8)")
    b.add_argument("-e", "--maxbytes", default="128M", help="largest size, e.g. 1G (default 128M)")
    b.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    b.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size (default 20)")
    b.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls first (default 5)")
    b.add_argument("-d", "--datatype", default="float32", help="float32, bfloat16, float16, ...")
    b.add_argument("--nprocs", type=int, default=None, help="ranks (default: GPUs, else 2)")
    b.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    b.add_argument("--timeout", type=float, default=600, help="seconds before the run is a hang")
    b.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    b.add_argument("--plot", metavar="FILE.png", help="also draw busbw vs size")
    b.add_argument("--graph", nargs="?", type=int, const=True, default=False, metavar="N",
                   help="capture each size's timed loop in a CUDA graph and time N replays of it "
                   "(default 100; NCCL on GPUs; like nccl-tests -G N)")
    b.add_argument("--p2p", action="store_true", help="instead of a sweep: copy GB/s and "
                   "latency between every GPU pair (-e: copy size, default 256M)")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.set_defaults(func=_bench)
    nt = sub.add_parser("nccl-tests", help="read nccl-tests output (all_reduce_perf & co.)")
    nt.add_argument("files", nargs="+", metavar="FILE", help="nccl-tests text output")
    nt.add_argument("--json", action="store_true", help="{header, rows, trailer} per run")
    nt.set_defaults(func=_nccl_tests)
    tp = sub.add_parser("topo", help="GPU/NIC topology (nvidia-smi topo -m, NCCL's topology XML, "
                        "NVML, peer access) and the transport predicted per GPU pair (dtlab.topology)")
    tp.add_argument("file", nargs="?", metavar="FILE", help="saved `nvidia-smi topo -m` output or "
                    "NCCL_TOPO_DUMP_FILE XML (default: this machine)")
    tp.add_argument("--json", action="store_true", help="devices, links [{a, b, kind}], affinity, "
                    "predictions")
    tp.set_defaults(func=_topo)
    t = sub.add_parser("tune", help="busbw vs size under a grid of NCCL settings, each in "
                       "fresh ranks, with NCCL's chosen algorithm/protocol/channels/transport "
                       "(dtlab.tuning)")
    t.add_argument("--op", default="all_reduce", help="collective(s) to time (default all_reduce)")
    t.add_argument("-b", "--minbytes", default="1K", help="smallest size (default 1K)")
    t.add_argument("-e", "--maxbytes", default="256M", help="largest size (default 256M)")
    t.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    t.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size (default 20)")
    t.add_argument("-w", "--warmup_iters", type=int, default=5,
                   help="untimed calls first (default 5)")
    t.add_argument("-d", "--datatype", default="float32", help="float32, bfloat16, ...")
    t.add_argument("--algo", help="NCCL_ALGO values, e.g. Ring,Tree (default = NCCL's choice)")
    t.add_argument("--proto", help="NCCL_PROTO values, e.g. LL,LL128,Simple")
    t.add_argument("--channels", help="NCCL_MAX_NCHANNELS values, e.g. 1,4,default")
    t.add_argument("--min-channels", dest="min_channels", help="NCCL_MIN_NCHANNELS values")
    t.add_argument("--p2p-disable", dest="p2p_disable", help="NCCL_P2P_DISABLE values: 0,1")
    t.add_argument("--shm-disable", dest="shm_disable", help="NCCL_SHM_DISABLE values: 0,1")
    t.add_argument("--buffsize", help="NCCL_BUFFSIZE values in bytes, e.g. 1M,4M")
    t.add_argument("--preset", help="named settings or groups, e.g. transports,protocols "
                   "(dtlab.tuning.PRESETS / GROUPS)")
    t.add_argument("--nprocs", type=int, default=None, help="ranks (default: GPUs, else 2)")
    t.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    t.add_argument("--timeout", type=float, default=300, help="seconds per setting before it "
                   "counts as a hang")
    t.add_argument("--log-dir", dest="log_dir", help="keep NCCL's logs here, one folder per "
                   "setting (default: a temporary folder, removed)")
    t.add_argument("--csv", metavar="FILE", help="also write every row as CSV")
    t.add_argument("--plot", metavar="FILE.png", help="also draw busbw vs size per setting")
    t.add_argument("--json", action="store_true", help="machine-readable output (progress "
                   "goes to stderr)")
    t.set_defaults(func=_tune)
    n = sub.add_parser("nccl-log", help="read NCCL_DEBUG=INFO logs of all ranks: ranks, "
                       "transports, channels, env, collectives, where ranks diverge")
    n.add_argument("files", nargs="+", metavar="FILE", help="log files, or a folder of them, or "
                   "captured torchrun output")
    n.add_argument("--json", action="store_true", help="machine-readable output")
    n.add_argument("--comm", default=None, help="communicator to report (key or commId; "
                   "default: the world one)")
    n.set_defaults(func=_nccl_log)
    h = sub.add_parser("hang", help="reproduce a distributed failure on purpose and record the "
                       "evidence every tool gives (dtlab.hang)")
    from .hang.kinds import KINDS

    h.add_argument("kind", choices=list(KINDS), metavar="KIND", help=", ".join(KINDS))
    h.add_argument("--nprocs", type=int, default=3, help="ranks (default 3: the odd one out shows)")
    h.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    h.add_argument("--timeout", type=float, default=30, help="seconds before dtlab stops the ranks")
    h.add_argument("--out", default=None, help="evidence folder (new or empty; default: a temp dir)")
    h.add_argument("--delay", type=float, default=1.0, help="the straggler's lag per step (s)")
    dg = h.add_mutually_exclusive_group()
    dg.add_argument("--detail", dest="detail", action="store_true", default="auto",
                    help="always rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (default: only when "
                         "the raw evidence leaves the diagnosis unsure)")
    dg.add_argument("--no-detail", dest="detail", action="store_false")
    h.set_defaults(func=_hang)
    dgn = sub.add_parser("diagnose", help="name the cause of a hang or crash from an evidence "
                         "folder (NCCL logs, Flight Recorder, py-spy, run.json, torchrun/SLURM consoles)",
                         epilog="exit status: 0 no failure found, 1 failure found (named in the "
                         "output), 2 no usable evidence (or bad arguments)")
    dgn.add_argument("dir", help="the folder to read (any mix of evidence files)")
    dgn.add_argument("--json", action="store_true", help="machine-readable verdict")
    dgn.set_defaults(func=_diagnose)
    par = sub.add_parser("parity", help="does DDP (or FSDP2) train like one process? a classic "
                         "bug and its fix, compared step by step (dtlab.parity)")
    par.add_argument("--bug", default="none", help="none, no_sampler, no_set_epoch, batchnorm, "
                     "sum_loss, no_sync_missing, unused_param (default none)")
    par.add_argument("--fix", action="store_true", help="run the bug's fix instead")
    par.add_argument("--nprocs", type=int, default=2, help="ranks (default 2)")
    par.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    par.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) vs DDP instead")
    par.add_argument("--scaling", action="store_true", help="DDP throughput on 1..--nprocs "
                     "ranks, compute/comm overlap, bucket_cap_mb (dtlab.parity.scaling)")
    par.add_argument("--precision", action="store_true", help="bf16 / fp16 with GradScaler / "
                     "FSDP2 MixedPrecisionPolicy vs float32, each within its derived tolerance? "
                     "(dtlab.parity.precision; exit 1 if one is not as expected)")
    par.add_argument("--steps", type=int, default=8, help="training steps (default 8)")
    par.add_argument("--dtype", default="float64", help="float64 or float32 (DDP runs)")
    par.add_argument("--json", action="store_true", help="machine-readable output")
    par.set_defaults(func=_parity)
    mn = sub.add_parser("multinode", help="multi-node launches: torchrun/sbatch lines for a "
                        "cluster, a rehearsal on this machine in network namespaces, faults "
                        "and their diagnosis (dtlab.multinode)")
    from .multinode.cli import add_arguments as add_multinode_arguments

    add_multinode_arguments(mn)
    mn.set_defaults(func=_multinode)
    c = sub.add_parser("course", help="the nbgrader course: release, validate, autograde, "
                       "feedback, report (dtlab.course)")
    from .course.cli import add_arguments as add_course_arguments

    add_course_arguments(c)
    c.set_defaults(func=_course)
    cap = sub.add_parser("capstone", help="section 08: train a small Llama with FSDP2 and "
                         "measure it (dtlab.capstone)")
    from .capstone.cli import add_arguments as add_capstone_arguments

    add_capstone_arguments(cap)
    cap.set_defaults(func=_capstone)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .runtime.errors import LaunchError

    try:
        with arguments():
            check_outputs(args)
        return args.func(args) or 0
    except (BadInput, LaunchError) as e:  # LaunchError: raised before any rank started
        print(f"dtlab {args.command}: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the launch it interrupted has ended its ranks on the way out
        print(f"dtlab {args.command}: stopped by Ctrl-C", file=sys.stderr)
        return 128 + 2  # as a shell reports a process ended by SIGINT
    except BrokenPipeError:  # `dtlab ... --json | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
