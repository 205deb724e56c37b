"""Rank functions for tests/runtime/test_reliability.py: ranks that start children, leave early,
exit in odd ways, or return values the parent cannot read."""

import os
import subprocess
import sys

import torch
import torch.distributed as dist


def spawn_children(pid_file: str) -> int:
    """Start a child in the rank's own group and one in a session of its own (a daemon),
    record every pid, return the rank's pid."""
    same = subprocess.Popen(["sleep", "1000"])
    own = subprocess.Popen(["sleep", "1001"], start_new_session=True)
    with open(f"{pid_file}.{dist.get_rank()}", "w") as f:
        f.write(f"{os.getpid()} {same.pid} {own.pid}\n")
    return os.getpid()


def leave_early(leaver: int):
    """``leaver`` returns at once; the others wait for it in an all_reduce that never comes."""
    t = torch.ones(1)
    dist.all_reduce(t)  # collective #1: everyone
    if dist.get_rank() == leaver:
        return "left"
    dist.all_reduce(t)  # collective #2: the leaver never issues it
    return t.item()


def sys_exit_on(codes: dict):
    dist.barrier()  # every rank is in fn when the first leaves: none is stopped while joining
    if dist.get_rank() in codes:
        sys.exit(codes[dist.get_rank()])
    return dist.get_rank()


def value_from_a_module_only_ranks_have(bad_rank: int, folder: str):
    """Rank ``bad_rank`` returns an instance of a class the parent cannot import."""
    if dist.get_rank() != bad_rank:
        return dist.get_rank() + 5
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "rank_only_mod.py"), "w") as f:
        f.write("class Thing:\n    pass\n")
    sys.path.insert(0, folder)
    import rank_only_mod

    return rank_only_mod.Thing()


def spawn_children_and_wait(pid_file: str):
    spawn_children(pid_file)
    import time

    time.sleep(1000)  # the parent is killed meanwhile


def child_then_die(pid_file: str, how: dict):
    """Start a child in a session of its own, record its pid, then die at once as ``how`` says
    for this rank: ``"kill"`` (SIGKILL) or an exit code for ``os._exit``."""
    child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    with open(f"{pid_file}.{dist.get_rank()}", "w") as f:
        f.write(f"{child.pid}\n")
    end = how[dist.get_rank()]
    if end == "kill":
        os.kill(os.getpid(), 9)
    os._exit(end)


def fork_raises_then_exit(code: int):
    """Rank 1 forks; the fork goes on in the rank's code and raises what looks like a lost peer
    (into the rank's error file: it inherited the path); then rank 1 calls ``os._exit(code)``.
    The other ranks return at once."""
    if dist.get_rank() != 1:
        return dist.get_rank()
    if os.fork() == 0:
        raise RuntimeError("a fork of rank 1: Connection closed by peer")
    import json
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(os.environ["TORCHELASTIC_ERROR_FILE"]) as f:
                json.load(f)
            break
        except (OSError, ValueError):
            time.sleep(0.01)
    os._exit(code)


CHAIN = ("import os, signal, sys, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "while True:\n"
         "    if os.fork():\n"
         "        os._exit(0)\n"
         "    os.setsid()\n"
         "    with open(sys.argv[1], 'a') as f:\n"
         "        f.write(f'{os.getpid()}\\n')\n"
         "    time.sleep(0.05)\n")


def start_a_reforking_chain(pid_file: str):
    """A child that ignores SIGTERM and keeps forking: each generation forks, the parent exits,
    the child starts a session of its own and writes its pid. Every pid it had is a stale one
    a moment later."""
    subprocess.Popen([sys.executable, "-c", CHAIN, f"{pid_file}.{dist.get_rank()}"])
    import time

    time.sleep(0.5)
    return dist.get_rank()


def a_reforking_chain_then_wait(pid_file: str):
    """:func:`start_a_reforking_chain`, then wait (for the parent to be killed)."""
    import time

    start_a_reforking_chain(pid_file)
    time.sleep(1000)


def raise_without_stderr(how: str):
    """Raise after taking away the rank's stderr: fds 1 and 2 closed, ``sys.stderr = None``, or
    both pointed at /dev/null."""
    if how == "close":
        os.close(1)
        os.close(2)
    elif how == "none":
        sys.stdout = sys.stderr = None
    else:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    raise ValueError("plain error")
