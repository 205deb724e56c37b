"""Step 1: what a multi-node launch left, read once into :class:`Facts`.

The consoles are read with the patterns below (torchrun's, the c10d store's, gloo's and NCCL's
lines); the plan says which address and port each node dialled and which node hosts the
rendezvous (the first); ``paths`` are ``ping -M do`` probes (:func:`dtlab.multinode.netns.path_mtu`),
None where nobody probed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IFNAME = re.compile(r"Unable to find address for: (\S+)|no socket interface found|"
                    r"Bootstrap : no socket interface")
CONNECT_TO = re.compile(r"connect(?:ing)? to (?:any network address of )?\(([^,]+), (\d+)\)")
NO_ROUTE = re.compile(r"errno: 113 - No route to host|Host is unreachable")
REFUSED = re.compile(r"errno: 111 - Connection refused")
STORE_FAIL = re.compile(r"RendezvousConnectionError|TCP client failed to connect")
RDZV_TIMEOUT = re.compile(r"RendezvousTimeoutError")
TBF = re.compile(r"tbf .*?rate (\d+(?:\.\d+)?)([KMG]?)bit", re.I)
# gloo's pair, once established, failing with the kernel's ETIMEDOUT: sent data never acknowledged
STALL = re.compile(r"(?:Read|Write) error \[([^\]]+)\]:\d+: Connection timed out")
CONNECTED = re.compile(r"TCP client connected to host (\S+):(\d+)")
RANK_LINE = re.compile(r"^rank \d+/\d+ node \d+ ", re.M)  # check.py's: the node's ranks started
TIMED_OUT = re.compile(r"timed out after \d+ms while trying to connect to \(([^,]+), (\d+)\)")
STORE_WAIT = re.compile(r"wait timeout after \d+ms, keys: \S+")
COLLECTIVE = re.compile(r"Running collective: CollectiveFingerPrint\(SequenceNumber=\d+, "
                        r"OpType=(\w+), TensorShape=\[([\d, ]*)\]")


@dataclass
class Facts:
    consoles: dict[str, str]
    codes: dict[str, int | None]  # a node's agent's exit code; None: still running when stopped
    report: dict | None  # the check's report.json, None if it never reported
    plan: list[dict]
    host: str  # the node that hosts the rendezvous (the plan's first)
    host_addr: str
    host_port: int
    qdiscs: dict[str, str] = field(default_factory=dict)
    paths: list[dict] | None = None
    addresses: set[str] = field(default_factory=set)  # every node's own address
    bad_if: dict[str, str] = field(default_factory=dict)  # node: its "no interface" line
    stalled: dict[str, str] = field(default_factory=dict)  # node: console, a pair stalled
    store_failed: dict[str, str] = field(default_factory=dict)  # node: console, a store error
    silent: list[str] = field(default_factory=list)  # nodes whose console is empty
    host_timed_out: bool = False  # the hosting agent's rendezvous timed out
    succeeded: bool = False  # every started agent exited 0 and the check found the world whole

    @staticmethod
    def log(node: str) -> str:
        """The evidence file a node's console stands for."""
        return f"{node}.log"

    @property
    def started(self) -> list[str]:
        return [p["name"] for p in self.plan if p.get("start", True)]

    @property
    def short_paths(self) -> list[dict]:
        """Probed paths that carry less than the sending interface's MTU."""
        return [p for p in self.paths or []
                if p.get("path_mtu") is not None and p["path_mtu"] < p["mtu"]]


def gather(consoles: dict[str, str], codes: dict[str, int | None], report: dict | None,
           plan: list[dict], qdiscs: dict[str, str] | None = None,
           paths: list[dict] | None = None) -> Facts:
    host_addr, host_port = endpoint(plan[0])
    f = Facts(consoles, codes, report, plan, plan[0]["name"], host_addr, host_port,
              qdiscs or {}, paths, addresses={p["address"] for p in plan})
    f.bad_if = {n: line(t, IFNAME) for n, t in consoles.items() if IFNAME.search(t)}
    f.stalled = {n: t for n, t in consoles.items() if STALL.search(t)}
    f.store_failed = {n: t for n, t in consoles.items() if STORE_FAIL.search(t)}
    f.silent = [p["name"] for p in plan if not consoles.get(p["name"], "").strip()]
    f.host_timed_out = bool(RDZV_TIMEOUT.search(consoles.get(f.host, "")))
    f.succeeded = (report is not None and bool(report.get("ok"))
                   and all(codes.get(n) == 0 for n in f.started))
    return f


def line(text: str, pattern: re.Pattern) -> str | None:
    """The first line of ``text`` that ``pattern`` finds something in, stripped, at most 300."""
    for ln in text.splitlines():
        if pattern.search(ln):
            return ln.strip()[:300]
    return None


def endpoint(p: dict) -> tuple[str, int]:
    host, _, port = p["endpoint"].rpartition(":")
    return host, int(port)


def path_finding(p: dict) -> str:
    return (f"to {p['dst']}: the largest payload that crosses is {p['largest_payload']} B (path "
            f"MTU {p['path_mtu']} = payload + 28), while {p['src']}'s eth0 has MTU {p['mtu']}")
