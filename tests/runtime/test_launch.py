"""dtlab.run on gloo: results, shipping functions by value, every rank's output."""

import os
import signal
import threading

import pytest
import torch

import dtlab
from rank_fns import env_and_group, rank_sum, talk

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_values_in_rank_order():
    res = dtlab.run(rank_sum, 10, nprocs=3, backend="gloo")
    assert res.values == [33.0, 33.0, 33.0]
    assert [r.exit_code for r in res] == [0, 0, 0]
    assert all(r.duration_s is not None and r.duration_s >= 0 for r in res)
    assert res.backend == "gloo" and len(res) == 3


def test_env_and_process_group_are_set_up():
    res = dtlab.run(env_and_group, nprocs=2)
    a, b = res.values
    assert (a["RANK"], b["RANK"]) == ("0", "1")
    assert a["WORLD_SIZE"] == b["WORLD_SIZE"] == "2"
    assert a["MASTER_ADDR"] == "127.0.0.1" and a["MASTER_PORT"] == b["MASTER_PORT"]
    assert a["initialized"] and a["backend"] == "gloo"
    assert (a["group_rank"], b["group_rank"], a["group_size"]) == (0, 1, 2)
    assert a["pid"] != b["pid"] != os.getpid()


def test_lambdas_and_closures_travel_by_value():
    scale = 7

    def closure(x):
        import torch.distributed as dist

        return (dist.get_rank() + x) * scale

    assert dtlab.run(closure, 1, nprocs=2).values == [7, 14]
    assert dtlab.run(lambda: dtlab.rank() * 2, nprocs=2).values == [0, 2]


def test_kwargs_and_tensors_come_back():
    def fn(n, *, fill):
        return torch.full((n,), float(fill + dtlab.rank()))

    res = dtlab.run(fn, 3, nprocs=2, fill=5)
    assert torch.equal(res[1].value, torch.full((3,), 6.0))


def test_output_is_captured_per_rank_at_fd_level(capsys):
    res = dtlab.run(talk, nprocs=2)
    for r in (0, 1):
        out, err = res[r].stdout, res[r].stderr
        assert f"python print from rank {r}" in out
        assert f"fd write from rank {r}" in out
        assert f"libc printf from rank {r}" in out
        assert f"fd stderr from rank {r}" in err and "to stderr" in err
        assert f"from rank {1 - r}" not in out
    shown = capsys.readouterr()
    assert "[rank 0] python print from rank 0" in shown.out
    assert "[rank 1] fd write from rank 1" in shown.out
    assert "[rank 1] fd stderr from rank 1" in shown.err


def test_env_reaches_the_ranks():
    res = dtlab.run(lambda: os.environ["MY_SETTING"], nprocs=2, env={"MY_SETTING": "x1"})
    assert res.values == ["x1", "x1"]


def test_default_nprocs_without_gpus_is_two():
    if torch.cuda.is_available():
        pytest.skip("GPUs visible")
    assert len(dtlab.run(lambda: 0)) == 2


def test_one_rank_works():
    assert dtlab.run(rank_sum, 1, nprocs=1).values == [1.0]


def test_signal_handlers_of_the_caller_survive():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    dtlab.run(lambda: 0, nprocs=1)
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_from_a_thread():
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", dtlab.run(lambda: 5, nprocs=2).values))
    t.start()
    t.join(120)
    assert out["v"] == [5, 5]
