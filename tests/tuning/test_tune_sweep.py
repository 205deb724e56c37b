"""dtlab.tuning.sweep on 2 gloo ranks: every setting in its own launch, rows per setting with
#wrong 0 and empty NCCL columns (no NCCL on CPUs), a failing setting recorded while the sweep
goes on, the CLI end to end, and no process left. Tiny sizes: a launch is a few seconds."""

import io
import json

import pandas as pd
import pytest

import dtlab.tuning as tuning
from dtlab.bench.timing import FAULTS_VAR
from dtlab.cli import main

FAST = dict(min_bytes="1K", max_bytes="4K", iters=2, warmup=1, nprocs=2, backend="gloo",
            timeout=60)


@pytest.mark.usefixtures("no_orphans")
def test_two_settings_on_gloo_give_rows_for_each_with_empty_nccl_columns(tmp_path):
    out = io.StringIO()
    res = tuning.sweep([{"NCCL_PROTO": "LL"}], log_dir=tmp_path, progress_stream=out, **FAST)
    df = res.frame
    assert list(df.columns) == tuning.columns(["NCCL_PROTO"])
    assert list(dict.fromkeys(df["setting"])) == ["default", "PROTO=LL"]
    for label, part in df.groupby("setting"):
        assert list(part["size"]) == [1024, 2048, 4096], label
        assert (part["wrong"] == 0).all() and (part["status"] == "ok").all()
        assert (part["busbw"] > 0).all() and part["inplace"].all()
    assert df.loc[df["setting"] == "PROTO=LL", "NCCL_PROTO"].eq("LL").all()
    assert df.loc[df["setting"] == "default", "NCCL_PROTO"].isna().all()
    for col in ("algorithm", "protocol", "channels", "comm_channels", "transport"):
        assert df[col].isna().all(), col
    assert "no NCCL log" in res.notes[0] and res.failed == {}
    assert res.settings["PROTO=LL"] == {"NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    assert not any(tmp_path.iterdir())  # gloo: NCCL writes nothing, no empty folders either
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("dtlab.tuning: 2 setting(s) | all_reduce 1K..4K")
    assert lines[1].startswith("[1/2] default | ok, peak busbw") and "ETA" in lines[1]
    assert lines[2].startswith("[2/2] PROTO=LL | ok") and lines[2].endswith("ETA done")
    text = tuning.table(res)
    assert text == res.render()
    assert "== PROTO=LL" in text and "best setting per size" in text
    assert len(tuning.best(df)) == 3


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_a_failing_setting_is_a_row_and_the_sweep_goes_on(capsys, monkeypatch):
    msg = ("NCCL error: invalid usage\nLast error:\nError : no algorithm/protocol available "
           "for function AllReduce (test hook)")
    monkeypatch.setenv(FAULTS_VAR, json.dumps({"fail": {"ALGO=Tree": msg}}))
    res = tuning.sweep(["tree", "ll"], **FAST)
    df = res.frame
    assert list(dict.fromkeys(df["setting"])) == ["default", "ALGO=Tree", "PROTO=LL"]
    bad = df[df["setting"] == "ALGO=Tree"]
    assert len(bad) == 1 and bad["status"].iloc[0] == "failed" and pd.isna(bad["size"].iloc[0])
    assert bad["error"].iloc[0] == "rank 1: RuntimeError: NCCL error: invalid usage"
    assert bad["nccl_error"].iloc[0].startswith("Error : no algorithm/protocol available")
    assert res.failed == {"ALGO=Tree": bad["nccl_error"].iloc[0]}
    assert "Traceback" in res.errors["ALGO=Tree"]  # the whole story is kept
    assert (df.loc[df["setting"] == "PROTO=LL", "status"] == "ok").all()  # it went on
    printed = capsys.readouterr().out
    assert "[2/3] ALGO=Tree | FAILED: Error : no algorithm/protocol available" in printed
    assert "[3/3] PROTO=LL | ok" in printed
    assert "ALGO=Tree  FAILED" in tuning.table(res)
    assert set(tuning.best(res)["best"]) <= {"default", "PROTO=LL"}


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_cli_tune_json_csv_plot(tmp_path, capsys):
    csv, png = tmp_path / "t.csv", tmp_path / "t.png"
    rc = main(["tune", "--proto", "LL,default", "-b", "1K", "-e", "2K", "-n", "2", "-w", "0",
               "--nprocs", "2", "--backend", "gloo", "--json", "--csv", str(csv),
               "--plot", str(png)])
    assert rc == 0
    captured = capsys.readouterr()
    got = json.loads(captured.out)
    assert list(got["settings"]) == ["default", "PROTO=LL"]  # "default" in the list: one run
    assert [(r["setting"], r["size"], r["wrong"]) for r in got["rows"]] == [
        ("default", 1024, 0), ("default", 2048, 0), ("PROTO=LL", 1024, 0), ("PROTO=LL", 2048, 0)]
    assert all(r["algorithm"] is None and r["transport"] is None for r in got["rows"])
    assert [b["size"] for b in got["best"]] == [1024, 2048] and got["default"] == "default"
    assert "backend gloo" in got["notes"][0]
    assert "[2/2] PROTO=LL | ok" in captured.err  # progress on stderr, JSON alone on stdout
    assert len(pd.read_csv(csv)) == 4 and png.stat().st_size > 5000


def test_cli_tune_bad_value_is_one_clear_error(capsys, no_orphans):
    assert main(["tune", "--algo", "NVLS", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtlab tune: --algo NVLS: NCCL_ALGO='NVLS'") and "never enables" in err
