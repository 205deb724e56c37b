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
import json


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse prints the one line and exits 2)."""
    import math

    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="capstone_command", metavar="{train,baseline,hang}",
                             required=True)
    t = sub.add_parser("train", help="train the Llama-style model with FSDP2; loss, step time, "
                       "tokens/s, peak memory and MFU per rank")
    t.add_argument("--size", default="tiny", help="tiny (CPU, seconds), small, 1b (GPUs); "
                   "default tiny")
    t.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    t.add_argument("--nprocs", type=int, default=None,
                   help="ranks (default: one per GPU, else 2)")
    t.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    t.add_argument("--batch", type=int, default=None, help="sequences per rank per step "
                   "(default: the size's)")
    t.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the "
                   "size's)")
    t.add_argument("--data", default="text", help="text (stdlib sources as bytes, default) or "
                   "random (uniform ids, as the benchmark)")
    t.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    from .baseline import STEPS

    b = sub.add_parser("baseline", help="a clean run recorded before anything breaks: NCCL "
                       "logs (NCCL_DEBUG=INFO from launch), rings and trees, a throughput table, "
                       "saved as an evidence folder")
    b.add_argument("--size", default="tiny", help="tiny, small, 1b (default tiny)")
    b.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    b.add_argument("--nprocs", type=int, default=None,
                   help="ranks (default: one per GPU, else 2)")
    b.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    b.add_argument("--out", default=None, help="baseline folder, new or empty (default: a new "
                   "temporary folder)")
    b.add_argument("--json", action="store_true", help="machine-readable baseline on stdout")
    from .hang import BUGS, MAX_STEP, PG_TIMEOUT, TIMEOUT

    h = sub.add_parser("hang", help="break the training job on purpose (a hang or an error for "
                       "a real reason), collect the evidence, print dtlab's diagnosis")
    h.add_argument("--bug", default="extra_metric", help=f"{', '.join(BUGS)} "
                   "(default extra_metric)")
    h.add_argument("--nprocs", type=int, default=None,
                   help="ranks, at least 2 (default: one per GPU, else 2)")
    h.add_argument("--backend", default="auto", help="auto, nccl or gloo")
    h.add_argument("--out", default=None, help="evidence folder, new or empty (default: a new "
                   "temporary folder)")
    h.add_argument("--culprit", type=int, default=None, help="the rank that does it wrong "
                   "(default 1)")
    h.add_argument("--at-step", type=int, default=None, dest="at_step",
                   help=f"the step it goes wrong, 1 to {MAX_STEP} (default 3)")
    h.add_argument("--baseline", default=None, help="a folder from dtlab capstone baseline: "
                   "say what the broken run did differently")
    h.add_argument("--timeout", type=_seconds, default=TIMEOUT, help=f"seconds the whole job may "
                   f"take before dtlab stops it (default {TIMEOUT:g}; the hang itself shows after "
                   f"the {PG_TIMEOUT:g} s collective timeout)")
    h.add_argument("--json", action="store_true", help="machine-readable report on stdout")


def check(args) -> None:
    """Raises ValueError / LaunchError for bad arguments; starts nothing."""
    from ..runtime.plan import resolve
    from .train import check_args

    if args.capstone_command == "hang":
        from .hang import check_args as check_hang

        check_hang(args.bug, args.nprocs, args.backend, args.out, args.culprit, args.at_step,
                   args.baseline)
        return
    if args.capstone_command == "baseline":
        from .baseline import check_args as check_baseline

        check_baseline(args.size, args.steps, args.nprocs, args.backend, args.out)
        return
    check_args(args.size, args.steps, args.batch, args.seq)
    if args.data not in ("text", "random"):
        raise ValueError(f"data={args.data!r} is not one of: text, random.")
    resolve(args.nprocs, args.backend)


def run(args) -> int:
    if args.capstone_command == "hang":
        from .hang import format_report, hang

        report = hang(args.bug, args.nprocs, args.backend, args.out, timeout=args.timeout,
                      culprit=args.culprit, at_step=args.at_step, baseline=args.baseline)
        print(json.dumps(report, indent=1) if args.json else format_report(report))
        return 0
    if args.capstone_command == "baseline":
        from .baseline import baseline, format_baseline

        b = baseline(args.size, args.steps, args.nprocs, args.backend, args.out)
        print(json.dumps(b, indent=1) if args.json else format_baseline(b))
        return 0
    from .train import format_summary, train

    summary = train(args.size, args.steps, args.nprocs, args.backend, args.batch, args.seq,
                    args.data)
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0
