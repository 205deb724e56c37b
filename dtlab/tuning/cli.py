"""``dtlab tune [--algo A,B] [--proto P,..] [--channels N,..] [--min-channels N,..]
[--p2p-disable 0,1] [--shm-disable 0,1] [--buffsize B,..] [--preset NAME,..] [sweep flags]
[--log-dir DIR] [--csv FILE] [--plot FILE.png] [--json]``: busbw vs size under a grid of NCCL
settings, each in fresh ranks (:func:`dtlab.tuning.sweep`). Exit status 0, 1 when a result was
wrong, 2 bad input or no setting finished."""

from __future__ import annotations

# `dtlab tune` flag -> the NCCL variable it sweeps (comma lists; "default" = leave unset)
AXES = {"algo": "NCCL_ALGO", "proto": "NCCL_PROTO", "channels": "NCCL_MAX_NCHANNELS",
        "min_channels": "NCCL_MIN_NCHANNELS", "p2p_disable": "NCCL_P2P_DISABLE",
        "shm_disable": "NCCL_SHM_DISABLE", "buffsize": "NCCL_BUFFSIZE"}


def parents() -> list:
    from ..bench.cli import ops
    from ..bench.engine import SWEEP_DTYPES
    from ..bench.formulas import MAX_SWEEP_BYTES, OPS
    from ..flags import json_flag, outputs, ranks, sweep

    return [sweep(ops, OPS, min_bytes="1K", max_bytes="256M", dtypes=SWEEP_DTYPES,
                  largest=MAX_SWEEP_BYTES),
            ranks(None, 300, min_ranks=2, why="a bandwidth sweep needs at least 2 ranks.",
                  timeout_help="seconds per setting before it counts as a hang"),
            outputs("also write every row as CSV", "also draw busbw vs size per setting"),
            json_flag("machine-readable output (progress goes to stderr)")]


def add_arguments(p) -> None:
    p.add_argument("--algo", help="NCCL_ALGO values, e.g. Ring,Tree (default = NCCL's choice)")
    p.add_argument("--proto", help="NCCL_PROTO values, e.g. LL,LL128,Simple")
    p.add_argument("--channels", help="NCCL_MAX_NCHANNELS values, e.g. 1,4,default")
    p.add_argument("--min-channels", dest="min_channels", help="NCCL_MIN_NCHANNELS values")
    p.add_argument("--p2p-disable", dest="p2p_disable", help="NCCL_P2P_DISABLE values: 0,1")
    p.add_argument("--shm-disable", dest="shm_disable", help="NCCL_SHM_DISABLE values: 0,1")
    p.add_argument("--buffsize", help="NCCL_BUFFSIZE values in bytes, e.g. 1M,4M")
    p.add_argument("--preset", help="named settings or groups, e.g. transports,protocols "
                   "(dtlab.tuning.PRESETS / GROUPS)")
    p.add_argument("--log-dir", dest="log_dir", help="keep NCCL's logs here, one folder per "
                   "setting (default: a temporary folder, removed)")
    p.epilog = ("exit status: 0 measured, 1 a result was wrong (#wrong > 0), 2 bad input or no "
                "setting finished")


def _sweep_args(args) -> dict:
    return dict(op=args.op, min_bytes=args.minbytes, max_bytes=args.maxbytes,
                factor=args.stepfactor, iters=args.iters, warmup=args.warmup_iters,
                dtype=args.datatype, nprocs=args.nprocs, backend=args.backend)


def check(args) -> None:
    """The settings (the flags' grid, presets, or the quick preset), and everything the sweep
    checks before its first setting runs: bad input, not a failed run."""
    from . import grid, preset
    from ..bench.cli import order
    from .runner import check as check_sweep

    from ..runtime.plan import resolve

    resolve(args.nprocs, args.backend, flags=True)
    axes = {}
    for dest, var in AXES.items():
        given = getattr(args, dest)
        if given:  # "Ring,Tree" -> ["Ring", "Tree"]; "default" -> None (NCCL's own choice)
            axes[var] = [None if v.strip().lower() == "default" else v.strip()
                         for v in given.split(",") if v.strip()]
            try:
                grid(**{var: axes[var]})  # each flag's values on their own: named by the flag
            except ValueError as e:
                raise ValueError(f"--{dest.replace('_', '-')} {given}: {e}") from None
    settings = []
    for name in (args.preset or "").split(","):
        if name.strip():
            try:
                settings += preset(name)
            except ValueError as e:
                raise ValueError(f"--preset {name}: {e}") from None
    if axes:
        settings += grid(**axes)  # the cartesian product of the flags given
    args.settings = settings or preset("quick")  # default, Ring, Tree, LL, Simple
    order(args)
    check_sweep(args.settings, **_sweep_args(args))


def run(args):
    from ..bench.cli import save_outputs
    from . import plot, sweep

    result = sweep(args.settings, timeout=args.timeout, log_dir=args.log_dir, progress=True,
                   **_sweep_args(args))
    df = result.frame
    ok = df[df["status"] == "ok"]
    save_outputs(args, df, (lambda: plot(result)) if not ok.empty else None)
    return result, 2 if ok.empty else 1 if (ok["wrong"].fillna(0) > 0).any() else 0
