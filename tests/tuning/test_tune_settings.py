"""dtlab.tuning settings: grid expansion, presets, labels, and one clear error per bad value --
all before any rank starts."""

import doctest
import importlib

import pytest

import dtlab.tuning as tuning
from dtlab.tuning import check_setting, grid, label_of, preset, resolve_settings


def test_grid_is_the_cartesian_product_first_axis_slowest():
    got = grid(NCCL_ALGO=["Ring", "Tree"], NCCL_PROTO=["LL", "LL128", "Simple"])
    assert len(got) == 6
    assert got[0] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    assert got[2] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert got[3] == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}


def test_grid_spellings_none_and_scalars():
    got = grid(algo="tree", p2p_disable=[None, 1], max_nchannels=4, buffsize="1M")
    assert got == [
        {"NCCL_ALGO": "Tree", "NCCL_MAX_NCHANNELS": "4", "NCCL_BUFFSIZE": "1048576"},
        {"NCCL_ALGO": "Tree", "NCCL_MAX_NCHANNELS": "4", "NCCL_P2P_DISABLE": "1",
         "NCCL_BUFFSIZE": "1048576"}]
    # variables come out in one fixed order, whatever order they were given in
    assert list(got[1]) == ["NCCL_ALGO", "NCCL_MAX_NCHANNELS", "NCCL_P2P_DISABLE",
                            "NCCL_BUFFSIZE"]
    assert grid(NCCL_PROTO="ll128,simple") == [{"NCCL_PROTO": "LL128,Simple"}]


def test_labels_presets_and_groups():
    assert label_of({}) == "default"
    assert label_of({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}) == \
        "P2P_DISABLE=1 SHM_DISABLE=1"
    assert preset("net") == [{"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}]
    course = [s.label for s in resolve_settings("course")]
    assert course == ["default", "P2P_DISABLE=1", "P2P_DISABLE=1 SHM_DISABLE=1", "ALGO=Ring",
                      "ALGO=Tree", "PROTO=LL", "PROTO=LL128", "PROTO=Simple",
                      "MAX_NCHANNELS=1", "MAX_NCHANNELS=4"]
    assert [s.label for s in resolve_settings(None)] == \
        ["default", "ALGO=Ring", "ALGO=Tree", "PROTO=LL", "PROTO=Simple"]


def test_resolve_adds_default_first_dedupes_and_takes_labels():
    got = resolve_settings([{"NCCL_ALGO": "Tree"}, ("my tree", {"algo": "TREE"}), "tree",
                            ("LL only", {"NCCL_PROTO": "LL"})])
    assert [(s.label, s.env) for s in got] == [
        ("default", {}), ("ALGO=Tree", {"NCCL_ALGO": "Tree"}), ("LL only", {"NCCL_PROTO": "LL"})]
    assert [s.label for s in resolve_settings({"a": {"proto": "LL"}, "b": {"proto": "Simple"}},
                                              with_default=False)] == ["a", "b"]
    assert all(s.launch_env()["NCCL_NVLS_ENABLE"] == "0" for s in got)


@pytest.mark.parametrize("setting, words", [
    ({"NCCL_ALGO": "NVLS"}, "NVLS algorithms use NVLink multicast"),
    ({"NCCL_ALGO": "Ring,NVLSTree"}, "never enables"),
    ({"NCCL_ALGO": "Butterfly"}, "'Butterfly' is not valid; must be one of Tree, Ring"),
    ({"NCCL_ALGO": "^Tree"}, "not valid"),
    ({"NCCL_PROTO": "LL256"}, "NCCL_PROTO='LL256'.*LL, LL128, Simple"),
    ({"NCCL_PROTO": ""}, "NCCL_PROTO"),
    ({"NCCL_MAX_NCHANNELS": 0}, "NCCL_MAX_NCHANNELS=0: must be a positive whole number"),
    ({"NCCL_MIN_NCHANNELS": "four"}, "NCCL_MIN_NCHANNELS"),
    ({"NCCL_MIN_NCHANNELS": 8, "NCCL_MAX_NCHANNELS": 2}, "is more than NCCL_MAX_NCHANNELS"),
    ({"NCCL_P2P_DISABLE": 2}, "NCCL_P2P_DISABLE=2: must be 0 or 1"),
    ({"NCCL_SHM_DISABLE": True}, "NCCL_SHM_DISABLE=True: must be 0 or 1"),
    ({"NCCL_BUFFSIZE": 0}, "NCCL_BUFFSIZE=0: must be a positive number of bytes"),
    ({"NCCL_BUFFSIZE": "lots"}, "NCCL_BUFFSIZE"),
    ({"NCCL_NVLS_ENABLE": 1}, "never enables NVLink multicast"),
    ({"NCCL_NVLS_ENABLE": "1"}, "NCCL_NVLS_ENABLE=0"),
    ({"NCCL_ALOG": "Ring"}, "'NCCL_ALOG' is not an NCCL variable dtlab.tuning sweeps"),
    ({"NCCL_ALGO": "Ring", "algo": "Tree"}, "given twice"),
    ("NCCL_ALGO=Ring", "not a preset"),
])
def test_bad_settings_name_the_variable_and_what_it_accepts(setting, words):
    with pytest.raises(ValueError, match=words):
        resolve_settings([setting])


def test_nvls_enable_zero_is_accepted_and_not_a_choice():
    assert check_setting({"NCCL_NVLS_ENABLE": 0, "NCCL_ALGO": "ring"}) == {"NCCL_ALGO": "Ring"}


def test_grid_and_label_errors():
    with pytest.raises(ValueError, match=r"grid\(NCCL_ALGO=\[\]\)"):
        grid(NCCL_ALGO=[])
    with pytest.raises(ValueError, match="both labelled 'x'"):
        resolve_settings([("x", {"NCCL_PROTO": "LL"}), ("x", {"NCCL_PROTO": "Simple"})])
    with pytest.raises(ValueError, match="no settings"):
        resolve_settings([], with_default=False)


@pytest.mark.parametrize("env, words", [
    ({"NCCL_NVLS_ENABLE": "1"}, "never enables NVLink multicast"),
    ({"NCCL_ALGO": "Tree"}, "put it in the settings"),
])
def test_sweep_refuses_bad_env_before_any_rank_starts(env, words, no_orphans):
    with pytest.raises(ValueError, match=words):
        tuning.sweep(["default"], env=env, backend="gloo", progress=False)


def test_sweep_refuses_bad_arguments_before_any_rank_starts(no_orphans):
    with pytest.raises(ValueError, match="at least 2 ranks"):
        tuning.sweep(["default"], nprocs=1, backend="gloo")
    with pytest.raises(ValueError, match="not a size"):
        tuning.sweep(["default"], min_bytes="1Q", backend="gloo")
    with pytest.raises(ValueError, match="NVLS"):
        tuning.sweep([{"NCCL_ALGO": "NVLS"}], backend="gloo")


@pytest.mark.parametrize("name", ["dtlab.tuning", "dtlab.tuning.settings", "dtlab.tuning.report",
                                  "dtlab.tuning.progress", "dtlab.tuning.account"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
