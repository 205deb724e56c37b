"""Rules for the rendezvous: a store error in a run that worked (evidence only), a store that
could not be reached, a node that never came.

The store rule reads each node whose console logs a failed store connect, in the consoles'
order, through the per-node rules below in turn (each takes the Verdict and a :class:`Connect`
and returns a Diagnosis or None): the first node a rule explains decides. A node none explains
leaves its line in the evidence; if no node is explained, ``launch_failed`` (unsure) lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts import (CONNECT_TO, CONNECTED, NO_ROUTE, RANK_LINE, RDZV_TIMEOUT, REFUSED,
                    STORE_FAIL, STORE_WAIT, TIMED_OUT, line)


@dataclass
class Connect:
    """One node's failed store connects: its console and the first endpoint it dialled."""

    node: str
    text: str
    target: tuple[str, int] | None

    @property
    def dialled(self) -> str:
        return f"{self.target[0]}:{self.target[1]}" if self.target else "the rendezvous endpoint"


def store_error_in_a_run_that_worked(v):
    """A store error that stopped nothing -- typically an agent closing the rendezvous after the
    hosting agent had left (torchrun's shutdown race): evidence, never the verdict."""
    f = v.f
    if f.store_failed and f.succeeded:
        for n, t in f.store_failed.items():
            v.note(f.log(n), "console", f"did not stop the run (every agent exited 0, the world "
                   f"is whole): {line(t, STORE_FAIL)}")
    return None


def store_unreachable(v):
    f = v.f
    if not f.store_failed or f.succeeded:
        return None
    for n, t in f.store_failed.items():
        targets = {(a, int(p)) for a, p in CONNECT_TO.findall(t)}
        c = Connect(n, t, sorted(targets)[0] if targets else None)
        for pat in (NO_ROUTE, REFUSED, STORE_FAIL):
            found = line(t, pat)
            if found:
                v.note(f.log(n), "console", found)
                break
        for rule in CONNECT_RULES:
            d = rule(v, c)
            if d is not None:
                return d
    return v.done("launch_failed", "the rendezvous store could not be reached: "
                  + "; ".join(e["finding"] for e in v.evidence), confident=False)


def blocked_data_ports(v, c: Connect):
    """Past the rendezvous, a connect to another port of the hosting node timed out."""
    f = v.f
    beyond = _beyond_rendezvous(c.text, c.target, f.host_addr, f.host_port)
    if not beyond:
        return None
    v.note(f.log(c.node), "console", f"the rendezvous worked: {beyond}")
    v.note("launch", "endpoint", f"{f.host} hosts the rendezvous on port {f.host_port}; "
           f"{c.node} then dialled port {c.target[1]} of the same address")
    host_wait = line(f.consoles.get(f.host, ""), STORE_WAIT)
    if host_wait:
        v.note(f.log(f.host), "console", host_wait)
    return v.done("blocked_data_ports", f"{c.node} reached the rendezvous on {f.host_addr}:"
                  f"{f.host_port}, then its connects to {c.dialled} -- another port of "
                  f"{f.host}, opened at run time (torchrun's workers' store, MASTER_PORT, or a "
                  f"backend's own) -- timed out, never refused: a firewall on {f.host} passes "
                  f"the rendezvous port and drops the others. Open a port range too "
                  f"(net.ipv4.ip_local_port_range).")


def wrong_master_addr(v, c: Connect):
    """No route to host, or an address no node has."""
    f = v.f
    if not (NO_ROUTE.search(c.text) or (c.target and c.target[0] not in f.addresses)):
        return None
    v.note("launch", "addresses", f"nodes have {', '.join(sorted(f.addresses))}; "
           f"{c.node} dialled {c.dialled}")
    return v.done("wrong_master_addr", f"{c.node} dialled the rendezvous at {c.dialled}, an "
                  f"address no node has (no host answered): --rdzv-endpoint / MASTER_ADDR must "
                  f"be the first node's address ({f.host_addr}:{f.host_port}).")


def wrong_port(v, c: Connect):
    """Refused at once, on a port other than the one the hosting node was given."""
    f = v.f
    if not (REFUSED.search(c.text) and c.target and c.target[1] != f.host_port):
        return None
    v.note("launch", "endpoint", f"{f.host} hosts the rendezvous on port {f.host_port}; "
           f"{c.node} dialled port {c.target[1]}")
    return v.done("wrong_port", f"{c.node}'s connects to {c.dialled} were refused at once: the "
                  f"host is right, nothing listens on that port -- the rendezvous is on "
                  f"{f.host_addr}:{f.host_port}.")


def blocked_port(v, c: Connect):
    """The right address and port, and no answer at all (never refused)."""
    f = v.f
    if c.target != (f.host_addr, f.host_port) or REFUSED.search(c.text):
        return None
    v.note("launch", "endpoint", f"{c.node} dialled {c.dialled}, the address and port "
           f"{f.host} hosts the rendezvous on, and got no answer at all")
    host_timeout(v)
    return v.done("blocked_port", f"{c.node}'s connects to {c.dialled} -- the right address and "
                  f"port -- timed out without being refused: a firewall on the way or on "
                  f"{f.host} drops them (nft list ruleset / iptables -L).")


def refused(v, c: Connect):
    """Refused, where no rule above says more: nothing listens there."""
    if not REFUSED.search(c.text):
        return None
    return v.done("wrong_port", f"{c.node}'s connects to {c.dialled} were refused: nothing "
                  f"listens there (is the first node's agent running?).")


CONNECT_RULES = (blocked_data_ports, wrong_master_addr, wrong_port, blocked_port, refused)


def missing_node(v):
    """The hosting agent's rendezvous timed out, and a node printed nothing at all."""
    f = v.f
    if not (f.host_timed_out and f.silent):
        return None
    host_timeout(v)
    for n in f.silent:
        v.note(n, "console", "no output at all: its agent never ran")
    return v.done("missing_node", f"the rendezvous waited for {len(f.plan)} nodes and closed at "
                  f"join_timeout without {', '.join(f.silent)}: start torchrun on every node "
                  f"(srun: one task per node), or lower --nnodes.")


def host_timeout(v) -> None:
    """Note the hosting agent's RendezvousTimeoutError line, if it logged one."""
    f = v.f
    found = line(f.consoles.get(f.host, ""), RDZV_TIMEOUT)
    if found:
        v.note(f.log(f.host), "console", f"the hosting agent: {found}")


def _beyond_rendezvous(text: str, target, host_addr: str, host_port: int) -> str | None:
    """The line that shows this node had reached the rendezvous, when its failed connect was to
    another port of the hosting node and timed out after that -- never refused after it (a
    refusal before it, while the store was not yet up, is ordinary)."""
    if not target or target[0] != host_addr or target[1] == host_port:
        return None
    reached = next((m for m in CONNECTED.finditer(text)
                    if (m.group(1), int(m.group(2))) == (host_addr, host_port)), None)
    reached = reached or RANK_LINE.search(text)
    if not reached:
        return None
    after = text[reached.start():]
    timed_out = any((a, int(p)) == tuple(target) for a, p in TIMED_OUT.findall(after))
    if not timed_out or REFUSED.search(after):
        return None
    return text[reached.start():].splitlines()[0].strip()[:300]
