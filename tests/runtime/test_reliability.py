"""Nothing survives, nothing listens beyond loopback, bad input is refused: the runtime's
reliability contract (dtlab/runtime/README.md, "Nothing survives"), each item as it was once seen to fail."""

import glob
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import dtlab
from conftest import pid_gone
from reliability_fns import (child_then_die, fork_raises_then_exit, leave_early,
                             raise_without_stderr, spawn_children, start_a_reforking_chain,
                             sys_exit_on,
                             value_from_a_module_only_ranks_have)

pytestmark = pytest.mark.usefixtures("no_orphans")
HERE = os.path.dirname(os.path.abspath(__file__))


def _pids(pid_file: str, n: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = glob.glob(pid_file + ".*")
        if len(files) == n and all(open(f).read().endswith("\n") for f in files):
            return [int(p) for f in files for p in open(f).read().split()]
        time.sleep(0.1)
    raise AssertionError(f"ranks did not report their children in {timeout} s")


def _chain_alive(pid_file: str) -> list[int]:
    """The pids of start_a_reforking_chain's generations (both ranks') still running."""
    pids = [int(x) for f in glob.glob(pid_file + ".*") for x in open(f).read().split()]
    return [p for p in pids if not pid_gone(p, 0.01)]


def _end_chain(pid_file: str, rounds: int) -> None:
    """A survivor keeps changing its pid: kill what is alive, again, until none is left."""
    for _ in range(rounds):
        for p in _chain_alive(pid_file):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


# -- the parent dies ---------------------------------------------------------------------------

PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    import dtlab
    from reliability_fns import spawn_children, spawn_children_and_wait
    if {pool}:
        pool = dtlab.Pool(nprocs=2, backend="gloo")
        pool.run(spawn_children, {pid_file!r})
        print("RUN_DIR", pool._run_dir, flush=True)
        time.sleep(1000)
    else:
        dtlab.run(spawn_children_and_wait, {pid_file!r}, nprocs=2, backend="gloo")
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig,pool", [(signal.SIGTERM, True), (signal.SIGKILL, False)],
                         ids=["SIGTERM-pool", "SIGKILL-run"])
def test_killed_parent_leaves_no_rank_no_grandchild_no_folder(tmp_path, sig, pool):
    pid_file = str(tmp_path / "pids")
    env = dict(os.environ, DTLAB_RUN_ROOT=str(tmp_path / "runs"), DTLAB_OUTPUT="none")
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(
        here=HERE, pool=pool, pid_file=pid_file)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        pids = _pids(pid_file, 2)
        parent.send_signal(sig)
        parent.wait(10)
        left = [p for p in pids if not pid_gone(p, timeout=5)]
        assert not left, f"still running after the parent's {sig.name}: {left}"
        deadline = time.monotonic() + 5
        while os.listdir(tmp_path / "runs") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.listdir(tmp_path / "runs") == [], "the run folder outlived the parent"
    finally:
        parent.kill()
        parent.wait()
        for p in psutil.process_iter(["cmdline"]):  # its reaper, if the test failed early
            cmd = " ".join(p.info["cmdline"] or [])
            if "reaper" in cmd and str(tmp_path) in cmd:
                p.kill()


CHAIN_PARENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    import dtlab
    from reliability_fns import a_reforking_chain_then_wait
    dtlab.run(a_reforking_chain_then_wait, {pid_file!r}, nprocs=2, backend="gloo")
""")


@pytest.mark.slow
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_reforking_chain_ends_when_its_launcher_is_killed(tmp_path, zygote):
    """The parent SIGKILLed while a rank's re-forking chain runs: the reaper used to kill each
    rank's group at once -- its guard with it -- and the chain's newest generation, in a session
    of its own and no longer below any guard, lived on under init (#23, the reaper's path; 2 of
    3 runs with ranks started as fresh interpreters)."""
    pid_file = str(tmp_path / "pids")
    env = dict(os.environ, DTLAB_RUN_ROOT=str(tmp_path / "runs"), DTLAB_OUTPUT="none",
               DTLAB_RANK_ZYGOTE=zygote)
    parent = subprocess.Popen([sys.executable, "-c", CHAIN_PARENT.format(here=HERE, pid_file=pid_file)],
                              env=env)
    try:
        _pids(pid_file, 2)
        time.sleep(0.3)
        parent.kill()
        parent.wait(10)
        time.sleep(3.0)  # the reaper and the guards have had their turn; a survivor forks on
        left = _chain_alive(pid_file)
    finally:
        parent.kill()
        parent.wait()
        _end_chain(pid_file, 100)
    assert left == [], "a re-forking chain outlived its killed launcher"


FORKING_PARENT = textwrap.dedent("""
    import os, sys, time
    from dtlab.runtime import reaper
    proc = reaper.start({run_dir!r})
    child = os.fork()  # as multiprocessing's fork does: every fd, the reaper's pipe too
    if child == 0:
        time.sleep(1000)
        os._exit(0)
    print(proc.pid, child, flush=True)
    time.sleep(1000)
""")


def test_reaper_sees_its_parent_die_though_a_forked_child_holds_the_pipe(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", FORKING_PARENT.format(run_dir=str(run_dir))],
                              stdout=subprocess.PIPE, text=True)
    reaper_pid, child = map(int, parent.stdout.readline().split())
    try:
        parent.kill()
        parent.wait()
        assert pid_gone(reaper_pid, 5), "the reaper waits for an EOF the forked child holds back"
        assert not run_dir.exists(), "the run folder (and its control.key) outlived the parent"
    finally:
        os.kill(child, signal.SIGKILL)
        if not pid_gone(reaper_pid, 0):
            os.kill(reaper_pid, signal.SIGKILL)


def test_grandchildren_in_their_own_session_end_with_the_run(tmp_path):
    pid_file = str(tmp_path / "pids")
    dtlab.run(spawn_children, pid_file, nprocs=2, backend="gloo")
    pids = _pids(pid_file, 2, timeout=1)
    assert all(pid_gone(p) for p in pids)


def test_a_rank_that_dies_at_once_takes_its_children_along(tmp_path):
    """SIGKILL or os._exit(3) right after starting a child in a session of its own: the rank
    ends nothing itself, and the reaper had not seen the child yet (its guard has)."""
    pid_file = str(tmp_path / "pids")
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(child_then_die, pid_file, {0: "kill", 1: 3}, nprocs=2, backend="gloo")
    assert ei.value.exit_codes == {0: -signal.SIGKILL, 1: 3}  # as the ranks ended, guard or not
    children = _pids(pid_file, 2, timeout=1)
    left = [p for p in children if not pid_gone(p, 0.5)]
    for p in left:  # re-parented to init: no fixture would find them
        os.kill(p, signal.SIGKILL)
    assert left == [], "a rank's child outlived the run"


def test_a_reforking_chain_that_ignores_sigterm_ends_with_the_run(tmp_path):
    """Fork, parent exits, child setsid, again every 50 ms: a kill of one look's pids misses the
    newest generation, which then lives on under init (fresh #23 probe, F1)."""
    pid_file = str(tmp_path / "pids")
    assert dtlab.run(start_a_reforking_chain, pid_file, nprocs=2, backend="gloo").values == [0, 1]
    time.sleep(0.3)  # a surviving chain would have forked again by now
    left = _chain_alive(pid_file)
    _end_chain(pid_file, 50)
    assert left == [], "a re-forking chain outlived the run"


@pytest.mark.parametrize("how", ["close", "none", "devnull"])
def test_an_exception_without_stderr_is_still_the_exception(how):
    """The rank's exception reaches the RankError and the diagnosis through its error file, not
    its output (fresh #23 probe, F4: 'without a Python exception', diagnosis rank_died)."""
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(raise_without_stderr, how, nprocs=2, backend="gloo")
    e = ei.value
    assert e.failure_list[0].summary == "ValueError: plain error", str(e)
    assert e.diagnosis is not None and e.diagnosis.failure_class == "exception", e.diagnosis


# -- one pool: loopback listeners, squatters, threads, close ------------------------------------

def _squat(root: str, stop: threading.Event, held: list) -> None:
    """Connect to any pool's control socket as soon as it appears, and say nothing."""
    while not stop.is_set():
        for path in glob.glob(os.path.join(root, "*", "control.sock")):
            if path not in [p for p, _ in held]:
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(path)
                    held.append((path, s))
                except OSError:
                    s.close()
        time.sleep(0.005)


def _control_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dtlab-control")]


@pytest.mark.slow
def test_pool_listens_on_loopback_only_ignores_squatters_and_leaks_no_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("DTLAB_RUN_ROOT", str(tmp_path))
    stop, held = threading.Event(), []
    squatter = threading.Thread(target=_squat, args=(str(tmp_path), stop, held), daemon=True)
    squatter.start()
    try:
        t0 = time.monotonic()
        pool = dtlab.Pool(nprocs=2, backend="gloo", start_timeout=60)
        assert time.monotonic() - t0 < 30, "a silent connection stalled the pool's start"
        assert held, "the test never reached the control socket"
        pool.restart()
        pool.restart()
        pid_file = str(tmp_path / "pids")
        pool.run(spawn_children, pid_file)
        pids = [p.pid for p in [psutil.Process()] + [psutil.Process(s["pid"])
                                                     for s in pool.status()]]
        listening = [(pid, c.laddr) for pid in pids
                     for c in psutil.Process(pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening, "no listener found: the check would prove nothing"
        beyond = [(pid, a) for pid, a in listening
                  if a.ip not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
        assert not beyond, f"listening beyond loopback: {beyond}"
        grandchildren = _pids(pid_file, 2, timeout=1)
        pool.close()
        assert all(pid_gone(p) for p in grandchildren)
    finally:
        stop.set()
        squatter.join()
        for _, s in held:
            s.close()
    assert _control_threads() == [], f"threads left by the control server: {_control_threads()}"


# -- bad input, refused before anything starts ---------------------------------------------------

@pytest.mark.parametrize("var", ["MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK"])
def test_env_that_would_break_the_rendezvous_is_refused(var):
    with pytest.raises(dtlab.LaunchError, match=var):
        dtlab.run(print, env={var: "1"}, nprocs=2, backend="gloo")


def test_timeout_nan_refused_and_inf_means_no_limit():
    from dtlab.runtime.plan import check_timeout

    for bad in (math.nan, -1, 0, "5", 1e300):
        with pytest.raises(dtlab.LaunchError, match="timeout"):
            dtlab.run(print, timeout=bad, nprocs=2, backend="gloo")
    assert check_timeout(math.inf) is None


# -- failures named for what they are ------------------------------------------------------------

def test_a_value_the_parent_cannot_unpickle_fails_that_rank_only(tmp_path):
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(value_from_a_module_only_ranks_have, 1, str(tmp_path / "mod"), nprocs=2,
                  backend="gloo")
    e = ei.value
    assert e.root_rank == 1 and list(e.failures) == [1]
    assert e.failure_list[0].kind == "bad_result" and "rank_only_mod" in e.failures[1]
    assert e.results[0].value == 5  # rank 0's value is not lost
    assert e.diagnosis is None  # nothing died or hung (it said "rank_died ... the OOM killer")


def test_sys_exit_is_named_with_its_code_or_text():
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(sys_exit_on, {1: 3, 2: "bye"}, nprocs=3, backend="gloo")
    e = ei.value
    assert "sys.exit(3)" in e.failures[1] and "bye" in e.failures[2]
    assert e.exit_codes == {1: 3, 2: 1}
    assert "without a Python exception" not in str(e) and "os._exit" not in str(e)


def test_a_rank_that_left_while_its_peers_waited_is_the_root_cause():
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(leave_early, 1, nprocs=3, backend="gloo", timeout=60)
    e = ei.value
    assert e.root_rank == 1, str(e)
    root = e.failure_list[0]
    assert root.kind == "left" and "after issuing 1 collective" in root.summary
    assert all(f.secondary for f in e.failure_list[1:])


def test_a_fork_that_raised_in_the_ranks_code_does_not_hide_the_ranks_own_exit():
    """Rank 1 called os._exit(3) after a fork of it raised a lost-peer error into rank 1's error
    file and stderr: it was read as rank 1's, every failure looked secondary, and rank 0 (which
    had returned) was named the root cause, by the runtime and the diagnosis alike."""
    with pytest.raises(dtlab.RankError) as ei:
        dtlab.run(fork_raises_then_exit, 3, nprocs=2, backend="gloo")
    e = ei.value
    assert e.root_rank == 1 and e.failure_list[0].kind == "exit", str(e)
    assert e.exit_codes[1] == 3 and "written by process" in e.failures[1]
    assert e.diagnosis is not None and e.diagnosis.failure_class == "rank_died"
    assert e.diagnosis.culprit_ranks == [1] and "exit code 3" in e.diagnosis.summary


def test_a_killed_pool_rank_shows_its_own_last_words():
    with dtlab.Pool(nprocs=2, backend="gloo") as pool:
        pool.exec("import sys, os, signal; print('OLD words', file=sys.stderr)")
        with pytest.raises(dtlab.RankError) as ei:
            pool.exec("print('NEW words', file=sys.stderr, flush=True)\n"
                      "if rank == 1: os.kill(os.getpid(), signal.SIGKILL)\n"
                      "import time; time.sleep(30 if rank == 1 else 0)", timeout=60)
        text = ei.value.failures[1]
        assert "NEW words" in text and "OLD words" not in text
        assert pool.broken


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_flight_recorder_buffer_set_by_the_caller_under_either_name_is_left_alone(backend, monkeypatch):
    """dtlab.bench turns Flight Recorder off (quiet_env); the launch must not turn it back on
    under the other name."""
    from dtlab.bench.engine import quiet_env
    from dtlab.runtime.evidence import FR_BUFFER_VARS, fr_env

    for k in FR_BUFFER_VARS:
        monkeypatch.delenv(k, raising=False)
    assert [k for k in FR_BUFFER_VARS if k in fr_env(backend, "/fr", {})] != []  # on by default
    for name in FR_BUFFER_VARS:
        assert not any(k in fr_env(backend, "/fr", {name: "0"}) for k in FR_BUFFER_VARS)
    off = quiet_env()
    assert list(off.values()) == ["0"] and not any(k in fr_env(backend, "/fr", off)
                                                   for k in FR_BUFFER_VARS)
