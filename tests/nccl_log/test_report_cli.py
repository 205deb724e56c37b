"""`dtlab nccl-log FILE... [--json]`: a thin call into dtlab.nccl_log; exit 0 / 1 / 2."""

import json
from pathlib import Path

from dtlab.cli import main

FIX = Path(__file__).parent / "fixtures"


def test_summary_of_a_folder(capsys):
    assert main(["nccl-log", str(FIX / "synthetic_228_two_files")]) == 0
    out = capsys.readouterr().out
    assert "NCCL 2.28.9 (+cuda12.9)" in out and "world size: 2" in out
    assert "P2P/CUMEM/read -> 1 (4 ch)" in out
    assert "env overrides: NCCL_NVLS_ENABLE=0, NCCL_SOCKET_IFNAME=eth0" in out
    assert "divergence: none" in out and "README.md" in out  # listed as skipped


def test_json_of_several_files(capsys):
    files = sorted(str(p) for p in (FIX / "synthetic_228_two_files").glob("synthetic_*.log"))
    assert main(["nccl-log", *files, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["nccl_version"] == "2.28.9" and len(d["ranks"]) == 2
    assert d["n_collectives"] == {"0": 8, "1": 8}


def test_divergence_exits_1_and_says_where(capsys):
    assert main(["nccl-log", str(FIX / "synthetic_torchrun_shm_hang.log")]) == 1
    out = capsys.readouterr().out
    assert "DIVERGENCE at collective #3 (fewer_calls): rank(s) [0, 1] (no majority" in out
    assert "rank(s) [1] made fewer calls" in out
    assert "SHM/direct/direct" in out


def test_not_a_log_exits_2_naming_it(capsys):
    assert main(["nccl-log", str(FIX / "synthetic_not_nccl.log")]) == 2
    assert "synthetic_not_nccl.log" in capsys.readouterr().err
    assert main(["nccl-log", str(FIX / "missing.log")]) == 2
    assert main(["nccl-log", str(FIX / "synthetic_228_two_files"), "--comm", "0xdead"]) == 2


def test_other_communicator(capsys):
    assert main(["nccl-log", str(FIX / "synthetic_228_two_files"), "--comm",
                 "split:id:0x5ae2ff3c1d2b9e01:1:0"]) == 0
    assert "(split, 2 ranks; selected)" in capsys.readouterr().out
