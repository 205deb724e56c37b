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
        ns = self.nodes[node]
        if shutil.which("nft"):
            rules = ("add table inet dtlab\n"
                     "add chain inet dtlab input { type filter hook input priority 0; }\n"
                     f"add rule inet dtlab input iifname {IFNAME} tcp dport {port} drop\n")
            r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules,
                               capture_output=True, text=True, timeout=20)
            shown = f"nft add rule inet dtlab input iifname {IFNAME} tcp dport {port} drop"
        elif shutil.which("iptables"):
            cmd = ["iptables", "-A", "INPUT", "-i", IFNAME, "-p", "tcp", "--dport", str(port),
                   "-j", "DROP"]
            r = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                               timeout=20)
            shown = " ".join(cmd)
        else:
            raise RuntimeError("blocked_port needs nftables or iptables (apt-get install nftables)")
        if r.returncode:
            raise RuntimeError(f"firewall rule in {ns}: {r.stderr.strip()}")
        return shown

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
