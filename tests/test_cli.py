"""``dtlab CMD`` with bad input: one line on stderr naming what is wrong, exit status 2, no
traceback, nothing launched (ARCHITECTURE.md, "Contracts"). Every case fails before a rank could start. Each
command's first case runs as a real ``python -m dtlab`` (all at once: ~0.5 s of start-up each);
every case also runs in this process through :func:`dtlab.cli.main`, which is what costs nothing."""

import os
import subprocess
import sys

import pytest

from dtlab.cli import main

CASES = {  # id: (argv, words the one line must hold)
    "bench-op": (["bench", "--op", "nope"], "--op 'nope' is not one of: all_reduce"),
    "bench-size": (["bench", "-b", "1X"], "-b '1X' is not a size"),
    "bench-order": (["bench", "-b", "1G", "-e", "8"], "swap them"),
    "bench-nprocs": (["bench", "--nprocs", "1"], "--nprocs 1: a bandwidth sweep needs at least 2"),
    "bench-dtype": (["bench", "-d", "float7"], "-d 'float7' is not one of: float32"),
    "bench-iters": (["bench", "-n", "0"], "-n 0 must be a whole number >= 1"),
    "bench-backend": (["bench", "--backend", "foo"], "--backend 'foo' is not one of"),
    "bench-timeout": (["bench", "--timeout", "nan"], "--timeout nan: give seconds from 0.1"),
    "hang-nprocs": (["hang", "size_mismatch", "--nprocs", "-1"], "--nprocs -1: a distributed "
                    "failure needs at least 2 ranks"),
    "hang-timeout": (["hang", "size_mismatch", "--timeout", "1e6"], "--timeout 1e6 must be a "
                     "number >= 0.1 and <= 86400"),
    "bench-unknown-flag": (["bench", "--foo"], "unrecognized arguments: --foo"),
    "bench-too-big": (["bench", "-e", "2T"], "-e 2T: give at least 1 B and at most 1T"),
    "bench-empty-op": (["bench", "--op", "all_reduce,,x"], "--op 'all_reduce,,x': an empty name"),
    "bench-nccl": (["bench", "--backend", "nccl"], "--backend nccl needs CUDA GPUs"),
    "validate-timeout": (["validate", "--timeout", "1e30"], "--timeout 1e30: give seconds from"),
    "parity-fix": (["parity", "--fix"], "--fix runs a bug's fix: name the bug with --bug"),
    "tune-preset-named": (["tune", "--preset", "nope"], "--preset nope: 'nope' is not a preset"),
    "nccl-log-empty": (["nccl-log", ""], "FILE '': an empty path"),
    "hang-two": (["hang", "size_mismatch", "--nprocs", "1"], "--nprocs 1: a distributed failure "
                 "needs at least 2 ranks"),
    "hang-kind": (["hang", "nope"], "invalid choice: 'nope'"),
    "hang-delay": (["hang", "straggler", "--delay", "inf"], "--delay inf must be a number"),
    "hang-backend": (["hang", "size_mismatch", "--backend", "foo"], "--backend 'foo'"),
    "hang-out": (["hang", "size_mismatch", "--out", "{full}"], "new or empty folder"),
    "tune-algo": (["tune", "--algo", "Foo"], "NCCL_ALGO='Foo'"),
    "tune-size": (["tune", "-e", "1Q"], "-e '1Q' is not a size"),
    "tune-nprocs": (["tune", "--nprocs", "1"], "at least 2 ranks"),
    "tune-preset": (["tune", "--preset", "nope"], "nope"),
    "nccl-log-missing": (["nccl-log", "/nonexistent"], "no such file: give the log files"),
    "nccl-log-fifo": (["nccl-log", "{fifo}"], "not a regular file"),
    "nccl-log-not-a-log": (["nccl-log", "{text}"], "no NCCL log lines"),
    "nccl-tests-device": (["nccl-tests", "/dev/null"], "not a regular file"),
    "nccl-tests-missing": (["nccl-tests", "/nonexistent"], "no such file"),
    "diagnose-missing": (["diagnose", "/nonexistent"], "is not a folder"),
    "parity-precision-bug": (["parity", "--precision", "--bug", "sum_loss"], "takes no --bug"),
    "parity-steps": (["parity", "--steps", "x"], "--steps 'x' is not a whole number"),
    "validate-op": (["validate", "--op", "all_reduce,nope"], "--op 'nope' is not one of"),
    "capstone-size": (["capstone", "train", "--size", "huge"], "--size 'huge' is not one of"),
    "check-nprocs": (["check", "--nprocs", "1"], "--nprocs 1: a check of collectives"),
}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "full").mkdir()
    (tmp / "full" / "old.txt").write_text("evidence of an earlier run\n")
    os.mkfifo(tmp / "fifo")  # reading it would block forever: must be refused unread
    (tmp / "text.log").write_text("just some text, no NCCL line\n")
    return {"full": tmp / "full", "fifo": tmp / "fifo", "text": tmp / "text.log"}


def _argv(case, paths):
    return [str(a).format(**paths) for a in CASES[case][0]]


def _check(case, rc, stdout, stderr):
    command, words = CASES[case][0][0], CASES[case][1]
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert rc == 2 and len(lines) == 1, (rc, stderr)
    assert lines[0].startswith(f"dtlab {command}") and words in lines[0], lines[0]
    assert stdout == ""  # nothing started, nothing to report


@pytest.fixture(scope="module")
def answers(paths):
    """The first case of each command as a real process, all started at once, then collected."""
    firsts = {}
    for case, (argv, _) in CASES.items():
        firsts.setdefault(argv[0], case)
    procs = {case: subprocess.Popen([sys.executable, "-m", "dtlab", *_argv(case, paths)],
                                    text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for case in firsts.values()}
    out = {}
    for case, p in procs.items():
        try:
            stdout, stderr = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out[case] = (p.returncode, stdout, stderr)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_status_2(case, paths, capsys):
    rc = main(_argv(case, paths))
    captured = capsys.readouterr()
    _check(case, rc, captured.out, captured.err)


@pytest.mark.slow
def test_the_same_from_a_terminal(answers):
    assert len(answers) == len({argv[0] for argv, _ in CASES.values()})  # one per command
    for case, (rc, stdout, stderr) in answers.items():
        _check(case, rc, stdout, stderr)


def test_every_command_is_a_module_with_the_registry_shape():
    """dtlab/cli.py lists each command's module; each has add_arguments and run (check and
    parents where it has them), and only the command that runs is imported."""
    import importlib

    from dtlab.cli import COMMANDS, build_parser

    for name, (module, _) in COMMANDS.items():
        mod = importlib.import_module(module)
        assert callable(mod.add_arguments) and callable(mod.run), name
    parser = build_parser(only="topo")
    assert parser.parse_args(["topo"]).module.__name__ == "dtlab.topology.cli"


def _options(parser) -> dict:
    """{command path: its option strings}, subcommands included (course, multinode, capstone)."""
    import argparse

    out = {}

    def walk(p, path):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out[path] = {o for a in p._actions for o in a.option_strings}
        for s in subs:
            for name, child in s.choices.items():
                walk(child, f"{path} {name}".strip())

    walk(parser, "")
    return out


def test_every_reporting_command_takes_json():
    from dtlab.cli import build_parser

    writers = {  # commands whose output is a file or a notebook, not a report
        "course release", "course validate", "course autograde", "course grade", "course merge",
        "course feedback"}
    missing = [c for c, opts in _options(build_parser()).items()
               if c not in writers and "--json" not in opts]
    assert missing == []


def test_argparse_errors_are_one_line_and_status_2():
    p = subprocess.run([sys.executable, "-m", "dtlab", "hang", "nope"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "invalid choice: 'nope'" in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def test_diagnose_help_states_the_exit_statuses(capsys):
    assert main(["diagnose", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "0 no failure found, 1 failure found" in text and "2 no usable evidence" in text


def test_a_failure_during_the_run_keeps_its_traceback(monkeypatch):
    """Only argument checks become exit status 2: a ValueError from inside the sweep is a bug
    or a real failure, and must not be reported as the user's bad input."""
    import dtlab.bench

    def failing_sweep(*args, **kwargs):
        raise ValueError("raised while the ranks ran")

    monkeypatch.setattr(dtlab.bench, "sweep", failing_sweep)
    with pytest.raises(ValueError, match="while the ranks ran"):
        main(["bench", "-b", "8", "-e", "8", "--nprocs", "2", "--backend", "gloo"])


@pytest.mark.parametrize("cmd", [["bench", "-e", "8"], ["tune", "-e", "1K"]])
def test_a_plot_name_matplotlib_cannot_write_is_refused_before_measuring(cmd, tmp_path, capsys):
    """matplotlib picks the format by the extension, after the sweep: a .txt was a traceback
    once the measuring was done."""
    assert main([*cmd, "--backend", "gloo", "--plot", str(tmp_path / "busbw.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".txt is not a picture format" in err


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(tmp_path, no_orphans):
    """Ctrl-C while `dtlab hang` waits on its stuck ranks: one line, the shell's 130, ranks gone
    (it printed a KeyboardInterrupt traceback: fresh #23 probe, m3)."""
    import signal
    import time

    import psutil

    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from dtlab.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "hang", "p2p_deadlock", "--nprocs", "2",
                             "--backend", "gloo", "--timeout", "60", "--out", str(tmp_path / "e")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ranks_up():
            try:
                return any("dtlab.runtime.worker" in " ".join(c.cmdline())  # cold, or warm:
                           or c.name().startswith("dtlab-rank")
                           for c in psutil.Process(proc.pid).children(recursive=True))
            except psutil.Error:
                return False

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ranks_up():
            time.sleep(0.1)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "dtlab hang: stopped by Ctrl-C", err
