"""NCCL's account beside each row, from the REAL logs in data/h200x2-nccl-logs/ (NCCL 2.28.9,
2x H200, see its README): transport per variant, channels, and the per-call algorithm/protocol
matched to a row by its byte count."""

from pathlib import Path

import pandas as pd
import pytest

from dtlab.bench.engine import make_config
from dtlab.tuning import annotate, call_bytes, debug_env, read_account
from dtlab.tuning.runner import _fresh_folder, _notes, _rows, error_line, nccl_reason
from dtlab.tuning.settings import Setting

LOGS = Path(__file__).resolve().parents[2] / "data" / "h200x2-nccl-logs"
pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason="no recorded logs in data/")

# rows as dtlab.bench makes them: size and count are nccl-tests' columns (count per rank for
# all_gather); the recorded workload called AllReduce with 1 KiB, 256 KiB, 64 MiB and AllGather
# with 4096 floats per rank; 8 B was never called with float
ROWS = pd.DataFrame({
    "op": ["all_reduce", "all_reduce", "all_reduce", "all_gather", "all_reduce", "sendrecv"],
    "size": [1024, 262144, 67108864, 32768, 8, 4096],
    "count": [256, 65536, 16777216, 4096, 2, 1024],
    "type": ["float"] * 6})


def test_default_is_p2p_cumem_with_the_per_call_choices():
    got = annotate(ROWS, LOGS / "default")
    assert list(got["transport"]) == ["P2P/CUMEM"] * 6
    assert list(got["comm_channels"]) == [24] * 6
    assert list(got["algorithm"][:4]) == ["Ring", "Ring", "Ring", "Ring"]
    # "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}", then {0..21}, {0..23}
    assert list(got["protocol"][:4]) == ["LL", "LL", "Simple", "LL"]
    assert list(got["channels"][:4]) == [1, 22, 24, 4]
    # no such call in the log, and point-to-point has no algorithm: empty, not guessed
    assert got["algorithm"][4:].isna().all() and got["channels"][4:].isna().all()


def test_p2p_disabled_is_shm_and_network_is_socket():
    shm = annotate(ROWS, LOGS / "p2p_disabled")
    assert set(shm["transport"]) == {"SHM"} and set(shm["comm_channels"]) == {4}
    assert list(shm["protocol"][:3]) == ["LL", "LL", "Simple"]
    assert list(shm["channels"][:3]) == [1, 4, 4]
    net = read_account(LOGS / "net_socket")
    assert net["transport"] == "NET/Socket" and net["comm_channels"] == 2
    assert net["env"]["NCCL_SHM_DISABLE"] == "1" and net["env"]["NCCL_P2P_DISABLE"] == "1"
    # over the socket, 256 KiB already goes Simple; AllGather picks PAT
    assert net["calls"][("AllReduce", 262144)] == ("Ring", "Simple", 2)
    assert net["calls"][("AllGather", 16384)] == ("PAT", "Simple", 2)


def test_forced_tree_ll_and_what_nccl_said_when_it_refused():
    acc = read_account(LOGS / "tree_ll")
    assert acc["env"]["NCCL_ALGO"] == "Tree" and acc["env"]["NCCL_PROTO"] == "LL"
    assert acc["calls"][("AllReduce", 67108864)] == ("Tree", "LL", 24)
    assert ("AllGather", 16384) not in acc["calls"]  # refused: no algorithm/protocol
    assert acc["warning"].startswith("Error : no algorithm/protocol available for function "
                                     "AllGather")
    error = (LOGS / "tree_ll" / "dtlab-error.txt").read_text()

    class Recorded(RuntimeError):  # the RankError text dtlab.run raised in that capture
        failures = {1: error}

    assert nccl_reason(Recorded(error), None).startswith("Error : no algorithm/protocol "
                                                         "available")
    assert nccl_reason(Recorded(error), acc) == acc["warning"]
    assert error_line(Recorded(error)).startswith("dtlab.run: 2 of 2 ranks failed")


def test_a_setting_row_gets_the_account_and_a_failed_one_the_reason():
    bench_rows = pd.DataFrame({
        "op": ["all_reduce"], "nranks": [2], "backend": ["nccl"], "tool": ["dtlab"],
        "size": [262144], "count": [65536], "type": ["float"], "redop": ["sum"], "root": [-1],
        "oop_time_us": [float("nan")], "oop_algbw": [float("nan")],
        "oop_busbw": [float("nan")], "oop_wrong": pd.array([None], dtype="Int64"),
        "ip_time_us": [10.0], "ip_algbw": [26.2], "ip_busbw": [26.2],
        "ip_wrong": pd.array([0], dtype="Int64")})
    cfg = make_config("all_reduce", "1K", "1K")
    s = Setting("P2P_DISABLE=1", {"NCCL_P2P_DISABLE": "1"})
    acc = read_account(LOGS / "p2p_disabled")
    (row,) = _rows(s, bench_rows, None, acc, ["NCCL_P2P_DISABLE"], cfg, "nccl", 2)
    assert (row["setting"], row["NCCL_P2P_DISABLE"], row["inplace"], row["busbw"]) == \
        ("P2P_DISABLE=1", "1", True, 26.2)
    assert (row["algorithm"], row["protocol"], row["channels"], row["transport"]) == \
        ("Ring", "LL", 4, "SHM")
    (bad,) = _rows(s, None, RuntimeError("boom\nmore"), read_account(LOGS / "tree_ll"),
                   ["NCCL_P2P_DISABLE"], cfg, "nccl", 2)
    assert bad["status"] == "failed" and bad["error"] == "boom"
    assert bad["nccl_error"].startswith("Error : no algorithm/protocol available")


def test_folders_env_and_byte_counts(tmp_path):
    env = debug_env(tmp_path / "x")
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH,ENV,TUNING"
    assert env["NCCL_DEBUG_FILE"].endswith("x/nccl.%h.%p.log")
    folder = _fresh_folder(tmp_path, "P2P_DISABLE=1 SHM_DISABLE=1")
    assert folder.name == "P2P_DISABLE=1_SHM_DISABLE=1"
    (folder / "nccl.vm.1.log").write_text("old")
    (folder / "notes.txt").write_text("mine")
    _fresh_folder(tmp_path, "P2P_DISABLE=1 SHM_DISABLE=1")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]  # only NCCL's old files go
    assert read_account(tmp_path / "empty") is None
    assert call_bytes("all_gather", 4096, "float") == 16384
    assert call_bytes("all_reduce", 8, "bfloat16") == 16
    assert annotate(ROWS, None)["transport"].isna().all()


def test_notes_say_what_the_backend_and_environment_mean():
    (gloo,) = _notes("gloo", True, {})
    assert "no effect" in gloo and "no NCCL log" in gloo
    logged, inherited = _notes("nccl", True, {"NCCL_ALGO": "Tree"})
    assert "TUNING line per call" in logged and "nccl_log=False" in logged
    assert "NCCL_ALGO=Tree" in inherited and "not NCCL's own default" in inherited
    assert "logging off" in _notes("nccl", False, {})[0]
