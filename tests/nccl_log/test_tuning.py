"""The tuning table (src/graph/tuning.cc), both layouts, read row by row."""

from nccl_synth import ALGOS_218, ALGOS_228, FUNCS, PROTOS, tuning_table_blocks, tuning_table_wide

from dtlab.nccl_log.tuning import TableBuilder, classify_table_line


def build(table_lines):
    t = TableBuilder()
    for line in table_lines:
        found = classify_table_line(line)
        assert found, line
        t.feed(*found)
    return t.rows()


def cell(rows, f, a, p):
    return next(r for r in rows if (r["function"], r["algorithm"], r["protocol"]) == (f, a, p))


def test_block_layout_every_cell_once_including_the_short_last_block():
    rows = build(tuning_table_blocks())
    assert len(rows) == len(FUNCS) * len(ALGOS_228) * len(PROTOS)
    assert cell(rows, "AllReduce", "Ring", "Simple") == {
        "function": "AllReduce", "algorithm": "Ring", "protocol": "Simple", "latency_us": 12.0,
        "bandwidth_gbs": 110.0, "max_threads": 512}
    assert cell(rows, "AllReduce", "Tree", "LL128")["max_threads"] == 640
    assert cell(rows, "Broadcast", "PAT", "LL")["bandwidth_gbs"] == 0.0


def test_wide_layout_of_older_releases():
    rows = build(tuning_table_wide())
    assert len(rows) == len(FUNCS) * len(ALGOS_218) * len(PROTOS)
    assert cell(rows, "AllReduce", "Tree", "LL")["latency_us"] == 6.4
    assert cell(rows, "ReduceScatter", "Ring", "LL")["bandwidth_gbs"] == 19.5


def test_other_lines_are_not_table_rows():
    for msg in ["Channel 00/02 :    0   1", "Using network IB", "Trees [0] 1/-1/-1->0->-1",
                "comm 0xa rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"]:
        assert classify_table_line(msg) is None


def test_rows_before_any_header_are_ignored():
    t = TableBuilder()
    t.feed(*classify_table_line("    AllReduce |     6.4/   9.8 |"))
    assert t.rows() == []
