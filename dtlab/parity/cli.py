"""``dtlab parity [--bug B [--fix]] [--fsdp] [--scaling] [--precision] [--nprocs N] [--steps N]
[--dtype D] [--backend B] [--json]``: does DDP (or FSDP2) train like one process? A classic bug
and its fix compared step by step (:func:`dtlab.parity.compare`); ``--fsdp`` FSDP2 against DDP;
``--scaling`` DDP's throughput on 1..N ranks; ``--precision`` mixed precision against float32."""

from __future__ import annotations


def parents() -> list:
    from ..flags import json_flag, ranks

    return [ranks(2, None, min_ranks=2, why="parity compares 2 to 8 ranks with one process: give "
                  "2 or more", nprocs_help="ranks (default 2)"), json_flag()]


def add_arguments(p) -> None:
    from ..flags import one_of, whole
    from .report import BUGS

    p.add_argument("--bug", type=one_of("--bug", BUGS), default="none",
                   help=f"{', '.join(BUGS)} (default none)")
    p.add_argument("--fix", action="store_true", help="run the bug's fix instead")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) vs DDP instead")
    mode.add_argument("--scaling", action="store_true", help="DDP throughput on 1..--nprocs "
                      "ranks, compute/comm overlap, bucket_cap_mb (dtlab.parity.scaling)")
    mode.add_argument("--precision", action="store_true", help="bf16 / fp16 with GradScaler / "
                      "FSDP2 MixedPrecisionPolicy vs float32, each within its derived "
                      "tolerance? (dtlab.parity.precision; exit 1 if one is not as expected)")
    p.add_argument("--steps", type=whole("--steps", 1, 64, "4 steps make an epoch"), default=8,
                   help="training steps (default 8)")
    p.add_argument("--dtype", type=one_of("--dtype", ("float64", "float32")),
                   default="float64", help="float64 or float32 (DDP runs)")
    p.epilog = ("exit status: 0 compared (the report says whether parity held), 1 --precision: "
                "a mode outside its tolerance, 2 bad input")


def check(args) -> None:
    from ..runtime.plan import resolve

    mode = "--fsdp" if args.fsdp else "--scaling" if args.scaling else \
        "--precision" if args.precision else None
    if mode and (args.bug != "none" or args.fix):
        raise ValueError(f"{mode} takes no --bug/--fix: they name a bug of the DDP comparison.")
    if args.nprocs > 8:
        raise ValueError(f"--nprocs {args.nprocs}: at most 8 (parity is a comparison with one "
                         f"process, not a scale test).")
    if args.fix and args.bug == "none":
        raise ValueError("--fix runs a bug's fix: name the bug with --bug (e.g. --bug sum_loss "
                         "--fix).")
    resolve(args.nprocs, args.backend, flags=True)


def run(args):
    from ..reporting import Several

    if args.scaling:
        from .scaling import report

        return report(list(range(1, args.nprocs + 1)), backend=args.backend, steps=args.steps,
                      command="dtlab parity --scaling"), 0
    if args.precision:
        from .precision import mixed_precision

        rows = mixed_precision(nprocs=args.nprocs, backend=args.backend, steps=args.steps)
        return rows, 0 if rows.ok else 1
    if args.fsdp:
        from .fsdp import fsdp_vs_ddp

        return Several(fsdp_vs_ddp(nprocs=args.nprocs, backend=args.backend,
                                   steps=args.steps)), 0
    from . import compare

    return compare(args.bug, args.fix, nprocs=args.nprocs, backend=args.backend,
                   steps=args.steps, dtype=args.dtype), 0
