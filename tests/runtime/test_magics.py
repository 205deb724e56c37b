"""%dtlab / %%dtlab drive a Pool; every check goes through the Python API (ipyparallel style)."""


import pytest

pytest.importorskip("IPython")
from IPython.core.error import UsageError  # noqa: E402
from IPython.testing.globalipapp import start_ipython  # noqa: E402

from conftest import pid_gone  # noqa: E402
from dtlab.runtime import magics  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_orphans")


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython()
    shell.run_line_magic("load_ext", "dtlab")
    yield shell
    shell.run_line_magic("dtlab", "stop")


def test_start_cells_status_restart_stop(ip, capsys):
    ip.run_line_magic("dtlab", "start -n 2 --backend gloo")
    pool = magics.current_pool()
    assert pool is not None and pool.nprocs == 2 and pool.backend == "gloo"
    assert "2 ranks up" in capsys.readouterr().out

    assert ip.run_cell_magic("dtlab", "", "a = 5 * (rank + 1)") is None
    assert pool.pull("a") == {0: 5, 1: 10}
    res = ip.run_cell_magic("dtlab", "--ranks 1 --timeout 30", "print('only me', rank)\na + 1")
    assert res.values == [11] and res[1].stdout == "only me 1\n"

    ip.run_line_magic("dtlab", "status")
    out = capsys.readouterr().out
    assert "rank 0: pid" in out and "rank 1: pid" in out and "idle" in out

    pids = [s["pid"] for s in pool.status()]
    ip.run_line_magic("dtlab", "restart")
    assert all(pid_gone(p) for p in pids) and pool.restarts == 1
    assert magics.current_pool().pull("rank") == {0: 0, 1: 1}

    pids = [s["pid"] for s in pool.status()]
    ip.run_line_magic("dtlab", "stop")
    assert magics.current_pool() is None and all(pid_gone(p) for p in pids)


def test_errors_from_a_cell_are_exceptions(ip):
    ip.run_line_magic("dtlab", "start -n 2")
    import dtlab

    with pytest.raises(dtlab.RankError):
        ip.run_cell_magic("dtlab", "", "raise RuntimeError('cell failed')")
    assert magics.current_pool().exec("rank").values == [0, 1]
    ip.run_line_magic("dtlab", "stop")


def test_usage_errors(ip):
    ip.run_line_magic("dtlab", "stop")
    with pytest.raises(UsageError, match="%dtlab start"):
        ip.run_cell_magic("dtlab", "", "1")
    with pytest.raises(UsageError, match="usage"):
        ip.run_line_magic("dtlab", "launch")
    with pytest.raises(UsageError, match="--ranks"):
        ip.run_line_magic("dtlab", "start -n 1")
        ip.run_cell_magic("dtlab", "--ranks one", "1")
    ip.run_line_magic("dtlab", "stop")
