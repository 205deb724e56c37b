"""Faults injected on purpose into a simulated launch, one per thing that breaks between hosts.

Contract: :func:`apply` edits the launch plan (one dict per node: ``name``, ``address``,
``ifname``, ``endpoint``, ``start``) and, in netns mode, the network, and returns one line
saying what it did. Nodes other than node 0 get the fault unless said otherwise; node 0 hosts
the rendezvous (``is_host=1``). What each should look like to the learner is in
:data:`FAULTS`; :mod:`.diagnose` names it from the consoles alone.
"""

from __future__ import annotations

RDZV_PORT = 29400  # torchrun's customary c10d port; free in a fresh namespace
SLOW_RATE = "100mbit"

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
}
NEEDS_NETNS = {"wrong_master_addr", "blocked_port", "slow_link"}


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
    raise ValueError(f"unknown fault {fault}")
