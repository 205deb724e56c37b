"""Simulated hosts on one machine: one network namespace per node, joined by a bridge.

Contract: :class:`Network` makes, for ``n`` nodes, the namespaces ``dtlab-<pid>-hub`` (a bridge
``br0``) and ``dtlab-<pid>-n<i>`` (interface ``eth0``, address ``10.213.<k>.<i+1>/24``, ``lo``
up, an ``/etc/hosts`` naming every node), with a veth pair from each node's ``eth0`` to the hub's bridge. Nothing is made in the
host's own namespace -- no link, no address, no route, no rule -- so removing the namespaces
removes everything (links, qdiscs, nftables rules). :meth:`Network.close` does that; a killed
run's reaper runs :meth:`Network.undo_commands`; names carry the creating process's pid, so
:func:`clear_leftovers` removes what is left all the same (its pid is gone). Needs root and
iproute2::

    with Network(2) as net:                 # sudo python -c ...
        net.exec_prefix(0)                  # ['ip', 'netns', 'exec', 'dtlab-123-n0']
        net.rate_limit(1, "200mbit")        # tc tbf on both ends of node 1's link
        net.drop_port(0, 29400)             # nftables: SYNs to node 0's port vanish
        net.set_mtu(1, 1500, "hub")         # node 1's switch port at 1500
        path_mtu(net, 0, 1)["path_mtu"]     # 1500: what `ping -M do -s SIZE` finds
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

PREFIX = "dtlab-"
IFNAME = "eth0"  # every node's interface, as on a cloud VM
ETC = "/etc/netns"  # `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over /etc/hosts


def available() -> str | None:
    """None if namespaces can be made here, else why not (one line)."""
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    if not shutil.which("ip"):
        return "no `ip` command (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def namespaces() -> list[str]:
    """Every network namespace's name (``ip netns list``; none where there is no ``ip``)."""
    if not shutil.which("ip"):
        return []
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def clear_leftovers() -> list[str]:
    """Remove ``dtlab-<pid>-*`` namespaces whose creating process is gone; returns them."""
    gone = []
    for ns in namespaces():
        m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _ip("netns", "delete", ns, check=False)
            gone.append(ns)
    if os.path.isdir(ETC):
        for d in os.listdir(ETC):
            m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", d)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                shutil.rmtree(os.path.join(ETC, d), ignore_errors=True)
    return gone


class Network:
    """``n`` simulated nodes; see the module docstring."""

    def __init__(self, n: int):
        self.n = n
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.nodes = [f"{self.tag}-n{i}" for i in range(n)]
        self.subnet = 10 + os.getpid() % 240  # two concurrent runs get different subnets
        self.addresses = [f"10.213.{self.subnet}.{i + 1}" for i in range(n)]
        self.made: list[str] = []
        self.made_etc: list[str] = []

    def __enter__(self) -> "Network":
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def create(self) -> None:
        clear_leftovers()
        for ns in [self.hub, *self.nodes]:
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.nodes):
            _ip("-n", self.hub, "link", "add", f"n{i}", "type", "veth",
                "peer", "name", IFNAME, "netns", ns)
            _ip("-n", self.hub, "link", "set", f"n{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", IFNAME)
            _ip("-n", ns, "link", "set", IFNAME, "up")
        self._write_hosts()

    def hostname(self, node: int) -> str:
        return f"dtlab-node{node}"

    def _write_hosts(self) -> None:
        """Each node resolves every node's hostname, as cluster DNS would."""
        text = "127.0.0.1 localhost\n" + "".join(
            f"{a} {self.hostname(i)}\n" for i, a in enumerate(self.addresses))
        for ns in self.nodes:
            os.makedirs(os.path.join(ETC, ns), exist_ok=True)
            self.made_etc.append(os.path.join(ETC, ns))
            with open(os.path.join(ETC, ns, "hosts"), "w") as f:
                f.write(text)

    def exec_prefix(self, node: int) -> list[str]:
        return ["ip", "netns", "exec", self.nodes[node]]

    def rate_limit(self, node: int, rate: str, burst: str = "32kb", latency: str = "50ms") -> None:
        """tc tbf on both ends of node ``node``'s link: its traffic, both ways, at ``rate``."""
        for ns, dev in ((self.nodes[node], IFNAME), (self.hub, f"n{node}")):
            r = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                                "rate", rate, "burst", burst, "latency", latency],
                               capture_output=True, text=True, timeout=20)
            if r.returncode:
                raise RuntimeError(f"tc tbf on {ns}/{dev}: {r.stderr.strip()}")

    def drop_port(self, node: int, port: int) -> str:
        """Drop (not refuse) TCP to ``port`` arriving at node ``node`` from the other nodes;
        nftables if present, else iptables. Returns the rule as written."""
        if shutil.which("nft"):
            return self._nft(node, f"add rule inet dtlab input iifname {IFNAME} tcp dport {port} "
                                   f"drop\n")
        if not shutil.which("iptables"):
            raise RuntimeError("blocked_port needs nftables or iptables (apt-get install nftables)")
        cmd = ["iptables", "-A", "INPUT", "-i", IFNAME, "-p", "tcp", "--dport", str(port),
               "-j", "DROP"]
        r = subprocess.run([*self.exec_prefix(node), *cmd], capture_output=True, text=True,
                           timeout=20)
        if r.returncode:
            raise RuntimeError(f"firewall rule in {self.nodes[node]}: {r.stderr.strip()}")
        return " ".join(cmd)

    def _nft(self, node: int, body: str) -> str:
        """``body``'s rules (``add rule inet dtlab input ...`` lines) in an input chain of a
        table of their own on node ``node``; returns them as one would type them."""
        rules = ("add table inet dtlab\n"
                 "add chain inet dtlab input { type filter hook input priority 0; }\n" + body)
        r = subprocess.run([*self.exec_prefix(node), "nft", "-f", "-"], input=rules,
                           capture_output=True, text=True, timeout=20)
        if r.returncode:
            raise RuntimeError(f"firewall rule in {self.nodes[node]}: {r.stderr.strip()}")
        return "; ".join("nft " + line for line in body.strip().splitlines())

    def set_mtu(self, node: int, mtu: int, side: str = "node") -> str:
        """The MTU of one end of node ``node``'s link: ``side="node"`` its ``eth0``, ``"hub"``
        the switch port it plugs into (the hub's ``n<node>``), ``"both"`` both. Returns what was
        set, as ``ip`` would be typed on that host::

            net.set_mtu(1, 1500, "hub")   # 'ip link set n1 mtu 1500 (switch port)'
        """
        if side not in ("node", "hub", "both"):
            raise ValueError(f"side {side!r}: give node, hub or both")
        ends = {"node": [(self.nodes[node], IFNAME)], "hub": [(self.hub, f"n{node}")]}
        ends["both"] = ends["node"] + ends["hub"]
        for ns, dev in ends[side]:
            _ip("-n", ns, "link", "set", dev, "mtu", str(mtu))
        where = {self.hub: "switch port", self.nodes[node]: f"node{node}"}
        return " and ".join(f"ip link set {dev} mtu {mtu} ({where[ns]})" for ns, dev in ends[side])

    def frames_as_on_a_wire(self) -> None:
        """Every veth end sends one frame per packet (``gso_max_segs 1``), as a NIC's TSO puts
        MTU-sized frames on a wire. Why: the kernel hands a GSO super-packet between veths
        unchecked against the receiving MTU (``is_skb_forwardable`` passes any GSO skb), so
        without this a 1500-byte port carried 4 MiB of 9000-byte TCP segments (measured,
        kernel 6.18, 2026-11-27) while ``ping -M do -s 1473`` through it failed."""
        for i, ns in enumerate(self.nodes):
            _ip("-n", ns, "link", "set", IFNAME, "gso_max_segs", "1")
            _ip("-n", self.hub, "link", "set", f"n{i}", "gso_max_segs", "1")

    def drop_ports_except(self, node: int, port: int) -> str:
        """A stateful firewall on node ``node`` that lets new TCP connections in on ``port`` only:
        replies to its own connections pass (``ct state established,related``), connections
        to any other port arriving on ``eth0`` are dropped. nftables only. Returns the rules::

            net.drop_ports_except(0, 29400)   # '... tcp dport != 29400 drop'
        """
        if not shutil.which("nft"):
            raise RuntimeError("blocked_data_ports needs nftables (apt-get install nftables)")
        return self._nft(node, f"add rule inet dtlab input iifname {IFNAME} ct state "
                               f"established,related accept\n"
                               f"add rule inet dtlab input iifname {IFNAME} tcp dport != {port} "
                               f"drop\n")

    def link_mtu(self, node: int) -> int:
        """The MTU of node ``node``'s ``eth0``, as ``ip link show`` on that host says
        (``net.link_mtu(0)`` -> 1500 in a fresh network)."""
        out = _ip("-n", self.nodes[node], "-o", "link", "show", IFNAME).stdout
        return int(re.search(r"\bmtu (\d+)", out).group(1))

    def undo_commands(self) -> list[list[str]]:
        """What :meth:`close` does, as commands in the order things were made, for a process that
        outlives this one (:meth:`dtlab.runtime.agents.Agents.undo_if_killed`)."""
        return ([["ip", "netns", "delete", ns] for ns in self.made]
                + [["rm", "-rf", "--", d] for d in self.made_etc])

    def close(self) -> None:
        """Remove every namespace made (their links, qdiscs and rules go with them)."""
        for ns in reversed(self.made):
            _ip("netns", "delete", ns, check=False)
        self.made = []
        for d in self.made_etc:
            shutil.rmtree(d, ignore_errors=True)
        self.made_etc = []


ICMP_IP_HEADERS = 28  # an IPv4 header (20) and an ICMP echo header (8): payload + 28 = packet


def ping(net: Network, src: int, dst: int, payload: int, wait: float = 1.0) -> bool:
    """One ``ping -M do -s PAYLOAD -c 1 -W WAIT`` from node ``src`` to node ``dst``: True if the
    echo came back. ``-M do`` sets Don't Fragment, so a packet larger than some link on the way
    is dropped (or refused locally), never split: ``ping(net, 0, 1, 1472)`` -> True on Ethernet."""
    if not shutil.which("ping"):
        raise RuntimeError("ping is not installed here: apt-get install iputils-ping")
    r = subprocess.run([*net.exec_prefix(src), "ping", "-M", "do", "-s", str(payload), "-c", "1",
                        "-W", f"{wait:g}", "-q", net.addresses[dst]],
                       capture_output=True, text=True, timeout=wait + 10)
    return r.returncode == 0


def path_mtu(net: Network, src: int, dst: int, wait: float = 1.0) -> dict:
    """The largest ping payload that crosses from node ``src`` to node ``dst`` unfragmented, found
    by bisection between 0 and what ``src``'s own MTU allows -- what an engineer finds by hand
    with ``ping -M do -s SIZE``. The path MTU is that payload + 28; a path MTU below the
    interface's means frames in between vanish (a black hole when nothing sends ICMP back, as a
    layer-2 switch does not). The first probes are the sizes everyone tries first, the NIC's
    full MTU and Ethernet's 1500 (payload 1472, then 1473): most answers take one to three.
    Each probe that gets no echo costs ``wait`` s (``-W``)::

        with Network(2) as net:                      # as root
            path_mtu(net, 0, 1)   # {'src': 'node0', 'dst': 'node1', 'mtu': 1500,
                                  #  'largest_payload': 1472, 'path_mtu': 1500, 'probes': 1}

    ``largest_payload`` is None when not even an empty ping crosses (no path at all)."""
    mtu = net.link_mtu(src)
    probes = 0

    def crosses(payload: int) -> bool:
        nonlocal probes
        probes += 1
        return ping(net, src, dst, payload, wait)

    out = {"src": f"node{src}", "dst": f"node{dst}", "mtu": mtu}
    lo, hi = 0, mtu - ICMP_IP_HEADERS
    if crosses(hi):
        return {**out, "largest_payload": hi, "path_mtu": mtu, "probes": probes}
    ethernet = 1500 - ICMP_IP_HEADERS
    if ethernet < hi:  # narrow the bracket to Ethernet's default first
        if not crosses(ethernet):
            hi = ethernet
        elif crosses(ethernet + 1):
            lo = ethernet + 1
        else:
            lo, hi = ethernet, ethernet + 1
    if lo == 0 and not crosses(0):
        return {**out, "largest_payload": None, "path_mtu": None, "probes": probes}
    while hi - lo > 1:  # invariant: lo crosses, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if crosses(mid) else (lo, mid)
    return {**out, "largest_payload": lo, "path_mtu": lo + ICMP_IP_HEADERS, "probes": probes}
