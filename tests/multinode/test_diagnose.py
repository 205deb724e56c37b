"""diagnose: a run that worked is never named a failure, whatever its consoles say afterwards."""

from dtlab.multinode.diagnose import diagnose

# node1's console of a clean `simulate --mode localhost` run (torch 2.13, trimmed): the hosting
# agent had left when node1 closed the rendezvous
SHUTDOWN_RACE = """\
rank 1/2 node 1 local_rank 0 host vm nic lo address 127.0.0.1 device cpu
[W1127 05:07:54.432896272 TCPStore.cpp:115] [c10d] recvVector failed on SocketImpl(fd=4, \
addr=[::ffff:127.0.0.1]:41982, remote=[::ffff:127.0.0.1]:45581): Failed to recv, got 0 bytes. \
Connection was likely closed. Did the remote server shutdown or crash?
W1127 05:07:54.322000 27483 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1298] \
The node '127.0.0.1_27483_0' has failed to shutdown the rendezvous 'dtlab-sim' due to an error \
of type RendezvousConnectionError.
"""
PLAN = [{"name": f"node{i}", "address": "127.0.0.1", "endpoint": "127.0.0.1:45581",
         "start": True} for i in range(2)]
REPORT = {"ok": True, "ranks_present": 2, "world_size": 2, "bytes": 1 << 18,
          "pairs": [{"kind": "across", "ranks": [0, 1], "nodes": [0, 1], "latency_us": 480.0,
                     "bandwidth_GBps": 0.28}],
          "bandwidth_GBps": {"within": None, "across": 0.28}}
CONSOLES = {"node0": "world: 2 of 2 ranks present\n", "node1": SHUTDOWN_RACE}


def test_a_store_error_after_a_run_that_worked_is_no_failure():
    d = diagnose(CONSOLES, {"node0": 0, "node1": 0}, REPORT, PLAN)
    assert d.failure_class == "no_failure", d
    assert any("did not stop the run" in e["finding"] and "RendezvousConnectionError"
               in e["finding"] for e in d.evidence)


def test_the_same_error_in_a_run_that_failed_still_names_the_failure():
    for codes, report in (({"node0": 0, "node1": 1}, REPORT), ({"node0": 0, "node1": 0}, None),
                          ({"node0": 0, "node1": 0}, {**REPORT, "ok": False})):
        d = diagnose(CONSOLES, codes, report, PLAN)
        assert d.failure_class == "launch_failed", (codes, report, d)


def test_agents_stopped_at_the_time_limit_without_failing_is_unfinished_not_a_failure():
    """A busy machine: both agents still starting their ranks when the rehearsal's limit came."""
    consoles = {"node0": "", "node1": "node_rank is only used for static rdzv_backend. It will "
                "be ignored for rdzv_backend=c10d.\n"}
    d = diagnose(consoles, {"node0": None, "node1": None}, None, PLAN)
    assert d.failure_class == "unfinished", d
    assert [e["file"] for e in d.evidence] == ["node0.log", "node1.log"]
    assert "node_rank is only used" in d.evidence[1]["finding"]
    # one agent failed while the other still ran: that failure is named as before
    d = diagnose(consoles, {"node0": 1, "node1": None}, None, PLAN)
    assert d.failure_class == "launch_failed", d
    # a cluster's logs without exit codes: nothing says the agents were stopped
    assert diagnose(consoles, {}, None, PLAN).failure_class == "launch_failed"


# node1's console of `simulate --fault mtu_mismatch` (real, 2026-11-27, torch 2.13; three lines of
# ~200 kept, the collective lines cut after their shape): small all_reduces passed, the first
# 256 KiB one stalled, and node1's kernel gave up on the connection
STALL = """\
rank 1/2 node 1 local_rank 0 host dtlab-node1 nic eth0 address 10.213.38.2 device cpu
[rank1]:[I1127 20:53:40.156273841 ProcessGroupWrapper.cpp:710] [Rank 1] Running collective: \
CollectiveFingerPrint(SequenceNumber=25, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float
[rank1]:[I1127 20:53:40.163318212 ProcessGroupWrapper.cpp:710] [Rank 1] Running collective: \
CollectiveFingerPrint(SequenceNumber=27, OpType=ALLREDUCE, TensorShape=[65536], TensorDtypes=Float
[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] \
Read error [10.213.38.1]:1408: Connection timed out. This is typically caused by a remote worker \
hanging or bugs in the application.
"""
NET_PLAN = [{"name": f"node{i}", "address": f"10.213.38.{i + 1}", "endpoint": "10.213.38.1:29400",
             "start": True} for i in range(2)]
FULL = [{"src": "node0", "dst": "node1", "mtu": 9000, "largest_payload": 8972, "path_mtu": 9000}]
SHORT = [{"src": "node0", "dst": "node1", "mtu": 9000, "largest_payload": 1472, "path_mtu": 1500}]


def test_a_stall_is_named_mtu_mismatch_only_when_a_ping_probe_finds_a_short_path():
    consoles, codes = {"node0": "", "node1": STALL}, {"node0": None, "node1": 1}
    d = diagnose(consoles, codes, None, NET_PLAN, paths=SHORT)
    assert d.failure_class == "mtu_mismatch", d
    assert any("1472 B" in e["finding"] and "MTU 9000" in e["finding"] for e in d.evidence)
    assert any("ALLREDUCE of shape [65536]" in e["finding"] for e in d.evidence)
    # no probe: unsure, and the summary names the test that would tell
    d = diagnose(consoles, codes, None, NET_PLAN)
    assert d.failure_class == "stalled" and d.summary.startswith("unsure"), d
    assert "ping -M do -s" in d.summary and "10.213.38.1" in d.summary
    # a probe that finds the whole MTU crossing: unsure, and not the MTU
    d = diagnose(consoles, codes, None, NET_PLAN, paths=FULL)
    assert d.failure_class == "stalled" and "not the MTU" in d.summary, d
    # a short path, but not the stalled pair's (node0 -> node2; node1 stalled on node0): unsure
    plan3 = NET_PLAN + [{**NET_PLAN[1], "name": "node2", "address": "10.213.38.3"}]
    elsewhere = [{**FULL[0]}, {**SHORT[0], "dst": "node2"}]
    d = diagnose({**consoles, "node2": ""}, {**codes, "node2": None}, None, plan3, paths=elsewhere)
    assert d.failure_class == "stalled" and "not the MTU" in d.summary, d
    d = diagnose({**consoles, "node2": ""}, {**codes, "node2": None}, None, plan3, paths=SHORT[:0])
    assert d.failure_class == "stalled" and "ping -M do -s" in d.summary, d


def test_a_short_path_in_a_run_that_worked_is_evidence_not_a_failure():
    """One host at 1500 among 9000s: TCP's MSS hides it (measured), the run works."""
    d = diagnose(CONSOLES, {"node0": 0, "node1": 0}, REPORT, PLAN, paths=SHORT)
    assert d.failure_class == "no_failure", d
    assert any(e["kind"] == "path" for e in d.evidence)
    # a run that only hung (as a black hole between real hosts does): unsure, the path beside it
    d = diagnose({"node0": "", "node1": ""}, {"node0": None, "node1": None}, None, PLAN,
                 paths=SHORT)
    assert d.failure_class == "unfinished" and "ping -M do" in d.summary, d
    assert any(e["kind"] == "path" for e in d.evidence)


# node1's console of `simulate --fault blocked_data_ports` (real, 2026-11-27; trimmed), with a
# refusal before node0's store was up, as the agents race at start (ordinary, and no wrong port)
BLOCKED = """\
[I1127 20:47:24.090511330 socket.cpp:931] [c10d - trace] The server socket on [b5b0::]:53692 is \
not yet listening (errno: 111 - Connection refused), will retry.
[I1127 20:47:24.091300898 TCPStore.cpp:316] [c10d - debug] TCP client connected to host \
10.213.144.1:29400
rank 1/2 node 1 local_rank 0 host dtlab-node1 nic eth0 address 10.213.144.2 device cpu
[E1127 20:47:32.050413393 socket.cpp:1028] [c10d] The client socket has timed out after 5000ms \
while trying to connect to (10.213.144.1, 41601).
[E1127 20:47:32.050805634 TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to host \
10.213.144.1:41601 - timed out (try=0, timeout=5000ms): The client socket has timed out after \
5000ms while trying to connect to (10.213.144.1, 41601).
"""


def test_a_port_beyond_the_rendezvous_that_times_out_is_blocked_data_ports():
    plan = [{**p, "address": f"10.213.144.{i + 1}", "endpoint": "10.213.144.1:29400"}
            for i, p in enumerate(NET_PLAN)]
    host = "torch.distributed.DistStoreError: wait timeout after 5000ms, keys: /default_pg/0//cpu//0/1\n"
    d = diagnose({"node0": host, "node1": BLOCKED}, {"node0": 1, "node1": 1}, None, plan)
    assert d.failure_class == "blocked_data_ports", d
    assert "41601" in d.summary and "29400" in d.summary
    assert any("wait timeout" in e["finding"] for e in d.evidence)
    # the same console refused on that port after the rendezvous: nothing listens, no firewall
    refused = BLOCKED + "[I1127 20:47:30.1 socket.cpp:931] (errno: 111 - Connection refused)\n"
    d = diagnose({"node0": host, "node1": refused}, {"node0": 1, "node1": 1}, None, plan)
    assert d.failure_class != "blocked_data_ports", d


def test_the_recorded_rehearsals_diagnose_again_as_recorded():
    """data/cpu-multinode-netns (notebook 04's fallback): the diagnosis read again from each
    result, with and without its ping probe, and busbw beside iperf3."""
    import json
    import os

    from dtlab.course.recorded import data_root
    from dtlab.multinode.simulate import beside_iperf, rediagnose

    def load(name):
        with open(os.path.join(data_root(), "cpu-multinode-netns", name)) as f:
            return json.load(f)

    mtu, ports = load("mtu_mismatch.json"), load("blocked_data_ports.json")
    assert rediagnose(mtu).failure_class == "mtu_mismatch"
    assert rediagnose(mtu, paths=None).failure_class == "stalled"
    assert rediagnose(ports).failure_class == "blocked_data_ports"
    assert rediagnose(load("slow_link-iperf.json")).failure_class == "slow_link"
    slow = load("slow_link-iperf.json")  # at 100 Mbit/s the link is the bound: busbw ~ iperf3
    assert 0.9 < slow["bandwidth_GBps"]["across"] * 8 / slow["iperf3"]["Gbps"] < 1.1
    assert "busbw/iperf3" in beside_iperf(slow)
    assert beside_iperf(mtu).startswith("nothing to compare")
