"""What more than one ``dtlab`` command takes, and each flag's own check.

Every command is its section's ``cli`` module -- ``add_arguments(parser)``, ``check(args)``,
``run(args)`` -- listed once in dtlab/cli.py. The flags several commands share come from the
parent parsers here (:func:`ranks`, :func:`sweep`, :func:`json_flag`, :func:`outputs`), built
fresh for each command so that one command's defaults never leak into another's.

A flag's check is its argparse ``type=``: argparse hands it the text, and a refusal is one line
on stderr -- ``dtlab bench: -n 0 must be a whole number >= 1 ...`` -- and exit status 2, before
anything runs (:class:`Parser`). The checks come from the library (:mod:`dtlab.limits`,
:mod:`dtlab.vocab`, :mod:`dtlab.runtime.plan`), called with the flag as the name, so the text a
Python caller reads (``iters=0 must be ...``) and the one a terminal shows (``-n 0 must be ...``)
are one message. Checks *between* flags (``-b`` larger than ``-e``) are the command's ``check``.
It sits beside the runtime (ARCHITECTURE.md): the leaves' checks at import, the runtime's when a
flag is read.
"""

from __future__ import annotations

import argparse
import re

from .limits import MAX_ITERS
from .limits import number as check_number
from .limits import whole as check_whole
from .vocab import DTYPES, check_dtype, format_size, parse_size

BACKENDS = ("auto", "nccl", "gloo")


class Parser(argparse.ArgumentParser):
    """argparse, with its refusals on one line: ``dtlab CMD: what is wrong`` (no usage block;
    ``--help`` has it) and exit status 2."""

    def error(self, message: str):
        # argparse says "argument -n/--iters: <ours>"; ours already names the flag (or FILE)
        message = re.sub(r"^argument (?:[^:]+/)?([^:/]+): (?=-|\1 )", "", message)
        if "--help" not in message and not message.startswith("-"):
            message += f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: {message}\n")


def as_flag(e: Exception, name: str, value, flag: str | None = None, typed: str | None = None
            ) -> argparse.ArgumentTypeError:
    """A library refusal of one value, ``name=value ...`` (the library was called with ``name``),
    as the terminal writes it: ``flag value ...`` (``flag`` defaults to ``name``; ``typed``, the
    text as the user typed it, is shown instead of the converted value)."""
    text = " ".join(str(e).split())
    said = f"{name}={value!r}"
    if text.startswith(said):
        text = f"{flag or name} {typed if typed is not None else repr(value)}{text[len(said):]}"
    return argparse.ArgumentTypeError(text)


def _number_text(text: str, flag: str, kind):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{flag} {text!r} is not a {'whole ' if kind is int else ''}number") from None


def _read(flag: str, kind, check, name: str | None = None):
    """``type=`` for a number: the text read as ``kind``, then ``check(value)``, a library check
    that names ``name`` (default the flag) in its refusal (LaunchError is a ValueError too)."""
    def convert(text: str):
        value = _number_text(text, flag, kind)
        try:
            return check(value)
        except ValueError as e:
            raise as_flag(e, name or flag, value, flag, text.strip()) from None
    return convert


def whole(flag: str, low: int, high: int, why: str = ""):
    """``type=`` for a count: a whole number in [low, high] (:func:`dtlab.limits.whole`)."""
    return _read(flag, int, lambda v: check_whole(flag, v, low, high, why))


def number(flag: str, low: float, high: float, why: str = ""):
    """``type=`` for a real number in [low, high] (:func:`dtlab.limits.number`)."""
    return _read(flag, float, lambda v: check_number(flag, v, low, high, why))


def seconds(flag: str = "--timeout"):
    """``type=`` for a launch's timeout: seconds from the runtime's shortest to its longest
    (:func:`dtlab.runtime.plan.check_timeout`), or ``inf`` for no limit (None)."""
    def convert(text: str) -> float | None:
        from .runtime.plan import MAX_TIMEOUT, MIN_TIMEOUT, check_timeout

        value = _number_text(text, flag, float)
        try:
            return check_timeout(value, flag)  # the runtime's rule; its words are Python's
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} {text.strip()}: give seconds from {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g}, "
                f"or inf for no limit") from None
    return convert


def nprocs(flag: str = "--nprocs", low: int = 1, why: str = ""):
    """``type=`` for a number of ranks on this machine (:func:`dtlab.runtime.plan.check_nprocs`),
    at least ``low`` (a collective needs 2)."""
    def check(value):
        from .runtime.plan import check_nprocs

        if value < low:  # the command's own minimum first: it says why
            raise argparse.ArgumentTypeError(f"{flag} {value}: {why or f'give at least {low}'}")
        return check_nprocs(value)
    return _read(flag, int, check, "nprocs")


def size(flag: str, low: int = 0, high: int | None = None, why: str = ""):
    """``type=`` for bytes as nccl-tests writes them: 8, 1K, 128M (:func:`dtlab.vocab.parse_size`),
    from ``low`` to ``high``."""
    def convert(text: str) -> int:
        try:
            n = parse_size(text, flag)
        except ValueError as e:
            raise as_flag(e, flag, text) from None
        if n < low or (high is not None and n > high):
            top = f" and at most {format_size(high)}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"{flag} {text}: give at least {format_size(low)} B"
                                             f"{top}" + (f" ({why})" if why else ""))
        return n
    return convert


def path(flag: str):
    """``type=`` for a path a person names: any text but the empty one (``''`` would read the
    current folder, or stand for the default); what it names is the command's check
    (:mod:`dtlab.paths`)."""
    def convert(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: an empty path; give a file or "
                                             f"folder")
        return text
    convert.is_path = True  # a path flag (tests/reliability/test_cli_paths.py lists them)
    return convert


def op_list(every, check, flag: str = "--op"):
    """``type=`` for "all" or a comma list of collectives: each name through ``check(name)`` (the
    command's own spellings; a ValueError naming ``op``), in order, each once. ``every()`` is
    the list "all" stands for (called when read: a section may import torch for it)."""
    def convert(text: str) -> list[str]:
        if text.strip().lower() == "all":
            return list(every())
        names = text.split(",")
        if not all(n.strip() for n in names):  # '' or 'a,,b': a slip
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: an empty name; give collectives "
                                             f"separated by commas, e.g. all_reduce,all_gather "
                                             f"(or all).")
        out = []
        for n in names:
            try:
                out.append(check(n.strip()))
            except ValueError as e:
                raise as_flag(e, "op", n.strip(), flag) from None
        return list(dict.fromkeys(out))
    return convert


def one_of(flag: str, choices, check=None):
    """``type=`` for a name from a list; ``check`` (vocab.check_op, check_dtype) also takes
    other spellings of the same name."""
    def convert(text: str) -> str:
        if check is not None:
            try:
                return check(text, tuple(choices), flag)
            except ValueError as e:
                raise as_flag(e, flag, text) from None
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{flag} {text!r} is not one of: "
                                             f"{', '.join(choices)}.")
        return text
    return convert


# --- parents: flags several commands share, one parser per command ------------------------------

def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def json_flag(help: str = "machine-readable output") -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--json", action="store_true", help=help)
    return p


def ranks(nprocs_default=None, timeout: float | None = 120, *, min_ranks: int = 1,
          why: str = "", nprocs_help: str = "ranks (default: GPUs, else 2)",
          timeout_help: str = "seconds before the run is a hang") -> argparse.ArgumentParser:
    """``--nprocs``, ``--backend``, and (unless ``timeout`` is None) ``--timeout``."""
    p = _parent()
    p.add_argument("--nprocs", type=nprocs("--nprocs", min_ranks, why), default=nprocs_default,
                   help=nprocs_help)
    p.add_argument("--backend", type=one_of("--backend", BACKENDS), default="auto",
                   help="auto, nccl or gloo")
    if timeout is not None:
        p.add_argument("--timeout", type=seconds(), default=timeout,
                       help=f"{timeout_help} (default {timeout:g})")
    return p


def sweep(op_type, ops, op: str = "all_reduce", min_bytes: str = "8",
          max_bytes: str = "128M", dtypes=tuple(DTYPES), largest: int | None = None
          ) -> argparse.ArgumentParser:
    """nccl-tests' sweep flags, spelled as nccl-tests spells them: -b -e -f -n -w -d; and --op
    (``op_type``: the command's own check of a comma list of ``ops``)."""
    p = _parent()
    p.add_argument("--op", type=op_type, default=op, help=f"{', '.join(ops)}, a comma list, or "
                   f"all (default {op})")
    p.add_argument("-b", "--minbytes", type=size("-b", 1, largest), default=min_bytes,
                   help=f"smallest size, e.g. 8, 1K (default {min_bytes})")
    p.add_argument("-e", "--maxbytes", type=size("-e", 1, largest, "no GPU holds a larger "
                   "buffer"), default=max_bytes,
                   help=f"largest size, e.g. 1G (default {max_bytes})")
    p.add_argument("-f", "--stepfactor", type=whole("-f", 2, 1024, "nccl-tests -f; for one size "
                   "give -b = -e"), default=2,
                   help="size multiplier (default 2)")
    p.add_argument("-n", "--iters", type=whole("-n", 1, MAX_ITERS), default=20,
                   help="timed calls per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=whole("-w", 0, MAX_ITERS), default=5,
                   help="untimed calls first (default 5)")
    p.add_argument("-d", "--datatype", type=one_of("-d", dtypes, check_dtype),
                   default="float32", help="float32, bfloat16, float16, ...")
    return p


def outputs(csv_help: str = "also write the table as CSV",
            plot_help: str = "also draw busbw vs size") -> argparse.ArgumentParser:
    """``--csv FILE`` and ``--plot FILE.png``: checked before anything is measured
    (dtlab/cli.py, ``check_outputs``)."""
    p = _parent()
    p.add_argument("--csv", metavar="FILE", help=csv_help)
    p.add_argument("--plot", metavar="FILE.png", help=plot_help)
    return p
