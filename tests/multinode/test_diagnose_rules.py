"""The multi-node diagnosis rule by rule: each names its failure from its own evidence and passes
on evidence that is not its own; the first rule that names it decides; unsure where the evidence
does not decide. Consoles are SYNTHETIC (written here, in the shape of torch 2.13's lines)."""

import json

import pytest

from dtlab.multinode.diagnose import diagnose, network, outcome, rendezvous
from dtlab.multinode.diagnose.facts import gather
from dtlab.multinode.diagnose.verdict import CLASSES, RULES, Verdict
from dtlab.multinode.faults import FAULTS

PLAN = [{"name": f"node{i}", "address": f"10.0.0.{i + 1}", "endpoint": "10.0.0.1:29400",
         "start": True} for i in range(3)]
REPORT = {"ok": True, "ranks_present": 6, "world_size": 6, "bytes": 1 << 20,
          "pairs": [{"kind": "across", "ranks": [0, 2], "nodes": [0, 1], "latency_us": 100.0,
                     "bandwidth_GBps": 0.0125}],
          "bandwidth_GBps": {"within": 1.0, "across": 0.0125}}
OK_CODES = {"node0": 0, "node1": 0, "node2": 0}
FAILED = {"node0": 1, "node1": 1, "node2": 1}

IFNAME = "RuntimeError: [../gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find " \
         "address for: eth9\n"
NCCL_IFNAME = "node1:77:77 [0] NCCL INFO NCCL_SOCKET_IFNAME set to eth9\n" \
              "node1:77:77 [0] bootstrap.cc:57 NCCL WARN Bootstrap : no socket interface found\n"
STALL = "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [10.0.0.1]:1408: Connection " \
        "timed out. This is typically caused by a remote worker hanging.\n"
NO_ROUTE = ("[W] TCP client failed to connect/validate to host 10.0.0.250:29400 - retrying: The "
            "client socket has failed to connect to any network address of (10.0.0.250, 29400). "
            "The client socket has failed to connect to 10.0.0.250:29400 (errno: 113 - No route "
            "to host).\n")
UNANSWERED_ADDR = ("[E] The client socket has timed out after 6000ms while trying to connect to "
                   "(10.0.0.250, 29400).\n[E] TCP client failed to connect/validate to host "
                   "10.0.0.250:29400 - timed out (try=1, timeout=6000ms)\n")
REFUSED_PORT = ("[I] The client socket will attempt to connect to an IPv4 address of (10.0.0.1, "
                "29401).\n[I] The server socket on 10.0.0.1:29401 is not yet listening (errno: 111"
                " - Connection refused), will retry.\n[E] The client socket has timed out after "
                "6000ms while trying to connect to (10.0.0.1, 29401).\n[E] TCP client failed to "
                "connect/validate to host 10.0.0.1:29401 - timed out\n")
DROPPED = ("[E] The client socket has timed out after 6000ms while trying to connect to (10.0.0.1,"
           " 29400).\n[E] TCP client failed to connect/validate to host 10.0.0.1:29400 - timed "
           "out\ntorch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The "
           "connection to the C10d store has failed.\n")
REFUSED_HOST = DROPPED.replace("[E] The client", "[I] (errno: 111 - Connection refused)\n[E] The client", 1)
BEYOND = ("[I] TCP client connected to host 10.0.0.1:29400\nrank 2/6 node 1 local_rank 0 host h1 "
          "nic eth0 address 10.0.0.2 device cpu\n[E] The client socket has timed out after 5000ms "
          "while trying to connect to (10.0.0.1, 41601).\n[E] TCP client failed to connect/validate "
          "to host 10.0.0.1:41601 - timed out\n")
HOST_WAIT = "torch.distributed.DistStoreError: wait timeout after 5000ms, keys: /default_pg/0//cpu//0/1\n"
RDZV_TIMEOUT = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
UNEXPLAINED = "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The " \
              "connection to the C10d store has failed.\n"
TBF = "qdisc tbf 8001: root refcnt 2 rate 100Mbit burst 32Kb lat 50ms"
SHORT = [{"src": "node0", "dst": "node1", "mtu": 9000, "largest_payload": 1472, "path_mtu": 1500}]
FULL = [{"src": "node0", "dst": "node1", "mtu": 9000, "largest_payload": 8972, "path_mtu": 9000}]


def consoles(node1="", node0="world: 6 of 6 ranks present\n", node2=""):
    return {"node0": node0, "node1": node1, "node2": node2}


def verdict(cons, codes=FAILED, report=None, qdiscs=None, paths=None) -> Verdict:
    return Verdict(gather(cons, codes, report, PLAN, qdiscs, paths))


# (what the consoles and the rest say, the class, whether it is sure, a phrase of its summary)
CASES = {
    "wrong_ifname (gloo)": (dict(cons=consoles(IFNAME)), "wrong_ifname", True, "interface eth9"),
    "wrong_ifname (NCCL)": (dict(cons=consoles(NCCL_IFNAME)), "wrong_ifname", True,
                            "(named by GLOO/NCCL_SOCKET_IFNAME)"),
    "mtu_mismatch": (dict(cons=consoles(STALL), paths=SHORT), "mtu_mismatch", True,
                     "over 1500 bytes lost between node0 and node1"),
    "stalled, no probe": (dict(cons=consoles(STALL)), "stalled", False, "ping -M do -s"),
    "stalled, the path whole": (dict(cons=consoles(STALL), paths=FULL), "stalled", False,
                                "not the MTU"),
    "blocked_data_ports": (dict(cons=consoles(BEYOND, node0=HOST_WAIT)), "blocked_data_ports",
                           True, "another port of node0"),
    "wrong_master_addr (no route)": (dict(cons=consoles(NO_ROUTE)), "wrong_master_addr", True,
                                     "an address no node has"),
    "wrong_master_addr (silence)": (dict(cons=consoles(UNANSWERED_ADDR)), "wrong_master_addr",
                                    True, "10.0.0.250:29400"),
    "wrong_port": (dict(cons=consoles(REFUSED_PORT)), "wrong_port", True,
                   "nothing listens on that port"),
    "blocked_port": (dict(cons=consoles(DROPPED, node0=RDZV_TIMEOUT)), "blocked_port", True,
                     "timed out without being refused"),
    "refused on the host's own port": (dict(cons=consoles(REFUSED_HOST)), "wrong_port", True,
                                       "is the first node's agent running?"),
    "the store, unexplained": (dict(cons=consoles(UNEXPLAINED)), "launch_failed", False,
                               "the rendezvous store could not be reached"),
    "missing_node": (dict(cons=consoles("node1 started\n", node0=RDZV_TIMEOUT)), "missing_node",
                     True, "without node2"),
    "world_incomplete": (dict(cons=consoles(), codes=OK_CODES,
                              report={**REPORT, "ok": False, "missing": [5]}),
                         "world_incomplete", True, "'missing': [5]"),
    "slow_link (tc)": (dict(cons=consoles(), codes=OK_CODES, report=REPORT,
                            qdiscs={"node1": TBF}), "slow_link", True, "rate-limited"),
    "no_failure": (dict(cons=consoles(), codes=OK_CODES, report=REPORT), "no_failure", True,
                   "every rank present"),
    "unfinished": (dict(cons=consoles(), codes={"node0": None, "node1": 0, "node2": None}),
                   "unfinished", False, "node0, node2 were stopped"),
    "launch_failed": (dict(cons=consoles("RuntimeError: boom\n")), "launch_failed", False,
                      "before the check reported"),
    "launch_failed, the rendezvous timed out": (
        dict(cons=consoles("RuntimeError: boom\n", node0=RDZV_TIMEOUT, node2="x\n")),
        "launch_failed", False, "the rendezvous timed out"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_rule_names_its_failure_and_is_unsure_where_the_evidence_does_not_decide(case):
    kw, cls, sure, phrase = CASES[case]
    d = diagnose(kw.pop("cons"), kw.pop("codes", FAILED), kw.pop("report", None), PLAN, **kw)
    assert (d.failure_class, d.confident) == (cls, sure), d
    assert phrase in d.summary, d.summary
    assert d.evidence and d.culprit_ranks == [] and d.collective_seq is None and d.op is None
    assert json.loads(json.dumps(d.to_dict()))["failure_class"] == cls
    text = d.render()
    assert text.startswith(f"failure class : {cls}\nconfident     : {'yes' if sure else 'no'}")
    assert "culprit ranks" not in text and d.summary in text


def test_a_rule_passes_on_evidence_that_is_not_its_own():
    """Every rule, given the evidence of a run that worked, passes -- but no_failure; and each
    class's rule passes on another class's evidence."""
    worked = verdict(consoles(), OK_CODES, REPORT)
    named = {rule.__name__: rule(worked) for rule in RULES}
    assert {k for k, d in named.items() if d is not None} == {"no_failure", "launch_failed"}
    stall = verdict(consoles(STALL))
    assert network.mtu_mismatch(stall) is None  # no probe: not for this rule to decide
    assert network.stalled(stall).failure_class == "stalled"
    assert network.mtu_mismatch(verdict(consoles(STALL), paths=FULL)) is None
    assert network.wrong_ifname(stall) is None and rendezvous.store_unreachable(stall) is None
    assert rendezvous.missing_node(verdict(consoles("x\n", node0=RDZV_TIMEOUT, node2="y\n"))) is None
    assert outcome.unfinished(verdict(consoles(), {"node0": 1, "node1": None, "node2": None})) is None
    assert outcome.world_incomplete(worked) is None and outcome.slow_link(worked) is None


def test_a_store_connect_rule_reads_one_node_at_a_time():
    c = rendezvous.Connect("node1", REFUSED_PORT, ("10.0.0.1", 29401))
    v = verdict(consoles(REFUSED_PORT))
    assert [r(v, c) is not None for r in rendezvous.CONNECT_RULES] == [False, False, True, False, True]
    c = rendezvous.Connect("node1", DROPPED, ("10.0.0.1", 29400))
    assert [r(v, c) is not None for r in rendezvous.CONNECT_RULES] == [False, False, False, True, False]
    # two nodes failing differently: the first in the consoles' order decides
    assert diagnose(consoles(REFUSED_PORT, node2=NO_ROUTE), FAILED, None, PLAN
                    ).failure_class == "wrong_port"
    assert diagnose({"node0": "", "node2": NO_ROUTE, "node1": REFUSED_PORT}, FAILED, None, PLAN
                    ).failure_class == "wrong_master_addr"


def test_earlier_evidence_decides_over_later():
    """An interface not found beats a stall; a stall beats store errors (agents tearing down)."""
    assert diagnose(consoles(STALL + IFNAME), FAILED, None, PLAN).failure_class == "wrong_ifname"
    assert diagnose(consoles(STALL + UNEXPLAINED), FAILED, None, PLAN).failure_class == "stalled"
    # a store error in a run that worked: evidence, not the verdict
    d = diagnose(consoles(UNEXPLAINED), OK_CODES, REPORT, PLAN)
    assert d.failure_class == "no_failure" and "did not stop the run" in d.evidence[0]["finding"]


def test_slow_link_by_one_slow_pair_among_several():
    pairs = [{"kind": "across", "ranks": [0, i], "nodes": [0, i], "latency_us": 50.0,
              "bandwidth_GBps": bw} for i, bw in enumerate((1.0, 1.1, 0.2), start=1)]
    d = diagnose(consoles(), OK_CODES, {**REPORT, "pairs": pairs}, PLAN)
    assert d.failure_class == "slow_link" and d.summary.startswith("1 node pair(s)"), d
    even = [{**p, "bandwidth_GBps": 1.0} for p in pairs]
    assert diagnose(consoles(), OK_CODES, {**REPORT, "pairs": even}, PLAN).failure_class == "no_failure"


def test_every_fault_and_every_rule_has_a_class():
    assert set(FAULTS) <= set(CLASSES)
    assert RULES[-1] is outcome.launch_failed  # always decides
    named = {case[1] for case in CASES.values()}
    assert named == set(CLASSES)
