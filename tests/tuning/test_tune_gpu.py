"""dtlab.tuning.sweep on 2 GPUs (NCCL): NCCL's account in every row, forced settings really
taken, a setting NCCL refuses recorded. Skipped without CUDA; on a GPU machine:
``pytest -m gpu tests/tuning``."""

import pytest

import dtlab.tuning as tuning

from conftest import needs_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_orphans")]


def test_settings_are_taken_and_logged_beside_each_row(tmp_path):
    needs_gpus()
    df = tuning.sweep(["shm", "tree", {"NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 2}],
                      min_bytes="4K", max_bytes="4M", factor=32, iters=3, warmup=1, nprocs=2,
                      backend="nccl", log_dir=tmp_path, timeout=120)
    res, df = df, df.frame
    assert res.failed == {}, res.errors
    assert (df["wrong"] == 0).all() and df["algorithm"].notna().all()
    by = {label: part for label, part in df.groupby("setting")}
    assert by["default"]["transport"].str.startswith("P2P").all()  # 2 GPUs of one host
    assert set(by["P2P_DISABLE=1"]["transport"]) == {"SHM"}
    assert set(by["ALGO=Tree"]["algorithm"]) == {"Tree"}
    forced = by["PROTO=Simple MAX_NCHANNELS=2"]
    assert set(forced["protocol"]) == {"Simple"} and (forced["channels"] <= 2).all()
    assert res.nccl["ALGO=Tree"]["env"]["NCCL_ALGO"] == "Tree"
    assert all(acc["env"]["NCCL_NVLS_ENABLE"] == "0" for acc in res.nccl.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["default", "P2P_DISABLE=1", "ALGO=Tree", "PROTO=Simple_MAX_NCHANNELS=2"])


def test_a_setting_nccl_refuses_is_a_failed_row_and_the_sweep_goes_on():
    needs_gpus()
    # AllGather has no Tree algorithm: NCCL refuses the call (data/h200x2-nccl-logs/tree_ll)
    df = tuning.sweep(["tree", "ll"], op="all_gather", min_bytes="1M", max_bytes="1M",
                      iters=2, warmup=1, nprocs=2, backend="nccl", timeout=120,
                      progress=False).frame
    tree = df[df["setting"] == "ALGO=Tree"].iloc[0]
    assert tree["status"] == "failed"
    assert "no algorithm/protocol available" in (tree["nccl_error"] or ""), tree["error"]
    assert (df.loc[df["setting"] == "PROTO=LL", "status"] == "ok").all()
    assert (df.loc[df["setting"] == "PROTO=LL", "wrong"] == 0).all()
