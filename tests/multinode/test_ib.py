"""dtlab.multinode.ib on the real public outputs of data/public-ib/ (what 04 section 6 reads):
every port with its state and rate, the ports not ready and why, perfquery's counters,
perftest's rows, ibtracert's hops."""

import os

from dtlab.course.recorded import data_root
from dtlab.multinode import ib

IB = os.path.join(data_root(), "public-ib")


def read(*parts):
    with open(os.path.join(IB, *parts)) as f:
        return f.read()


def test_ibstat_reads_every_port_of_every_adapter():
    ports = ib.ibstat(read("ibstat-nccl-tests-128", "ibstat.txt"))
    assert [(p["ca"], p["port"], p["state"], p["physical_state"], p["rate"], p["base_lid"])
            for p in ports] == [("mlx5_0", 1, "Active", "LinkUp", 200, 569),
                                ("mlx5_1", 1, "Down", "Disabled", 10, 65535)]
    assert ports[0]["ca_type"] == "MT4123" and ports[0]["link_layer"] == "InfiniBand"
    two = ib.ibstat(read("ibstat-rdma-core-847", "part2-after-disable.txt"))
    assert [(p["port"], p["state"], p["rate"]) for p in two] == [(1, "Down", 10), (2, "Active", 56)]
    assert two[1]["base_lid"] is None and two[1]["link_layer"] is None   # the excerpt stops there


def test_port_problems_name_the_port_and_why():
    ports = ib.ibstat(read("ibstat-nccl-tests-128", "ibstat.txt"))
    bad, = ib.port_problems(ports, expected_rate=200)
    assert (bad["ca"], bad["port"]) == ("mlx5_1", 1)
    assert "state Down" in bad["why"] and "physical state Disabled" in bad["why"]
    assert ib.port_problems(ib.ibstat(read("ibstat-deepep-303", "ibstat.txt")), 400) == []
    slow, = ib.port_problems([dict(ports[0], rate=100)], expected_rate=200)   # trained at half
    assert slow["why"] == "rate 100 Gb/s, expected 200"
    nosm, = ib.port_problems([dict(ports[0], state="Initializing")], expected_rate=200)
    assert nosm["why"].startswith("state Initializing")


def test_perfquery_counters_and_their_units():
    busy = ib.perfquery(read("perfquery-netdata-2620", "perfquery-e-x.txt"))
    assert busy["PortXmitData"] == 13672645927 and busy["CounterSelect"] == 0
    assert busy["PortXmitData"] * ib.DATA_UNIT_BYTES == 54690583708
    idle = ib.perfquery(read("perfquery-infiniband-diags-16", "perfquery-x.txt"))
    assert set(ib.ERROR_COUNTERS) <= set(idle) and not any(idle[k] for k in ib.ERROR_COUNTERS)


def test_perftest_rows_are_message_rate_times_size():
    run = ib.perftest(read("ib_write_bw-perftest-273", "ib_write_bw.txt"))
    assert run["header"]["Link type"] == "Ethernet" and run["header"]["Mtu"] == "4096[B]"
    row, = run["rows"]
    assert abs(row["bytes"] * 8 * row["msg_rate_mpps"] / 1e3 - row["bw_avg_gbps"]) < 0.005
    sweep = ib.perftest(read("ib_write_bw-perftest-132", "client-part1.txt"))["rows"]
    assert [r["bytes"] for r in sweep] == [2, 4, 8, 16]


def test_ibtracert_hops():
    hops = ib.ibtracert(read("ibtracert-oracle-sun-dcs72", "ibtracert.txt"))
    assert [(h["out_port"], h["lid"], h["in_port"]) for h in hops] == [(1, 22, 9), (2, 24, 8)]
