"""Faults injected on purpose into a simulated launch, one per thing that breaks between hosts.

Contract: :func:`apply` edits the launch plan (one dict per node: ``name``, ``address``,
``ifname``, ``endpoint``, ``start``) and, in netns mode, the network, and returns one line
saying what it did. Nodes other than node 0 get the fault unless said otherwise; node 0 hosts
the rendezvous (``is_host=1``). Two were shaped by measuring (2-core VM, kernel 6.18, torch
2.13, 2026-11-27): a jumbo/1500 mismatch *between two hosts* on one switch breaks nothing TCP
carries (each end's MSS caps the other's segments), so ``mtu_mismatch`` puts the 1500 on the
switch port, where it black-holes big frames; and a firewall on a node that hosts no store
(node 1 of 2) broke nothing either (gloo's rank 1 dials rank 0), so ``blocked_data_ports``
closes node 0. What each should look like to the learner is in
:data:`FAULTS`; :mod:`.diagnose` names it from the consoles alone.
"""

from __future__ import annotations

import shutil

RDZV_PORT = 29400  # torchrun's customary c10d port; free in a fresh namespace
SLOW_RATE = "100mbit"
JUMBO, SMALL = 9000, 1500  # a jumbo-frame cluster, one switch port left at Ethernet's default

FAULTS = {
    "wrong_master_addr": "the other nodes dial an address no node has: their connects time out "
                         "(no host answers ARP), node 0 waits for them until join_timeout",
    "wrong_port": "the other nodes dial the right host, wrong port: 'Connection refused' at once, "
                  "retried until the store timeout",
    "blocked_port": "a firewall on node 0 drops the rendezvous port: the same silence as a wrong "
                    "address, yet the address is right (a closed port would refuse)",
    "missing_node": "one node never starts: the others wait for it until join_timeout",
    "wrong_ifname": "GLOO_SOCKET_IFNAME names an interface the last node lacks: rendezvous works, "
                    "its ranks fail creating the process group, the others wait for them",
    "slow_link": f"the last node's link is rate-limited to {SLOW_RATE} (tc tbf): the run works, "
                 "collectives across nodes are slower by what the alpha-beta model predicts",
    "mtu_mismatch": f"every NIC and switch port at MTU {JUMBO} but the last node's switch port at "
                    f"{SMALL}: the rendezvous and small collectives pass, the first large "
                    "all_reduce stalls until the kernel gives up on the connection ('Connection "
                    f"timed out'); `ping -M do -s {JUMBO - 28}` finds it, `-s {SMALL - 28}` passes",
    "blocked_data_ports": "node 0's firewall lets new connections in on the rendezvous port only: "
                          "the rendezvous works, then the other nodes time out dialling node 0's "
                          "other ports -- first the workers' store torchrun opens at run time "
                          "(MASTER_PORT), before gloo or NCCL open their own",
}
NEEDS_NETNS = {"wrong_master_addr", "blocked_port", "slow_link", "mtu_mismatch",
               "blocked_data_ports"}


def apply(fault: str, plan: list[dict], net, port: int) -> str:
    host, port_ = plan[0]["address"], port
    others = plan[1:]
    if fault == "wrong_master_addr":
        bad = host.rsplit(".", 1)[0] + ".250"  # in the subnet, on no node
        for p in others:
            p["endpoint"] = f"{bad}:{port_}"
        return f"nodes {', '.join(p['name'] for p in others)} given --rdzv-endpoint {bad}:{port_}"
    if fault == "wrong_port":
        for p in others:
            p["endpoint"] = f"{host}:{port_ + 1}"
        return f"nodes {', '.join(p['name'] for p in others)} given --rdzv-endpoint {host}:{port_ + 1}"
    if fault == "blocked_port":
        rule = net.drop_port(0, port_)
        return f"in {plan[0]['name']}: {rule}"
    if fault == "missing_node":
        plan[-1]["start"] = False
        return f"{plan[-1]['name']} is never started"
    if fault == "wrong_ifname":
        plan[-1]["ifname"] = "eth9"
        return f"{plan[-1]['name']} given GLOO_SOCKET_IFNAME=eth9 (it has {net and 'eth0' or 'lo'})"
    if fault == "slow_link":
        net.rate_limit(len(plan) - 1, SLOW_RATE)
        return f"tc tbf rate {SLOW_RATE} on both ends of {plan[-1]['name']}'s link"
    if fault == "mtu_mismatch":
        # every host and switch port at 9000 but the last node's port: frames over 1500 bytes
        # to or from that node vanish in the switch, which (layer 2) sends no ICMP back
        for i in range(len(plan)):
            net.set_mtu(i, JUMBO, "both")
        net.frames_as_on_a_wire()
        done = net.set_mtu(len(plan) - 1, SMALL, "hub")
        return f"every eth0 and switch port at MTU {JUMBO}, but {done}"
    if fault == "blocked_data_ports":
        rules = net.drop_ports_except(0, port_)
        return f"in {plan[0]['name']}: {rules}"
    raise ValueError(f"unknown fault {fault}")


def paths_under(fault: str, nodes: int = 2, wait: float = 0.5) -> list[dict]:
    """The path MTUs ``ping -M do`` finds from node 0 to every other node of a fresh simulated
    network with ``fault`` applied -- no launch, only the network (root)::

        paths_under("mtu_mismatch")   # [{'src': 'node0', 'dst': 'node1', 'mtu': 9000,
                                      #   'largest_payload': 1472, 'path_mtu': 1500, ...}]
    """
    from . import netns

    why = netns.available() or (None if shutil.which("ping") else
                                 "no ping command (apt-get install iputils-ping)")
    if why:
        raise ValueError(f"paths_under needs network namespaces and ping: {why}")
    if fault not in NEEDS_NETNS or nodes < 2:
        raise ValueError(f"paths_under({fault!r}, {nodes}): give a network fault "
                         f"({', '.join(sorted(NEEDS_NETNS))}) and 2 or more nodes")
    with netns.Network(nodes) as net:
        plan = [{"name": f"node{i}", "address": a, "ifname": netns.IFNAME,
                 "endpoint": f"{net.addresses[0]}:{RDZV_PORT}", "start": True}
                for i, a in enumerate(net.addresses)]
        apply(fault, plan, net, RDZV_PORT)
        return [netns.path_mtu(net, 0, i, wait=wait) for i in range(1, nodes)]
