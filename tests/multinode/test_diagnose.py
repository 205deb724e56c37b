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
    assert d["failure_class"] == "no_failure", d
    assert any("did not stop the run" in e["finding"] and "RendezvousConnectionError"
               in e["finding"] for e in d["evidence"])


def test_the_same_error_in_a_run_that_failed_still_names_the_failure():
    for codes, report in (({"node0": 0, "node1": 1}, REPORT), ({"node0": 0, "node1": 0}, None),
                          ({"node0": 0, "node1": 0}, {**REPORT, "ok": False})):
        d = diagnose(CONSOLES, codes, report, PLAN)
        assert d["failure_class"] == "launch_failed", (codes, report, d)


def test_agents_stopped_at_the_time_limit_without_failing_is_unfinished_not_a_failure():
    """A busy machine: both agents still starting their ranks when the rehearsal's limit came."""
    consoles = {"node0": "", "node1": "node_rank is only used for static rdzv_backend. It will "
                "be ignored for rdzv_backend=c10d.\n"}
    d = diagnose(consoles, {"node0": None, "node1": None}, None, PLAN)
    assert d["failure_class"] == "unfinished", d
    assert [e["file"] for e in d["evidence"]] == ["node0.log", "node1.log"]
    assert "node_rank is only used" in d["evidence"][1]["finding"]
    # one agent failed while the other still ran: that failure is named as before
    d = diagnose(consoles, {"node0": 1, "node1": None}, None, PLAN)
    assert d["failure_class"] == "launch_failed", d
    # a cluster's logs without exit codes: nothing says the agents were stopped
    assert diagnose(consoles, {}, None, PLAN)["failure_class"] == "launch_failed"
