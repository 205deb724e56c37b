"""Every ``dtlab`` subcommand that reads a path x every kind of bad path (issue 23's table):
exit status 2, exactly one line on stderr naming the path, what is wrong and what to do, no
traceback, nothing started, within 5 s. And every path a subcommand writes x {its folder
missing, a folder (or a file), under a file, a place nobody can write, not empty}: the same,
before anything is measured.

The subcommands come from the real parser (argparse's subparsers, walked at collection): each
string option of each one is classified in :data:`SUBCOMMANDS` or :data:`NOT_PATHS`, so a new
subcommand or option fails here until someone says whether it reads or writes a path. Each case
runs in a fork of this process (:func:`forked.run_cli`), where starting a process raises and a
case that blocks (a FIFO) is killed at the limit: ~0.1 s a case, not a fresh interpreter's
seconds of ``import torch``.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

import pytest

from dtlab.cli import build_parser
from forked import run_cli, warm

LIMIT = 5.0  # seconds a refusal may take, start-up not counted
INPUTS = ["missing", "directory", "FIFO", "/dev/zero", "empty", "binary", "3 GB sparse",
          "nested JSON", "unreadable", "non-UTF-8 name"]
OUTPUTS = ["folder missing", "a folder", "a file", "under a file", "unwritable", "not empty",
           "FIFO nothing reads"]
NESTED = '{"nprocs": 2, "backend": "gloo", "ranks": ' + "[" * 200_000 + "]" * 200_000 + "}"
ROOT_REFUSED = "/proc/sys/vm/compact_memory"  # mode 0200: open for reading fails even for root
# "what to do": the one line ends in an instruction
TO_DO = re.compile(r"\b(give|pass|run|record|make|use|choose|point)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Reads:
    """The option is a path the command reads: a file, or (``inside`` given) a folder holding
    the file it reads; ``url``: given as ``sqlite:///PATH``."""
    inside: str | None = None
    url: bool = False


@dataclass(frozen=True)
class Writes:
    folder: bool = False
    empty: bool = False  # an existing folder must be empty (evidence of two runs never mixes)


@dataclass(frozen=True)
class Elsewhere:
    """A path this table does not run, and why."""
    why: str


GRADING = Elsewhere("a grading step's path: dtlab/course/cli.py beyond report is the grading "
                    "work's, not this table's")
# leaf subcommand -> (its argv up to the path, {option: what the path is}); {} reads no path
SUBCOMMANDS = {
    "doctor": ([], {}),
    "check": (["check"], {"--html": Writes()}), "validate": ([], {}), "parity": ([], {}),
    "multinode script": ([], {}), "multinode simulate": ([], {}), "capstone train": ([], {}),
    "topo": (["topo"], {"file": Reads()}),
    "nccl-tests": (["nccl-tests"], {"files": Reads()}),
    "nccl-log": (["nccl-log"], {"files": Reads()}),
    "diagnose": (["diagnose"], {"dir": Reads(inside="run.json")}),
    "bench": (["bench", "--backend", "gloo", "-e", "8"],
              {"--csv": Writes(), "--plot": Writes()}),
    "tune": (["tune", "--backend", "gloo", "-e", "1K"],
             {"--csv": Writes(), "--plot": Writes(), "--log-dir": Writes(folder=True)}),
    "hang": (["hang", "size_mismatch", "--backend", "gloo"],
             {"--out": Writes(folder=True, empty=True)}),
    "capstone baseline": (["capstone", "baseline", "--backend", "gloo"],
                          {"--out": Writes(folder=True, empty=True)}),
    "capstone hang": (["capstone", "hang", "--backend", "gloo"],
                      {"--out": Writes(folder=True, empty=True),
                       "--baseline": Reads(inside="baseline.json")}),
    "course report": (["course", "report"],
                      {"--db": Reads(url=True), "--root": Reads(inside="gradebook.db"),
                       "--csv": Writes(), "--notebooks": Elsewhere("report reads no notebook")}),
    "course grade": (["course", "grade", "--assignment", "02_bandwidth", "--out", "/nonexistent-out"],
                     {"notebook": Reads(), **{o: GRADING for o in ("--root", "--notebooks", "--out",
                                                                     "--source")}}),
    **{f"course {step}": ([], {opt: GRADING for opt in opts}) for step, opts in {
        "release": ["--root", "--notebooks", "--out"],
        "validate": ["--root", "--notebooks"],
        "autograde": ["--root", "--notebooks", "--db", "submissions"],
        "merge": ["--root", "--notebooks", "--db", "--results", "--submissions"],
        "feedback": ["--root", "--notebooks", "--db"]}.items()},
}
# string options that are not paths, wherever they appear
NOT_PATHS = {"--op", "--minbytes", "--maxbytes", "--datatype", "--backend", "--algo", "--proto",
             "--channels", "--min-channels", "--p2p-disable", "--shm-disable", "--buffsize",
             "--preset", "--comm", "--bug", "--dtype", "--master", "--ifname", "--mode",
             "--fault", "--size", "--data", "--assignment", "--student", "assignments",
             "--entry", "--level"}  # --entry: the module or script torchrun runs on the cluster's nodes


def _leaves(parser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for a in subs:
        for name, child in a.choices.items():
            yield from _leaves(child, path + (name,))


def _string_options(parser) -> list[str]:
    return [a.option_strings[-1] if a.option_strings else a.dest for a in parser._actions
            if a.nargs != 0 and (a.type in (None, str) or getattr(a.type, "is_path", False))
            and not a.choices
            and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


PARSER_LEAVES = dict(_leaves(build_parser()))


def _rows(kind: type, cases: list[str]):
    for leaf in PARSER_LEAVES:
        if leaf not in SUBCOMMANDS:
            continue  # test_every_subcommand_and_option_is_classified says so
        roles = SUBCOMMANDS[leaf][1]
        elsewhere = {o: r for o, r in roles.items() if isinstance(r, Elsewhere)}
        if elsewhere and kind is Reads:  # said once per subcommand, in the reads table
            why = "; ".join(f"{', '.join(o for o in elsewhere if elsewhere[o] == r)}: {r.why}"
                            for r in dict.fromkeys(elsewhere.values()))
            yield pytest.param(leaf, None, None, None, id=f"{leaf} not run",
                               marks=pytest.mark.skip(reason=f"dtlab {leaf} {why}"))
        for opt, role in roles.items():
            for case in cases if isinstance(role, kind) else ():
                if kind is Reads or _applies(role, case):
                    yield pytest.param(leaf, opt, role, case, id=f"{leaf} {opt} {case}")


def _applies(role: Writes, case: str) -> bool:
    if case == "not empty":
        return role.empty
    if case in ("folder missing", "FIFO nothing reads"):  # a folder is made, parents and all
        return not role.folder
    return case != ("a file" if not role.folder else "a folder")


@pytest.fixture(scope="module")
def things(tmp_path_factory):
    """One of each bad thing; made once (the sparse file costs no disk)."""
    warm()
    tmp = tmp_path_factory.mktemp("bad")
    os.mkfifo(tmp / "fifo")  # reading it would wait for a writer forever
    (tmp / "empty").write_bytes(b"")
    (tmp / "binary").write_bytes(bytes(range(256)) * 16)
    with open(tmp / "sparse", "wb") as f:
        f.truncate(3 << 30)
    (tmp / "nested.json").write_text(NESTED)
    (tmp / os.fsdecode(b"bad\xffname")).write_text("nothing any command reads\n")
    (tmp / "regular").write_text("a file\n")
    (tmp / "full").mkdir()
    (tmp / "full" / "old.txt").write_text("an earlier run's\n")
    return tmp


def _unreadable(tmp) -> str:
    """A file this process cannot read: chmod 000, or for root (which reads those anyway) a
    /proc file that refuses root too."""
    path = tmp / "unreadable"
    if not path.exists():
        path.write_text("secret\n")
        path.chmod(0)
    for candidate in (str(path), ROOT_REFUSED):
        try:
            open(candidate).close()
        except PermissionError:
            return candidate
        except OSError:
            continue
    pytest.skip("this user reads a chmod 000 file and the /proc file that refuses root is "
                "absent: no unreadable file to test with")


def _input(things, case: str) -> str:
    """The bad thing itself, as a path."""
    if case == "unreadable":
        return _unreadable(things)
    return {"missing": str(things / "no-such-folder" / "no-such-file"),
            "directory": str(things / "full"), "FIFO": str(things / "fifo"),
            "/dev/zero": "/dev/zero", "empty": str(things / "empty"),
            "binary": str(things / "binary"), "3 GB sparse": str(things / "sparse"),
            "nested JSON": str(things / "nested.json"),
            "non-UTF-8 name": str(things / os.fsdecode(b"bad\xffname"))}[case]


def _make(path, case: str, things) -> None:
    """The bad thing itself at ``path`` (a file a command finds in a folder it was given)."""
    if case == "FIFO":
        os.mkfifo(path)
    elif case == "/dev/zero":
        os.symlink("/dev/zero", path)
    elif case == "unreadable":
        bad = _input(things, case)
        if bad == ROOT_REFUSED:  # root reads a chmod 000 file: a link to the /proc file instead
            os.symlink(bad, path)
        else:
            path.write_text("secret\n")
            path.chmod(0)
    elif case == "3 GB sparse":
        with open(path, "wb") as f:
            f.truncate(3 << 30)
    else:
        path.write_bytes(open(_input(things, case), "rb").read())


def _reads_argument(things, tmp_path, role: Reads, case: str) -> str:
    if role.inside is None:
        path = _input(things, case)
    elif case == "missing":
        path = str(things / "no-such-folder")
    else:  # a folder: empty, or holding the bad thing under the name the command reads
        folder = tmp_path / (os.fsdecode(b"bad\xffdir") if case == "non-UTF-8 name" else "given")
        folder.mkdir()
        if case not in ("directory", "non-UTF-8 name"):
            _make(folder / role.inside, case, things)
        path = str(folder)
    return "sqlite:///" + path if role.url else path


def _writes_argument(things, case: str, role: Writes) -> str:
    name = "out" if role.folder else "out.csv"
    return {"folder missing": f"/nonexistent-dtlab-folder/{name}", "a folder": str(things),
            "a file": str(things / "regular"), "under a file": str(things / "regular" / name),
            "unwritable": f"/proc/dtlab-{name}", "not empty": str(things / "full"),
            "FIFO nothing reads": str(things / "fifo")}[case]


def _argv(leaf: str, opt: str, value: str) -> list[str]:
    base = list(SUBCOMMANDS[leaf][0])
    return base + ([value] if not opt.startswith("-") else [opt, value])


def _names(line: str, value: str) -> bool:
    """The line names the path: its last part, as shown escaped or as given."""
    last = os.path.basename(value.rstrip("/").removeprefix("sqlite:///")) or value
    forms = {last, os.fsencode(last).decode("utf-8", "backslashreplace"),
             last.encode("utf-8", "backslashreplace").decode()}
    return any(f in line for f in forms)


def _check(leaf: str, argv: list[str], value: str) -> None:
    got = run_cli(argv, LIMIT)
    what = f"dtlab {' '.join(argv)}"
    assert got.status != "killed at the limit", f"{what}: did not return within {LIMIT} s"
    assert "Traceback" not in got.stderr, f"{what}:\n{got.stderr}"
    lines = got.stderr.splitlines()
    assert got.status == 2 and len(lines) == 1, f"{what}: exit {got.status}\n{got.stderr}"
    line = lines[0]
    assert line.startswith(f"dtlab {leaf.split()[0]}") and _names(line, value), f"{what}: {line}"
    assert TO_DO.search(line), f"{what}: says what is wrong but not what to do: {line}"
    assert got.stdout == "", f"{what}: printed {got.stdout!r}"
    assert got.seconds < LIMIT


@pytest.mark.parametrize("leaf, opt, role, case", list(_rows(Reads, INPUTS)))
def test_a_bad_path_to_read_is_one_line_and_exit_2(leaf, opt, role, case, things, tmp_path):
    value = _reads_argument(things, tmp_path, role, case)
    _check(leaf, _argv(leaf, opt, value), value)


@pytest.mark.parametrize("leaf, opt, role, case", list(_rows(Writes, OUTPUTS)))
def test_a_bad_path_to_write_is_refused_before_anything_runs(leaf, opt, role, case, things):
    value = _writes_argument(things, case, role)
    _check(leaf, _argv(leaf, opt, value), value)


def test_every_subcommand_and_option_is_classified():
    for leaf, parser in PARSER_LEAVES.items():
        assert leaf in SUBCOMMANDS, (
            f"dtlab {leaf} is new: add it to SUBCOMMANDS in {__file__} with the options that "
            f"read or write a path ({{}} if none), so the bad-path table covers it")
        paths = SUBCOMMANDS[leaf][1]
        for opt in _string_options(parser):
            assert opt in paths or opt in NOT_PATHS, (
                f"dtlab {leaf} {opt}: say whether it is a path (SUBCOMMANDS) or not (NOT_PATHS)")
        assert set(paths) <= set(_string_options(parser)), f"dtlab {leaf}: {set(paths)}"


def test_a_gradebook_url_nothing_can_open_is_one_line(things):
    """``--db bogus://x`` was 38 lines of SQLAlchemy traceback."""
    _check("course report", ["course", "report", "--db", "bogus://x"], "bogus://x")


@pytest.mark.parametrize("name", ["dtlab.paths", "dtlab.limits"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
