"""The NCCL path of dtlab.tuning.sweep without a GPU: the launch is replaced by a stand-in that
checks the environment each setting's ranks would get, and leaves in the setting's log folder
the REAL NCCL 2.28.9 logs recorded for that setting (data/h200x2-nccl-logs/); the timings it
returns are synthetic. What is tested is the plumbing: env, folders, parsing, the columns."""

import shutil
import time
from pathlib import Path

import pytest

import dtlab.runtime
import dtlab.tuning as tuning
from dtlab.runtime.errors import Failure, RankError
from dtlab.runtime.plan import Plan

LOGS = Path(__file__).resolve().parents[2] / "data" / "h200x2-nccl-logs"
pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason="no recorded logs in data/")
SIZES = [1024, 262144, 67108864]  # the all-reduce sizes the recorded workload called


def recorded_variant(env: dict) -> str:
    if env.get("NCCL_SHM_DISABLE") == "1":
        return "net_socket"
    if env.get("NCCL_P2P_DISABLE") == "1":
        return "p2p_disabled"
    return "tree_ll" if env.get("NCCL_ALGO") == "Tree" else "default"


class Launches:
    """Stands in for dtlab.run: one call per setting."""

    def __init__(self):
        self.envs = []

    def __call__(self, fn, cfg, label, *, nprocs, backend, timeout, env):
        assert fn is tuning.runner.run_setting and backend == "nccl" and nprocs == 2
        self.envs.append(env)
        variant = recorded_variant(env)
        if "NCCL_DEBUG_FILE" in env:  # NCCL would write its log there, one file per process
            folder = Path(env["NCCL_DEBUG_FILE"]).parent
            assert env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.log") and folder.is_dir()
            for log in (LOGS / variant).glob("*.log"):
                shutil.copy(log, folder / f"nccl.{log.name}")
        if variant == "tree_ll":  # NCCL refused it: the ranks raised (as recorded)
            detail = (LOGS / variant / "dtlab-error.txt").read_text()
            summary = next(line for line in detail.splitlines()
                           if line.startswith("torch.distributed.DistBackendError"))
            raise RankError([Failure(1, "exception", 1, summary, detail, time.time())])
        rows = [{"op": "all_reduce", "size": s, "count": s // 4, "type": "float",
                 "redop": "sum", "root": -1, "oop": None,
                 "ip": {"time_us": 10.0 + s / 3e5, "algbw": 1.0, "busbw": 1.0, "wrong": 0}}
                for s in cfg.sizes]
        out = {"rows": rows, "unsupported": {}, "skipped": [], "backend": "nccl", "nranks": 2,
               "devices": [{"rank": r, "pid": 1, "host": "vm", "device": f"cuda:{r}",
                            "name": "NVIDIA H200"} for r in (0, 1)],
               "torch": "2.11.0", "nccl_version": "2.28.9"}
        return type("Results", (), {"values": [out, None]})()


@pytest.fixture
def fake_gpus(monkeypatch):
    launches = Launches()
    monkeypatch.setattr(dtlab.runtime, "run", launches)
    monkeypatch.setattr(dtlab.runtime.plan, "resolve", lambda n, b, env: Plan(
        2, "nccl", ["cuda:0", "cuda:1"], env=dict(env or {})))
    return launches


def test_each_setting_gets_its_env_and_nccl_account_beside_each_row(fake_gpus, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the machine's own setting: overridden
    res = tuning.sweep(["shm", "net", "tree"], min_bytes="1K", max_bytes="64M", factor=256,
                       log_dir=tmp_path, progress=False)
    df = res.frame
    # what the ranks of each setting were given
    for env in fake_gpus.envs:
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_DEBUG"] == "INFO"
        assert env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH,ENV,TUNING"
    assert [recorded_variant(e) for e in fake_gpus.envs] == ["default", "p2p_disabled",
                                                             "net_socket", "tree_ll"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ALGO=Tree", "P2P_DISABLE=1", "P2P_DISABLE=1_SHM_DISABLE=1", "default"]
    ok = df[df["status"] == "ok"].set_index(["setting", "size"])
    assert list(ok.loc["default", "transport"]) == ["P2P/CUMEM"] * 3
    assert list(ok.loc["default", "protocol"]) == ["LL", "LL", "Simple"]
    assert list(ok.loc["default", "channels"]) == [1, 22, 24]
    assert set(ok.loc["P2P_DISABLE=1", "transport"]) == {"SHM"}
    assert set(ok.loc["P2P_DISABLE=1", "comm_channels"]) == {4}
    assert set(ok.loc["P2P_DISABLE=1 SHM_DISABLE=1", "transport"]) == {"NET/Socket"}
    assert list(ok.loc["P2P_DISABLE=1 SHM_DISABLE=1", "protocol"]) == ["LL", "Simple", "Simple"]
    tree = df[df["setting"] == "ALGO=Tree"].iloc[0]
    assert tree["status"] == "failed"
    assert tree["error"].startswith("rank 1: torch.distributed.DistBackendError: NCCL error")
    assert tree["nccl_error"].startswith("Error : no algorithm/protocol available for function "
                                         "AllGather")
    assert tree["transport"] == "P2P/CUMEM"  # its log still says how the ranks were connected
    assert res.nccl["P2P_DISABLE=1"]["env"]["NCCL_P2P_DISABLE"] == "1"
    assert res.log_dirs["default"] == str(tmp_path / "default")
    assert "TUNING line per call" in res.notes[0]
    best = tuning.best(res)
    assert list(best["best"]) == ["default", "default", "default"]  # synthetic times: all tie
    assert "P2P/CUMEM" in tuning.table(res) and res.header["nccl_version"] == "2.28.9"


def test_without_log_dir_the_logs_go_to_a_temporary_folder_that_is_removed(fake_gpus):
    res = tuning.sweep(["default"], min_bytes="1K", max_bytes="1K", progress=False)
    df = res.frame
    folder = Path(fake_gpus.envs[0]["NCCL_DEBUG_FILE"]).parent
    assert not folder.exists() and res.log_dirs == {"default": None}
    assert df["transport"].tolist() == ["P2P/CUMEM"]  # parsed before it went
    bare = tuning.sweep(["default"], min_bytes="1K", max_bytes="1K", progress=False,
                        nccl_log=False).frame
    assert "NCCL_DEBUG" not in fake_gpus.envs[1] and bare["transport"].isna().all()
