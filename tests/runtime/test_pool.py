"""dtlab.Pool on gloo: persistent state, the failure contract, resources, and the control channel."""

import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import dtlab
from conftest import pid_gone

pytestmark = pytest.mark.usefixtures("no_orphans")


@pytest.fixture
def pool():
    with dtlab.Pool(nprocs=2, backend="gloo") as p:
        yield p


def worker_pids(pool):
    return [s["pid"] for s in pool.status()]


def test_state_persists_across_cells(pool):
    pool.exec("x = torch.ones(2) * (rank + 1)")
    res = pool.exec("dist.all_reduce(x)\nx.sum().item()")
    assert res.values == [6.0, 6.0]
    assert pool.exec("world_size, str(device)").values == [(2, "cpu"), (2, "cpu")]
    pulled = pool.pull("x")
    assert set(pulled) == {0, 1} and pulled[1].tolist() == [3.0, 3.0]


def test_push_pull_and_run(pool):
    pool.push(lr=0.5, name="adam")
    assert pool.exec("lr * rank, name").values == [(0.0, "adam"), (0.5, "adam")]
    assert pool.pull("lr", ranks=[1]) == {1: 0.5}
    offset = 10
    res = pool.run(lambda k: dtlab.rank() + k + offset, 1)
    assert res.values == [11, 12] and isinstance(res, dtlab.Results)
    with pytest.raises(dtlab.RankError, match="not defined"):
        pool.pull("nope")


def test_cells_on_some_ranks_and_per_cell_output(pool, capsys):
    pool.exec("print('first cell', rank)")
    res = pool.exec("print('second cell', rank)\nimport os\nos.write(1, b'fd line\\n')", ranks=[1])
    assert [r.rank for r in res] == [1]
    assert res[1].stdout == "second cell 1\nfd line\n"  # exactly this cell's output
    assert "[rank 1] second cell 1" in capsys.readouterr().out


def test_exception_on_every_rank_leaves_the_pool_untouched(pool):
    pool.exec("kept = rank * 7")
    with pytest.raises(dtlab.RankError) as ei:
        pool.exec("raise ValueError(f'bad input on rank {rank}')")
    assert set(ei.value.failures) == {0, 1}
    assert "raise ValueError" in ei.value.failures[0]  # the cell's source line is shown
    assert pool.restarts == 0
    assert pool.exec("kept").values == [0, 7]


@pytest.mark.slow
def test_exception_while_others_wait_in_a_collective_restarts_the_pool(pool):
    before = worker_pids(pool)
    with pytest.raises(dtlab.RankError) as ei:
        pool.exec("t = torch.ones(1)\nif rank == 1:\n    raise KeyError('one')\ndist.all_reduce(t)")
    assert ei.value.root_rank == 1 and "pool was restarted" in str(ei.value)
    assert pool.restarts == 1 and all(pid_gone(p) for p in before)
    assert pool.exec("t = torch.ones(1); dist.all_reduce(t); t.item()").values == [2.0, 2.0]


@pytest.mark.slow
def test_hang_then_restart_then_works(pool):
    before = worker_pids(pool)
    code = textwrap.dedent("""\
        t = torch.ones(1)
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.recv(t, src=0)
        """)
    t0 = time.monotonic()
    with pytest.raises(dtlab.HangError) as ei:
        pool.exec(code, timeout=3)
    assert time.monotonic() - t0 < 30
    e = ei.value
    assert "dist.all_reduce(t)" in str(e) and "dist.recv(t, src=0)" in str(e)
    assert "restarted itself" in str(e) and pool.restarts == 1
    assert all(pid_gone(p) for p in before)
    assert pool.exec("rank").values == [0, 1]


def test_dead_rank_breaks_the_pool_until_restart(pool):
    with pytest.raises(dtlab.RankError) as ei:
        pool.exec("import os\nif rank == 1:\n    os._exit(9)")
    assert ei.value.root_rank == 1 and ei.value.exit_codes[1] == 9
    assert "broken" in str(ei.value)
    with pytest.raises(dtlab.PoolBrokenError, match="restart"):
        pool.exec("1")
    pool.restart()
    assert pool.exec("rank + 1").values == [1, 2]


def test_interrupt_stops_the_cell_and_keeps_the_namespace(pool, sigint_raises):
    pool.exec("kept = 'still here'")
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pool.exec("import time\nfor _ in range(600):\n    time.sleep(0.1)")
    assert time.monotonic() - t0 < 15
    assert pool.restarts == 0
    assert pool.exec("kept").values == ["still here"] * 2


@pytest.mark.slow
def test_interrupt_of_a_blocked_collective_restarts(pool, sigint_raises):
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        pool.exec("t = torch.ones(1)\nif rank == 0:\n    dist.recv(t, src=1)\nelse:\n    dist.recv(t, src=0)")
    assert pool.restarts == 1
    assert pool.exec("rank").values == [0, 1]


@pytest.mark.slow
def test_500_cells_do_not_leak(pool):
    me = psutil.Process()
    for _ in range(50):
        pool.exec("t = torch.ones(1); dist.all_reduce(t)")
    fds0 = me.num_fds()
    rss0 = [psutil.Process(p).memory_info().rss for p in worker_pids(pool)]
    t0 = time.perf_counter()
    for i in range(500):
        pool.exec(f"t = torch.ones(1); dist.all_reduce(t); v{i % 7} = t.item()")
    per_cell = (time.perf_counter() - t0) / 500
    fds1 = me.num_fds()
    rss1 = [psutil.Process(p).memory_info().rss for p in worker_pids(pool)]
    assert fds1 <= fds0, f"parent file descriptors grew {fds0} -> {fds1}"
    # bound: 8 MiB of resident memory growth per rank over 500 cells
    assert all(b - a < 8 << 20 for a, b in zip(rss0, rss1)), (rss0, rss1)
    assert per_cell < 0.5  # a sanity bound, not a benchmark (benchmarks/pool.py measures)


@pytest.mark.slow
def test_a_rank_printing_100_mb_does_not_block(pool, capsys, monkeypatch):
    monkeypatch.setenv("DTLAB_DISPLAY_LIMIT", "100000")
    t0 = time.monotonic()
    res = pool.exec("import sys\nline = 'x' * 1023 + '\\n'\n"
                    "for _ in range(100 * 1024):\n    sys.stdout.write(line)\n"
                    "'done'", ranks=[1], timeout=120)
    assert res.values == ["done"] and time.monotonic() - t0 < 60
    assert len(res[1].stdout) == 100 * 1024 * 1024
    shown = capsys.readouterr()
    assert len(shown.out) < 200_000 and "display limit" in shown.err
    assert pool.exec("rank").values == [0, 1]


def test_close_restart_and_no_orphans():
    pool = dtlab.Pool(nprocs=2)
    first = worker_pids(pool)
    pool.restart()
    second = worker_pids(pool)
    assert all(pid_gone(p) for p in first)
    pool.close()
    assert all(pid_gone(p) for p in second)
    with pytest.raises(dtlab.PoolBrokenError):
        pool.exec("1")


@pytest.mark.slow
def test_workers_exit_when_the_parent_dies(tmp_path):
    script = textwrap.dedent("""
        import sys, time, dtlab
        pool = dtlab.Pool(nprocs=2, backend="gloo")
        print(*[s["pid"] for s in pool.status()], flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 2
        proc.kill()
        proc.wait(10)
    finally:
        proc.kill()
    assert all(pid_gone(p, 10.0) for p in pids)


def test_bad_arguments(pool):
    with pytest.raises(ValueError, match="choose from 0..1"):
        pool.exec("1", ranks=[5])
    with pytest.raises(TypeError):
        pool.exec(lambda: 1)
    with pytest.raises(dtlab.LaunchError, match="timeout"):
        pool.exec("1", timeout=-1)
    with pytest.raises(dtlab.LaunchError, match="cannot be sent"):
        pool.push(lock=threading.Lock())
    with pytest.raises(dtlab.LaunchError, match="'not a name' is not a variable name"):
        pool.push(**{"not a name": 1})
    # every command's numbers: a LaunchError naming the argument, before anything is sent
    for bad in (math.nan, -1, 0, 1e12, 1e-9, "5", True):
        for command in (lambda: pool.exec("1", timeout=bad), lambda: pool.run(int, timeout=bad)):
            with pytest.raises(dtlab.LaunchError, match="timeout="):
                command()
    for ranks in ("0", 0, [True], [0.0], [-1], []):
        with pytest.raises(dtlab.LaunchError, match="ranks="):
            pool.exec("1", ranks=ranks)
    with pytest.raises(dtlab.LaunchError, match="fn="):
        pool.run(3)
    with pytest.raises(dtlab.LaunchError, match="name="):
        pool.pull(3)
    assert pool.exec("rank").values == [0, 1]  # nothing was sent: the pool is as it was


def test_a_run_folder_deeper_than_a_socket_address_holds(tmp_path, monkeypatch):
    """A unix socket address holds 107 bytes: a pool under a deep DTLAB_RUN_ROOT (pytest-xdist's
    tmp_path, a long $TMPDIR) failed 'AF_UNIX path too long'."""
    deep = tmp_path / ("d" * 100) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("DTLAB_RUN_ROOT", str(deep))
    with dtlab.Pool(nprocs=2, backend="gloo") as p:
        assert p.exec("rank + 1").values == [1, 2]
    assert list(deep.iterdir()) == []
