"""Rules for the network under a launch that got past the rendezvous: an interface a node could
not find, and a connection between ranks that stopped carrying data once the process group was
up -- an MTU black hole when a ``ping -M do`` probe between its two ends says so, else unsure.

Each rule takes the :class:`~.verdict.Verdict` and returns a Diagnosis or None (pass).
"""

from __future__ import annotations

from .facts import COLLECTIVE, IFNAME, STALL, line, path_finding


def wrong_ifname(v):
    f = v.f
    if not f.bad_if:
        return None
    for n, found in f.bad_if.items():
        v.note(f.log(n), "console", found)
    names = sorted(f.bad_if)
    ifs = sorted({m.group(1) for t in (f.consoles[n] for n in names)
                  for m in IFNAME.finditer(t) if m.group(1)})
    return v.done("wrong_ifname", f"the ranks of {', '.join(names)} could not find the socket "
                  f"interface {', '.join(ifs) or '(named by GLOO/NCCL_SOCKET_IFNAME)'}: "
                  f"rendezvous worked, creating the process group failed there, the other "
                  f"nodes waited for them. Name an interface every node has (ip -br addr).")


def _stall(v) -> tuple[str, str, set[str]]:
    """Note what the stalled nodes said and every short path; (the first stalled node, the peer
    its connection was to, the names of the pair's two ends)."""
    f = v.f
    for n, t in f.stalled.items():
        v.note(f.log(n), "console", line(t, STALL))
        shapes = COLLECTIVE.findall(t[:t.find("Connection timed out")])
        if shapes:  # TORCH_DISTRIBUTED_DEBUG=DETAIL: what ran before it stopped
            op, shape = shapes[-1]
            v.note(f.log(n), "console", f"the last collective it started: {op} of shape "
                   f"[{shape}], after {len(shapes) - 1} others")
    n = sorted(f.stalled)[0]
    peer = STALL.search(f.stalled[n]).group(1)
    for p in f.short_paths:
        v.note(f"{p['src']}: ping -M do", "path", path_finding(p))
    return n, peer, {n, *(q["name"] for q in f.plan if q["address"] == peer)}


def mtu_mismatch(v):
    """A stall, and a probe between the stalled pair's own ends that finds a short path."""
    if not v.f.stalled:
        return None
    n, peer, ends = _stall(v)
    short = [p for p in v.f.short_paths if {p["src"], p["dst"]} == ends]
    if not short:
        return None
    p = short[0]
    return v.done("mtu_mismatch", f"{n}'s connection to {peer} stopped carrying data mid-run "
                  f"('Connection timed out': the kernel gave up retransmitting), and ping -M do "
                  f"finds frames over {p['path_mtu']} bytes lost between {p['src']} and "
                  f"{p['dst']}, whose NICs send up to {p['mtu']}: an MTU mismatch on the way "
                  f"(a switch port at a smaller MTU sends no ICMP back). Set one MTU end to end.")


def stalled(v):
    """A stall no probe explains: unsure, and the summary names what would tell."""
    if not v.f.stalled:
        return None
    n, peer, ends = _stall(v)
    probed = [p for p in v.f.paths or [] if {p["src"], p["dst"]} == ends]
    if probed:
        v.note("ping -M do", "path", f"the path between {' and '.join(sorted(ends))} carries "
               f"its interface's full MTU")
        why = ("the path between them carries full-size frames, so not the MTU: a firewall that "
               "drops an established flow, a link or a host gone mid-run")
    else:
        why = (f"an MTU black hole (big frames lost, small ones pass), a firewall, a link or a "
               f"host gone mid-run. Tell them apart from {n}: `ping -M do -s $((MTU - 28)) -c 1 "
               f"{peer}` with the NIC's MTU -- no echo while `ping -M do -s 1472 -c 1 {peer}` "
               f"answers means a smaller MTU on the way")
    return v.done("stalled", f"unsure: {n}'s connection to {peer} stopped carrying data after "
                  f"the process group was up ('Connection timed out': the kernel gave up "
                  f"retransmitting). Something on the path drops packets: {why}.", confident=False)
