"""The network probes beside a rehearsal: path_mtu's bisection (ping -M do), iperf3's JSON and a
real iperf3 run between two namespaces -- and nothing left behind."""

import os

import shutil

import pytest
from conftest import assert_no_descendants

from dtlab.multinode import iperf, netns

ROOT = netns.available() is None
needs_root = pytest.mark.skipif(not ROOT or not shutil.which("ping"),
                                reason=f"netns: {netns.available() or 'no ping (iputils-ping)'}")
needs_iperf3 = pytest.mark.skipif(iperf.available() is not None,
                                  reason=str(iperf.available()))
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


class _FakeNet:
    n, addresses = 2, ["10.0.0.1", "10.0.0.2"]

    def link_mtu(self, node):
        return 9000


def test_path_mtu_bisects_to_the_largest_payload_that_crosses(monkeypatch):
    # probes: the full MTU, then 1472 and 1473 (Ethernet), then halving what is left
    for limit, probes in ((1472, 3), (8972, 1), (4000, 16), (1000, 13), (0, 13), (-1, 3)):
        sent = []

        def ping(net, src, dst, payload, wait):
            sent.append(payload)
            return payload <= limit

        monkeypatch.setattr(netns, "ping", ping)
        p = netns.path_mtu(_FakeNet(), 0, 1, wait=0.01)
        assert p["largest_payload"] == (limit if limit >= 0 else None), (limit, p)
        assert p["path_mtu"] == (limit + 28 if limit >= 0 else None)
        assert p["mtu"] == 9000 and p["probes"] == len(sent) == probes, (limit, sent)


@pytest.fixture
def net():
    before = set(netns.namespaces())
    with netns.Network(2) as n:
        yield n
    assert set(netns.namespaces()) <= before
    assert_no_descendants()


@needs_root
def test_ping_finds_a_switch_port_left_at_1500_between_jumbo_hosts(net):
    assert netns.path_mtu(net, 0, 1)["probes"] == 1  # everything at 1500: one probe crosses
    for i in range(2):
        net.set_mtu(i, 9000, "both")
    net.set_mtu(1, 1500, "hub")
    p = netns.path_mtu(net, 0, 1, wait=0.1)
    assert (p["mtu"], p["largest_payload"], p["path_mtu"]) == (9000, 1472, 1500), p
    with pytest.raises(ValueError, match="give node, hub or both"):
        net.set_mtu(1, 1500, "switch")


def test_iperf3_json_parsed_from_a_real_capture():
    """fixtures/real_iperf3_veth_tbf_100mbit.json: `iperf3 -c ... -J -t 2` from one namespace to
    another over a veth pair under tc tbf 100mbit (iperf 3.12, this 2-core VM, 2026-11-27)."""
    text = open(os.path.join(FIXTURES, "real_iperf3_veth_tbf_100mbit.json")).read()
    r = iperf.parse(text)
    assert r["version"] == "iperf 3.12" and r["seconds"] == pytest.approx(2, abs=0.1)
    assert 0.09 < r["Gbps"] <= r["sent_Gbps"] <= 0.101, r  # 100 Mbit/s is the ceiling
    assert iperf.parse("iperf3: warning\n" + text) == r  # a line before the JSON is skipped
    with pytest.raises(ValueError, match="not iperf3 -J output"):
        iperf.parse("iperf3: error - unable to connect to server")
    with pytest.raises(RuntimeError, match="unable to connect"):
        iperf.parse('{"start": {}, "end": {}, "error": "unable to connect to server"}')


def test_without_iperf3_it_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(iperf.shutil, "which", lambda name: None)
    why = iperf.available()
    assert why and "\n" not in why and "apt-get install iperf3" in why
    with pytest.raises(RuntimeError, match="apt-get install iperf3"):
        iperf.iperf(_FakeNet(), 0, 1)


@needs_root
@needs_iperf3
def test_iperf3_between_two_namespaces_measures_the_rate_limit(net):
    net.rate_limit(1, "100mbit")
    r = iperf.iperf(net, 0, 1, seconds=1)
    assert (r["server"], r["client"]) == ("node0", "node1")
    assert 0.05 < r["Gbps"] < 0.105, r  # tbf 100mbit, less TCP/IP headers
    with pytest.raises(ValueError, match="both node 0"):
        iperf.iperf(net, 0, 0)
