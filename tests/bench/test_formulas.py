"""nccl-tests' arithmetic, checked against its real output (fixtures/nt_*.txt: nccl-tests 2.19.6,
2x H200, NCCL 2.28.9, copied unchanged from the shared reference data)."""

import os

import pytest

from dtlab.bench import (algbw, busbw, busbw_factor, canonical_op, coll_shape, format_size,
                         parse_nccl_tests, parse_size, sweep_sizes)

FIX = os.path.join(os.path.dirname(__file__), "fixtures")
REAL = ["nt_all_reduce.txt", "nt_broadcast.txt"]
SYNTHETIC = ["synthetic_alltoall_2hosts.txt", "synthetic_sendrecv_blocking.txt"]


def _time_half_step(t_us: float) -> float:
    """Half the last printed digit of nccl-tests' time column (getFloatStr, 7 wide)."""
    return 0.005 if t_us < 9999.995 else 0.05 if t_us < 99999.95 else 0.5


@pytest.mark.parametrize("name", REAL + SYNTHETIC)
def test_algbw_busbw_reproduce_every_row_within_print_rounding(name):
    rep = parse_nccl_tests(os.path.join(FIX, name))
    op, n = rep["header"]["op"], rep["header"]["nranks"]
    checked = 0
    for row in rep["rows"]:
        for g in ("oop", "ip"):
            t = row[g]["time_us"]
            d = _time_half_step(t)
            for fn, key in ((algbw, "algbw"), (busbw, "busbw")):
                # the true time lies within +-d of the printed one; the printed bw is rounded
                slow, fast = fn(op, row["size"], (t + d) * 1e-6, n), fn(op, row["size"], (t - d) * 1e-6, n)
                assert slow - 0.0051 <= row[g][key] <= fast + 0.0051, (name, row["size"], g, key)
                checked += 1
    assert checked == 4 * len(rep["rows"]) > 0


def test_the_headline_numbers_of_the_samples():
    # all_reduce 1 GiB at 3279.91 us -> 327.37 GB/s; broadcast 1 GiB at 2947.26 us -> 364.32
    assert round(algbw("all_reduce", 1073741824, 3279.91e-6, 2), 2) == 327.37
    assert round(busbw("all_reduce", 1073741824, 3279.91e-6, 2), 2) == 327.37
    assert round(busbw("broadcast", 1073741824, 2947.26e-6, 2), 2) == 364.32


def test_busbw_factors_follow_performance_md():
    for n in (2, 4, 8):
        assert busbw_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
        for op in ("all_gather", "reduce_scatter", "all_to_all", "alltoall"):  # both spellings
            assert busbw_factor(op, n) == pytest.approx((n - 1) / n)
        for op in ("broadcast", "reduce", "sendrecv"):
            assert busbw_factor(op, n) == 1.0
    assert busbw("all_reduce", 8 * 10**9, 1.0, 8) == pytest.approx(14.0)


@pytest.mark.parametrize("name", REAL)
def test_sizes_and_counts_match_the_sample_columns(name):
    rep = parse_nccl_tests(os.path.join(FIX, name))
    h = rep["header"]
    sizes = sweep_sizes(h["min_bytes"], h["max_bytes"], h["step"])
    assert sizes == [r["size"] for r in rep["rows"]]
    for r in rep["rows"]:
        shape = coll_shape(h["op"], r["size"], h["nranks"], 4)
        assert (shape.size, shape.count) == (r["size"], r["count"])


def test_chunked_collectives_print_per_rank_counts_like_nccl_tests():
    # all_to_all, 4 ranks (synthetic fixture, laid out like real 16-rank logs: 1024 B -> 16)
    rep = parse_nccl_tests(os.path.join(FIX, "synthetic_alltoall_2hosts.txt"))
    for r in rep["rows"]:
        assert coll_shape("all_to_all", r["size"], 4, 4).count == r["count"] == r["size"] // 16
    # all_gather 2 ranks, 1 GiB: a real GB10 run printed count 134217728
    s = coll_shape("all_gather", 1 << 30, 2, 4)
    assert (s.size, s.count, s.send, s.recv) == (1 << 30, 134217728, 134217728, 268435456)
    s = coll_shape("reduce_scatter", 1 << 30, 2, 4)
    assert (s.size, s.count, s.send, s.recv) == (1 << 30, 134217728, 268435456, 134217728)
    # per-rank chunks are whole 16-byte lines: small sizes round down, to 0 B at 8 B on 2 ranks
    assert coll_shape("all_gather", 8, 2, 4).size == 0
    assert coll_shape("all_gather", 48, 2, 4).size == 32
    assert coll_shape("all_reduce", 8, 2, 4).size == 8


def test_sizes_and_ops_parse_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "1K", "1k", "128M", "1G", "1.5K", "2GiB", 7)] == \
        [8, 1024, 1024, 128 << 20, 1 << 30, 1536, 2 << 30, 7]
    assert [format_size(s) for s in (8, 1024, 1536, 128 << 20, 1 << 30)] == \
        ["8", "1K", "1.5K", "128M", "1G"]
    assert sweep_sizes("1K", "8K", 2) == [1024, 2048, 4096, 8192]
    assert sweep_sizes(8, 100, 4) == [8, 32]
    # torch's names out (dtlab.vocab); nccl-tests' spellings still accepted in
    assert [canonical_op(o) for o in ("allreduce", "all_reduce_perf", "AllGather", "all_to_all",
                                      "alltoall", "alltoall_perf", "send_recv")] == \
        ["all_reduce", "all_reduce", "all_gather", "all_to_all", "all_to_all", "all_to_all",
         "sendrecv"]


@pytest.mark.parametrize("call, words", [
    (lambda: parse_size("12Q"), "1K, 128M"),
    (lambda: sweep_sizes("1M", "1K"), "swap"),
    (lambda: sweep_sizes(8, 64, 1), "factor"),
    (lambda: sweep_sizes(0, 64), "at least 1 byte"),
    (lambda: canonical_op("allreduce2"), "all_reduce, all_gather"),
    (lambda: algbw("all_reduce", 8, 0.0, 2), "positive time"),
    (lambda: busbw("all_reduce", 8, 1.0, 0), "nranks"),
])
def test_bad_input_is_one_clear_value_error(call, words):
    with pytest.raises(ValueError, match=words):
        call()
