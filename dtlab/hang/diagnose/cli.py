"""``dtlab diagnose DIR [--json]``: the cause of a hang or crash named from an evidence folder
(:func:`dtlab.hang.diagnose.diagnose`). Exit status 0 no failure found, 1 failure found (named
in the output), 2 no usable evidence (or bad arguments)."""

from __future__ import annotations


def parents() -> list:
    from ...flags import json_flag

    return [json_flag("machine-readable verdict")]


def add_arguments(p) -> None:
    from ...flags import path

    p.add_argument("dir", type=path("DIR"), help="the folder to read (any mix of evidence files)")
    p.epilog = ("exit status: 0 no failure found, 1 failure found (named in the output), 2 no "
                "usable evidence (or bad arguments)")


def check(args) -> None:
    """No usable evidence is the user's to fix: one line, exit status 2."""
    from .load import NoEvidence
    from .pipeline import diagnose

    try:
        args.diagnosis = diagnose(args.dir)
    except NoEvidence as e:
        raise ValueError(str(e)) from None


def run(args):
    return args.diagnosis, 0 if args.diagnosis.failure_class == "no_failure" else 1
