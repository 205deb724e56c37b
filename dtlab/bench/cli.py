"""``dtlab bench [--op OP,...] [-b MIN] [-e MAX] [-f F] [-n N] [-w W] [-d DTYPE] [--graph [N]]
[--nprocs N] [--backend B] [--timeout S] [--csv FILE] [--plot FILE.png] [--json]``: an
nccl-tests-style busbw sweep (:func:`dtlab.bench.sweep`); ``--p2p``: copy GB/s and latency
between every GPU pair instead (:func:`dtlab.bench.p2p.p2p_matrix`). Exit status 0, 1 when a
result was wrong (or a pair slow), 2 bad input or nothing measured."""

from __future__ import annotations

P2P_SIZE = "256M"  # --p2p's copy size when -e is left at the sweep's default


def ops(text: str) -> list[str]:
    """``--op``'s type: "all" or a comma list of collectives, any spelling nccl-tests uses."""
    from ..flags import op_list
    from .engine import resolve_ops

    return op_list(lambda: resolve_ops("all"), lambda name: resolve_ops(name)[0])(text)


def order(args) -> None:
    """-b larger than -e: the one check of the sweep's flags between each other."""
    from ..vocab import format_size

    if args.minbytes > args.maxbytes:
        raise ValueError(f"-b {format_size(args.minbytes)} is larger than -e "
                         f"{format_size(args.maxbytes)}: swap them.")


def parents() -> list:
    from ..flags import json_flag, outputs, ranks, sweep
    from .engine import SWEEP_DTYPES
    from .formulas import MAX_SWEEP_BYTES, OPS

    return [sweep(ops, OPS, dtypes=SWEEP_DTYPES, largest=MAX_SWEEP_BYTES),
            ranks(None, 600, min_ranks=2, why="a bandwidth sweep needs at least 2 ranks."),
            outputs(), json_flag()]


def add_arguments(p) -> None:
    from ..flags import whole

    p.add_argument("--graph", nargs="?", type=whole("--graph", 1, 100_000), const=True,
                   default=False, metavar="N", help="capture each size's timed loop in a CUDA "
                   "graph and time N replays of it (default 100; NCCL on GPUs; like nccl-tests "
                   "-G N)")
    p.add_argument("--p2p", action="store_true", help="instead of a sweep: copy GB/s and "
                   f"latency between every GPU pair (-e: copy size, default {P2P_SIZE}; -n, -w)")
    p.epilog = ("exit status: 0 measured, 1 a result was wrong (#wrong > 0) or, with --p2p, a "
                "pair slow, 2 bad input or nothing measured")


def check(args) -> None:
    if args.p2p:
        from .p2p import check_p2p_possible

        ignored = [f for f, given in (("--op", args.op != ["all_reduce"]),
                                      ("-b", args.minbytes != 8), ("-f", args.stepfactor != 2),
                                      ("-d", args.datatype != "float32"), ("--graph", args.graph),
                                      ("--nprocs", args.nprocs is not None)) if given]
        if ignored:
            raise ValueError(f"--p2p copies between GPU pairs in one process: it takes -e (the "
                             f"copy size), -n and -w, not {', '.join(ignored)}; drop them.")
        check_p2p_possible()
        return
    from ..runtime.plan import resolve
    from .engine import make_config

    resolve(args.nprocs, args.backend, flags=True)
    order(args)
    make_config(args.op, args.minbytes, args.maxbytes, args.stepfactor, args.iters,
                args.warmup_iters, args.datatype, nprocs=args.nprocs, graph=args.graph)
    if args.graph:
        from .graph import check_graph_possible

        check_graph_possible(args.backend)


def save_outputs(args, df, plot) -> None:
    """``--csv`` (the DataFrame ``df``) and ``--plot`` (``plot()``'s axes; None: nothing to draw),
    where given: dtlab bench's and dtlab tune's."""
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot and plot is not None:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        plot().figure.savefig(args.plot, dpi=120, bbox_inches="tight")


def run(args):
    from ..reporting import Plain

    if args.p2p:
        from ..vocab import parse_size
        from . import p2p

        size = args.maxbytes if args.maxbytes != parse_size("128M") else parse_size(P2P_SIZE)
        df = p2p.p2p_matrix(size=size, iters=args.iters, warmup=args.warmup_iters)
        save_outputs(args, df, lambda: p2p.plot_p2p(df, "uni_GBps"))
        slow = p2p.slow_pairs(df, "uni_GBps")
        return Plain({"pairs": df.to_dict(orient="records"), "slow_pairs": slow},
                     df.to_string(index=False, float_format=lambda v: f"{v:.2f}")
                     + f"\nslow pairs (< 0.75 x median uni GB/s): {slow or 'none'}"), \
            1 if slow else 0
    from .. import bench

    result = bench.sweep(args.op, args.minbytes, args.maxbytes, args.stepfactor, args.iters,
                     args.warmup_iters, dtype=args.datatype, nprocs=args.nprocs,
                     backend=args.backend, progress=not args.json, timeout=args.timeout,
                     graph=args.graph)
    save_outputs(args, result.frame, lambda: bench.plot(result))
    wrong = any((r[g] or {}).get("wrong") for rep in result.to_reports() for r in rep["rows"]
                for g in ("oop", "ip"))
    return result, 2 if result.frame.empty else 1 if wrong else 0
