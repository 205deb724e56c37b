"""The nccl-tests parser and printer: real samples (nt_*.txt) and synthetic_*.txt shapes."""

import json
import os

import pytest

from dtlab.bench import (parse_nccl_tests, parse_nccl_tests_all, render_report, summary_text,
                         to_frame)
from dtlab.cli import main

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def fx(name):
    return os.path.join(FIX, name)


def read(name):
    with open(fx(name)) as f:
        return f.read()


def test_real_all_reduce_header_rows_trailer():
    rep = parse_nccl_tests(fx("nt_all_reduce.txt"))
    h = rep["header"]
    assert (h["nccl_tests_version"], h["nccl_version"], h["test"], h["op"]) == \
        ("2.19.6", "2.28.9", "all_reduce_perf", "all_reduce")
    assert (h["nranks"], h["nprocs"], h["hosts"]) == (2, 1, ["vm"])
    assert [d["name"] for d in h["devices"]] == ["NVIDIA H200"] * 2
    assert [d["pci"] for d in h["devices"]] == ["0000:00:06", "0000:00:07"]
    assert (h["min_bytes"], h["max_bytes"], h["step"], h["step_kind"]) == (8, 1 << 30, 2, "factor")
    assert (h["warmup_iters"], h["iters"], h["agg_iters"], h["validation"]) == (1, 20, 1, 1)
    assert h["warnings"] == []
    assert len(rep["rows"]) == 28
    last = rep["rows"][-1]
    assert last == {"size": 1073741824, "count": 268435456, "type": "float", "redop": "sum",
                    "root": -1,
                    "oop": {"time_us": 3279.91, "algbw": 327.37, "busbw": 327.37, "wrong": 0},
                    "ip": {"time_us": 3281.13, "algbw": 327.25, "busbw": 327.25, "wrong": 0}}
    assert rep["trailer"] == {"out_of_bounds_values": 0, "out_of_bounds_ok": True,
                              "avg_bus_bandwidth": 86.1093, "concluded": True}


@pytest.mark.parametrize("name", ["nt_all_reduce.txt", "nt_broadcast.txt"])
def test_avg_bus_bandwidth_is_the_mean_of_both_columns(name):
    rep = parse_nccl_tests(fx(name))
    bws = [r[g]["busbw"] for r in rep["rows"] for g in ("oop", "ip")]
    assert sum(bws) / len(bws) == pytest.approx(rep["trailer"]["avg_bus_bandwidth"], abs=0.005)


@pytest.mark.parametrize("name", ["nt_all_reduce.txt", "nt_broadcast.txt",
                                  "synthetic_alltoall_2hosts.txt",
                                  "synthetic_sendrecv_blocking.txt"])
def test_rows_print_back_byte_for_byte(name):
    table = [ln for ln in read(name).splitlines() if ln[:1] == " " and ln.split()[0].isdigit()]
    printed = render_report(parse_nccl_tests(fx(name))).splitlines()
    assert table and all(ln in printed for ln in table)


def test_real_sample_round_trips_through_the_printer():
    text = read("nt_broadcast.txt")
    rep = parse_nccl_tests(text)
    assert render_report(rep) == text.rstrip("\n") + "\n"
    again = parse_nccl_tests(render_report(rep))
    assert again == rep
    assert rep["header"]["source"] == "<text>"
    assert [r["root"] for r in rep["rows"]] == [0] * 28 and rep["rows"][0]["redop"] == "none"


def test_multi_host_alltoall_with_noise_and_na():
    rep = parse_nccl_tests(fx("synthetic_alltoall_2hosts.txt"))
    h = rep["header"]
    assert (h["nranks"], h["nprocs"], h["hosts"]) == (4, 4, ["hostA", "hostB"])
    assert [d["pid"] for d in h["devices"]] == [12812, 12813, 40021, 40022]
    assert h["test"] == "alltoall_perf" and h["op"] == "all_to_all"  # torch's name for it
    assert h["nccl_runtime"] == "2.30.3+cuda13.0"
    assert [r["size"] for r in rep["rows"]] == [1024, 2048, 4096, 8192]  # NCCL INFO line skipped
    assert all(r["oop"]["wrong"] == 0 and r["ip"]["wrong"] is None for r in rep["rows"])
    assert rep["rows"][0]["ip"]["time_us"] == 30.85


def test_sendrecv_git_version_notes_and_wide_times():
    rep = parse_nccl_tests(fx("synthetic_sendrecv_blocking.txt"))
    h = rep["header"]
    assert (h["nccl_tests_version"], h["nccl_tests_git"], h["nccl_version"]) == \
        ("2.20.0", "b4d5bee", "2.31.2")
    assert h["notes"] == ["Blocking Enabled: wait and barrier after each inner iteration (-m)"]
    assert rep["rows"][-1]["oop"]["time_us"] == 10503.4
    assert [r["ip"]["wrong"] for r in rep["rows"]] == [None] * 4
    assert rep["trailer"]["avg_bus_bandwidth"] == 148.772


def test_cut_off_run_with_duplicate_ranks_warns():
    rep = parse_nccl_tests(fx("synthetic_all_reduce_cut_dup_ranks.txt"))
    h = rep["header"]
    assert len(rep["rows"]) == 2 and rep["trailer"] is None
    assert (h["nranks"], h["nprocs"]) == (1, 3)
    assert any("listed more than once" in w and "MPI" in w for w in h["warnings"])
    assert any("did not finish" in w for w in h["warnings"])
    assert "nccl_tests_git" not in h and "unalign" not in h  # keys only where the text has them


def test_not_nccl_tests_is_a_value_error_naming_the_file():
    path = fx("synthetic_not_nccl_tests.txt")
    with pytest.raises(ValueError, match=r"synthetic_not_nccl_tests\.txt: not nccl-tests output"):
        parse_nccl_tests(path)
    with pytest.raises(ValueError, match="no such file"):
        parse_nccl_tests(fx("missing.txt"))


def test_several_runs_in_one_log():
    both = read("nt_all_reduce.txt") + "some job-script echo\n" + read("nt_broadcast.txt")
    reps = parse_nccl_tests_all(both)
    assert [r["header"]["op"] for r in reps] == ["all_reduce", "broadcast"]
    assert [len(r["rows"]) for r in reps] == [28, 28]
    with pytest.raises(ValueError, match="holds 2 nccl-tests runs"):
        parse_nccl_tests(both)


def test_to_frame_has_sweep_columns():
    df = to_frame(fx("nt_all_reduce.txt"))
    assert list(df.columns[:4]) == ["op", "nranks", "backend", "tool"]
    assert set(df["tool"]) == {"nccl-tests"} and len(df) == 28
    assert df["oop_busbw"].iloc[-1] == 327.37 and df["ip_wrong"].sum() == 0


def test_recorded_sweep_csv_comes_back_in_torch_names():
    # data/ keeps what the GPU machine wrote (op "alltoall", before dtlab.vocab); to_frame
    # renames on the way in, and the formulas accept both spellings
    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "h200x2-dtlab-bench",
                        "bandwidth_gpu.csv")
    df = to_frame(path)
    assert "all_to_all" in set(df["op"]) and "alltoall" not in set(df["op"])
    assert to_frame(df) is df  # already renamed: nothing to copy


def test_cli_json_is_the_parsed_report(capsys):
    assert main(["nccl-tests", fx("nt_broadcast.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(parse_nccl_tests(fx("nt_broadcast.txt"))))
    assert set(out) == {"header", "rows", "trailer"}
    assert set(out["rows"][0]) == {"size", "count", "type", "redop", "root", "oop", "ip"}
    assert set(out["rows"][0]["oop"]) == {"time_us", "algbw", "busbw", "wrong"}


def test_cli_text_summary_and_bad_file(capsys):
    assert main(["nccl-tests", fx("nt_all_reduce.txt")]) == 0
    out = capsys.readouterr().out
    assert "peak busbw 327.37 GB/s at 1G" in out and "2 ranks" in out
    assert summary_text(parse_nccl_tests(fx("nt_all_reduce.txt"))) in out
    assert main(["nccl-tests", fx("synthetic_not_nccl_tests.txt")]) == 2
    assert "synthetic_not_nccl_tests.txt: not nccl-tests output" in capsys.readouterr().err
