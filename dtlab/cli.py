"""``dtlab COMMAND ...``: the library from a terminal. This file is a registry and nothing else:
each command is its section's ``cli`` module, which owns these functions --

    parents()               (optional) the argparse parents of the flags it shares with other
                            commands, from dtlab.flags (--json, --nprocs/--backend/--timeout, the
                            sweep's -b -e -f -n -w -d)
    add_arguments(parser)   its own flags; each flag's check as its argparse type=, so a bad
                            value is refused by argparse
    check(args)             what needs more than one flag (``-b`` larger than ``-e``): raise
                            ValueError, and it becomes one line and exit status 2
    run(args)               the work: returns (report, exit status) -- the registry prints the
                            report (dtlab.reporting.emit: --json or text) -- or a status alone.
                            While a --json command runs, anything else it prints (ranks'
                            lines, progress) goes to stderr: stdout holds the JSON alone

Bad input -- a wrong flag value, a file that is not there -- is one line on stderr,
``dtlab CMD: what is wrong and what to do``, and exit status 2, before any rank starts
(ARCHITECTURE.md, "Contracts"). Only what ``check`` raises (ValueError, FileNotFoundError) and
:class:`dtlab.LaunchError` (raised before a launch by definition) is reported that way; a failure
while ranks run keeps its traceback: it is not the user's typo. Every path a command reads goes
through :mod:`dtlab.paths`; the files and folders it writes (``--csv``, ``--plot``,
``--log-dir``) are checked before it runs (:func:`check_outputs`).

Only the command that runs has its module imported (``dtlab --help`` imports none of them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import textwrap

from .flags import Parser
from .reporting import emit

# command: (its module, the line `dtlab --help` shows)
COMMANDS = {
    "doctor": ("dtlab.doctor", "check torch, GPUs, links, NCCL/gloo, py-spy, /dev/shm"),
    "check": ("dtlab.check.cli", "is this machine healthy for distributed training? software, "
              "GPUs, collectives, bandwidth vs the links, the failure path (dtlab.check)"),
    "validate": ("dtlab.collectives.cli", "check every collective on this machine's ranks: known "
                 "values, random vs a float64 reference, odd sizes (dtlab.collectives)"),
    "bench": ("dtlab.bench.cli", "nccl-tests-style busbw sweep of collectives (dtlab.bench)"),
    "nccl-tests": ("dtlab.bench.nccl_tests_cli", "read nccl-tests output (all_reduce_perf & co.)"),
    "topo": ("dtlab.topology.cli", "GPU/NIC topology (nvidia-smi topo -m, NCCL's topology XML, "
             "NVML, peer access) and the transport predicted per GPU pair (dtlab.topology)"),
    "tune": ("dtlab.tuning.cli", "busbw vs size under a grid of NCCL settings, each in fresh "
             "ranks, with NCCL's chosen algorithm/protocol/channels/transport (dtlab.tuning)"),
    "nccl-log": ("dtlab.nccl_log.cli", "read NCCL_DEBUG=INFO logs of all ranks: ranks, "
                 "transports, channels, env, collectives, where ranks diverge"),
    "hang": ("dtlab.hang.cli", "reproduce a distributed failure on purpose and record the "
             "evidence every tool gives (dtlab.hang)"),
    "diagnose": ("dtlab.hang.diagnose.cli", "name the cause of a hang or crash from an evidence "
                 "folder (NCCL logs, Flight Recorder, py-spy, run.json, torchrun/SLURM consoles)"),
    "parity": ("dtlab.parity.cli", "does DDP (or FSDP2) train like one process? a classic bug "
               "and its fix, compared step by step (dtlab.parity)"),
    "multinode": ("dtlab.multinode.cli", "multi-node launches: torchrun/sbatch lines for a "
                  "cluster, a rehearsal on this machine in network namespaces, faults and their "
                  "diagnosis (dtlab.multinode)"),
    "course": ("dtlab.course.cli", "the nbgrader course: release, validate, autograde, "
               "feedback, report (dtlab.course)"),
    "capstone": ("dtlab.capstone.cli", "section 08: train a small Llama with FSDP2 and measure "
                 "it (dtlab.capstone)"),
}


class BadInput(ValueError):
    """A command's arguments are wrong; nothing has run."""


@contextlib.contextmanager
def arguments():
    """Checks of a command's arguments go in here: ValueError and FileNotFoundError raised inside
    become :class:`BadInput` (one line, exit status 2)."""
    try:
        yield
    except BadInput:
        raise
    except (ValueError, FileNotFoundError) as e:
        raise BadInput(one_line(e)) from None


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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser (each module imported); with ``only``, the flags of that one
    command alone, the others listed, their modules not imported (``only=""``: none)."""
    p = Parser(prog="dtlab", description="Distributed-training lab: tools and course.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help) in COMMANDS.items():
        if only not in (None, name):
            sub.add_parser(name, help=help)
            continue
        mod = importlib.import_module(module)
        parents = mod.parents() if hasattr(mod, "parents") else []
        cmd = sub.add_parser(name, help=help, description=textwrap.fill(help, 78),
                             parents=parents, formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(cmd)
        if cmd.epilog:
            cmd.epilog = textwrap.fill(cmd.epilog, 78)
        cmd.set_defaults(module=mod)
        _name_each(cmd)
    return p


def _name_each(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's ``args.prog`` is its own name, ``dtlab capstone hang``: the prefix of
    its one-line refusals, from argparse and from ``check`` alike."""
    parser.set_defaults(prog=parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _name_each(child)


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = _command(argv)
    parser = build_parser(only=name if name in COMMANDS else "")
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a refused flag (2), said on stderr
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "module", None):
        print(f"dtlab: give a command: {', '.join(COMMANDS)} (dtlab --help says what each "
              f"does)", file=sys.stderr)
        return 2
    if extra:  # named by the (sub)command that was given them, not by `dtlab`
        print(f"{args.prog}: unrecognized arguments: {' '.join(extra)} (see {args.prog} "
              f"--help)", file=sys.stderr)
        return 2
    from .runtime.errors import LaunchError

    try:
        with arguments():
            check_outputs(args)
            check = getattr(args.module, "check", None)
            if check is not None:
                check(args)
        out = sys.stdout
        quiet = contextlib.redirect_stdout(sys.stderr) if getattr(args, "json", False) \
            else contextlib.nullcontext()
        with quiet:
            done = args.module.run(args)
        report, status = done if isinstance(done, tuple) else (None, done)
        if report is not None:
            emit(report, getattr(args, "json", False), file=out)
        return status or 0
    except (BadInput, LaunchError) as e:  # LaunchError: raised before any rank started
        print(f"{args.prog}: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the launch it interrupted has ended its ranks on the way out
        print(f"{args.prog}: stopped by Ctrl-C", file=sys.stderr)
        return 128 + 2  # as a shell reports a process ended by SIGINT
    except BrokenPipeError:  # `dtlab ... --json | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
