"""``dtlab capstone train|hang``: the section's terminal commands (dtlab/cli.py calls in).

Bad input is a ValueError (or :class:`dtlab.LaunchError`) raised inside the caller's
``arguments()`` block, before any rank starts: one line on stderr, exit status 2.

    dtlab capstone train [--size tiny|small|1b] [--steps N] [--nprocs N] [--backend B] [--json]
    dtlab capstone baseline [--size S] [--steps N] [--nprocs N] [--backend B] [--out DIR] [--json]
    dtlab capstone hang [--bug KIND] [--nprocs N] [--backend B] [--out DIR] [--culprit R]
                        [--at-step K] [--baseline DIR] [--json]
"""

from __future__ import annotations

import argparse

EXIT = "exit status: 0 done, 2 bad input"
OUT_DEFAULT = ("default: a new folder under ./dtlab-evidence/, or $DTLAB_EVIDENCE_ROOT")


def _ranks(low: int):
    from ..flags import ranks

    return ranks(None, None, min_ranks=low, why="a hang needs at least 2 ranks" if low > 1 else "",
                 nprocs_help="ranks (default: one per GPU, else 2)")


def _size(text: str) -> str:
    """``--size``'s type: a size of :data:`dtlab.capstone.model.CONFIGS` (imported when a
    command is parsed, not when the parser is built: it imports torch)."""
    from ..flags import one_of
    from .model import CONFIGS

    return one_of("--size", CONFIGS)(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..flags import json_flag, one_of, seconds, whole
    from ..limits import MAX_STEPS
    from .baseline import STEPS
    from .hang import BUGS, MAX_STEP, PG_TIMEOUT, TIMEOUT

    sub = p.add_subparsers(dest="capstone_command", metavar="{train,baseline,hang}",
                           required=True)
    size = dict(type=_size, default="tiny")
    what = ("train the Llama-style model with FSDP2; loss, step time, tokens/s, peak memory and "
            "MFU per rank")
    t = sub.add_parser("train", parents=[_ranks(1), json_flag("machine-readable summary on "
                       "stdout")], help=what, description=what + ".", epilog=EXIT)
    t.add_argument("--size", **size, help="tiny (CPU, seconds), small, 1b (GPUs); default tiny")
    t.add_argument("--steps", type=whole("--steps", 1, MAX_STEPS), default=30,
                   help="training steps (default 30)")
    t.add_argument("--batch", type=whole("--batch", 1, 4096, "sequences per rank per step"),
                   default=None, help="sequences per rank per step (default: the size's)")
    t.add_argument("--seq", type=whole("--seq", 1, 1 << 17, "tokens per sequence"), default=None,
                   help="tokens per sequence (default: the size's)")
    t.add_argument("--data", type=one_of("--data", ("text", "random")), default="text",
                   help="text (stdlib sources as bytes, default) or random (uniform ids, as the "
                   "benchmark)")
    what = ("a clean run recorded before anything breaks: NCCL logs (NCCL_DEBUG=INFO from "
            "launch), rings and trees, a throughput table, saved as an evidence folder")
    b = sub.add_parser("baseline", parents=[_ranks(1), json_flag("machine-readable baseline on "
                       "stdout")], help=what, description=what + ".", epilog=EXIT)
    b.add_argument("--size", **size, help="tiny, small, 1b (default tiny)")
    b.add_argument("--steps", type=whole("--steps", 1, MAX_STEPS), default=STEPS,
                   help=f"training steps, more than the untimed warm-up steps (default {STEPS})")
    b.add_argument("--out", default=None, help=f"baseline folder, new or empty ({OUT_DEFAULT})")
    what = ("break the training job on purpose (a hang or an error for a real reason), collect "
            "the evidence, print dtlab's diagnosis")
    h = sub.add_parser("hang", parents=[_ranks(2), json_flag("machine-readable report on "
                       "stdout")], help=what, description=what + ".", epilog=EXIT)
    h.add_argument("--bug", type=one_of("--bug", BUGS), default="extra_metric",
                   help=f"{', '.join(BUGS)} (default extra_metric)")
    h.add_argument("--out", default=None, help=f"evidence folder, new or empty ({OUT_DEFAULT})")
    h.add_argument("--culprit", type=whole("--culprit", 0, 255), default=None,
                   help="the rank that does it wrong (default 1)")
    h.add_argument("--at-step", type=whole("--at-step", 1, MAX_STEP, "at least one good step first"), default=None,
                   dest="at_step", help=f"the step it goes wrong, 1 to {MAX_STEP} (default 3)")
    h.add_argument("--baseline", default=None, help="a folder from dtlab capstone baseline: "
                   "say what the broken run did differently")
    h.add_argument("--timeout", type=seconds(), default=TIMEOUT, help=f"seconds the whole job "
                   f"may take before dtlab stops it (default {TIMEOUT:g}; the hang itself shows "
                   f"after the {PG_TIMEOUT:g} s collective timeout)")


def check(args) -> None:
    """Raises ValueError / LaunchError for bad arguments; starts nothing."""
    from ..runtime.plan import resolve
    from .train import check_args

    if getattr(args, "out", None) is not None:  # named as the flag; check_args checks it again
        from ..paths import check_output_folder

        check_output_folder(args.out, "--out", empty=True, so="evidence from two runs never mixes")
    if args.capstone_command == "hang":
        from .hang import check_args as check_hang

        n = resolve(args.nprocs, args.backend).nprocs
        if args.culprit is not None and not args.culprit < n:
            raise ValueError(f"--culprit {args.culprit}: give a rank from 0 to {n - 1}.")
        if args.baseline is not None:  # a path: read here, named as the flag
            from ..flags import as_flag
            from .baseline import read_baseline

            try:
                read_baseline(args.baseline)
            except ValueError as e:
                raise ValueError(str(as_flag(e, "baseline", args.baseline, "--baseline"))) from None

        check_hang(args.bug, args.nprocs, args.backend, args.out, args.culprit, args.at_step,
                   args.baseline)
        return
    if args.capstone_command == "baseline":
        from .baseline import check_args as check_baseline
        from .train import WARMUP_STEPS

        if args.steps <= WARMUP_STEPS:  # named as the flag; check_baseline checks it again
            raise ValueError(f"--steps {args.steps}: a baseline needs at least "
                             f"{WARMUP_STEPS + 1} steps, so that its step time is from steps "
                             f"after the {WARMUP_STEPS} warm-up steps.")
        check_baseline(args.size, args.steps, args.nprocs, args.backend, args.out)
        _cpu_size(args.size, resolve(args.nprocs, args.backend).backend)
        return
    check_args(args.size, args.steps, args.batch, args.seq)
    _cpu_size(args.size, resolve(args.nprocs, args.backend).backend)


def _cpu_size(size: str, backend: str) -> None:
    """The sizes above tiny are for GPUs: on gloo (CPU) one runs for many minutes, silently."""
    if backend == "gloo" and size != "tiny":
        raise ValueError(f"--size {size} needs GPUs (the NCCL backend): on CPU (gloo) it runs "
                         f"for many minutes; use --size tiny on CPU.")


def run(args):
    if args.capstone_command == "hang":
        from .hang import hang

        return hang(args.bug, args.nprocs, args.backend, args.out, timeout=args.timeout,
                    culprit=args.culprit, at_step=args.at_step, baseline=args.baseline), 0
    if args.capstone_command == "baseline":
        from .baseline import baseline

        return baseline(args.size, args.steps, args.nprocs, args.backend, args.out), 0
    from .train import train

    return train(args.size, args.steps, args.nprocs, args.backend, args.batch, args.seq,
                 args.data), 0
