"""What went wrong in a multi-node launch, from what an engineer has: each node's torchrun console,
the launch lines, each host's addresses, ``tc qdisc show`` and ``ping -M do`` path MTUs, and the
check's report.

Contract: :func:`diagnose` returns ``{failure_class, summary, evidence}`` (evidence: ``{file,
kind, finding}`` items, as :mod:`dtlab.hang.diagnose` writes them), first rule that fires:

=================  ==========================================================================
wrong_ifname       a rank says it cannot find the socket interface (gloo's "Unable to find
                   address for: X", NCCL's "no socket interface found")
mtu_mismatch       an established connection between ranks stopped carrying data (gloo's
                   "Read error [peer]: Connection timed out": the kernel gave up retransmitting)
                   and a ``ping -M do`` probe finds a path that carries less than the sending
                   NIC's MTU: big frames vanish on the way, small ones pass
stalled            the same stall without that probe, or with a probe that finds the path whole:
                   unsure -- an MTU black hole, a firewall, a link or host gone; the summary
                   names the ``ping -M do`` test that tells them apart
blocked_data_ports a node reached the rendezvous port, then its connects to another port of the
                   hosting node (the workers' store torchrun opens at run time, MASTER_PORT, or
                   a backend's own) time out, never refused: a firewall passes only the
                   rendezvous port
wrong_master_addr  a node's store connects fail with "No route to host", or time out towards
                   an address no node has
wrong_port         connects to a node's address are refused (errno 111; seen with
                   TORCH_CPP_LOG_LEVEL=INFO + TORCH_DISTRIBUTED_DEBUG=DETAIL) and the port
                   differs from the one the hosting node was given
blocked_port       connects to the hosting node's own address and port time out, never refused:
                   something drops the packets (a closed port would refuse)
missing_node       the hosting agent's rendezvous timed out and a node left no console at all
slow_link          the run worked, and a tc rate limit on a node's link, or one node pair much
                   slower than the others, explains the across-node bandwidth (alpha-beta:
                   t(S) = alpha + S / rate)
world_incomplete   the check ran but ranks are missing or duplicated
no_failure         the check ran and the world is whole
unfinished         no agent failed, yet the check had not reported when the agents were
                   stopped at the time limit: too slow to tell (a verdict unsure, not a failure)
launch_failed      anything else (the last error line of each failed node is the evidence)
=================  ==========================================================================

The stall rule reads the kernel's "Connection timed out", which between real hosts comes only
when TCP gives up (``tcp_retries2``: at least 924.6 s by default); in the rehearsal node 1's own
veth reports its drops and its TCP gives up after ~8 s, while node 0 stays silent as real hosts
would. A run that only hangs ends ``unfinished``, with any short ping path in its evidence.

A store error in a run that worked -- every started agent exited 0 and the check found the world
whole -- names no failure: torchrun's hosting agent may leave before another agent has closed the
rendezvous, which then logs "failed to shutdown the rendezvous ... RendezvousConnectionError".
It stays in the evidence.

Only the launch lines tell which address and port each node dialled and which node hosts; the
rest is read from the consoles, so the same function reads a real cluster's logs.
"""

from __future__ import annotations

import re

_IFNAME = re.compile(r"Unable to find address for: (\S+)|no socket interface found|"
                     r"Bootstrap : no socket interface")
_CONNECT_TO = re.compile(r"connect(?:ing)? to (?:any network address of )?\(([^,]+), (\d+)\)")
_NO_ROUTE = re.compile(r"errno: 113 - No route to host|Host is unreachable")
_REFUSED = re.compile(r"errno: 111 - Connection refused")
_STORE_FAIL = re.compile(r"RendezvousConnectionError|TCP client failed to connect")
_RDZV_TIMEOUT = re.compile(r"RendezvousTimeoutError")
_TBF = re.compile(r"tbf .*?rate (\d+(?:\.\d+)?)([KMG]?)bit", re.I)
# gloo's pair, once established, failing with the kernel's ETIMEDOUT: sent data never acknowledged
_STALL = re.compile(r"(?:Read|Write) error \[([^\]]+)\]:\d+: Connection timed out")
_CONNECTED = re.compile(r"TCP client connected to host (\S+):(\d+)")
_RANK_LINE = re.compile(r"^rank \d+/\d+ node \d+ ", re.M)  # check.py's: the node's ranks started
_TIMED_OUT = re.compile(r"timed out after \d+ms while trying to connect to \(([^,]+), (\d+)\)")
_STORE_WAIT = re.compile(r"wait timeout after \d+ms, keys: \S+")
_COLLECTIVE = re.compile(r"Running collective: CollectiveFingerPrint\(SequenceNumber=\d+, "
                         r"OpType=(\w+), TensorShape=\[([\d, ]*)\]")


def _line(text: str, pattern: re.Pattern) -> str | None:
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()[:300]
    return None


def _endpoint(p: dict) -> tuple[str, int]:
    host, _, port = p["endpoint"].rpartition(":")
    return host, int(port)


def diagnose(consoles: dict[str, str], codes: dict[str, int | None], report: dict | None,
             plan: list[dict], qdiscs: dict[str, str] | None = None,
             paths: list[dict] | None = None) -> dict:
    """Name the failure (module docstring). ``plan``: one dict per node in launch order with
    ``name``, ``address``, ``endpoint`` and ``start`` (the first node hosts the rendezvous);
    ``paths``: :func:`.netns.path_mtu` results, None where nobody probed."""
    ev: list[dict] = []

    def note(file, kind, finding):
        ev.append({"file": file, "kind": kind, "finding": finding})

    def done(cls, summary):
        return {"failure_class": cls, "summary": summary, "evidence": ev}

    addresses = {p["address"] for p in plan}
    host_addr, host_port = _endpoint(plan[0])
    logs = {n: f"{n}.log" for n in consoles}

    bad_if = {n: _line(t, _IFNAME) for n, t in consoles.items() if _IFNAME.search(t)}
    if bad_if:
        for n, line in bad_if.items():
            note(logs[n], "console", line)
        names = sorted(bad_if)
        ifs = sorted({m.group(1) for t in (consoles[n] for n in names)
                      for m in _IFNAME.finditer(t) if m.group(1)})
        return done("wrong_ifname", f"the ranks of {', '.join(names)} could not find the socket "
                    f"interface {', '.join(ifs) or '(named by GLOO/NCCL_SOCKET_IFNAME)'}: "
                    f"rendezvous worked, creating the process group failed there, the other "
                    f"nodes waited for them. Name an interface every node has (ip -br addr).")

    # before the store errors: a pair that stalled was established, so the rendezvous and the
    # stores had worked; store errors logged after it are agents tearing down
    stalled = {n: t for n, t in consoles.items() if _STALL.search(t)}
    if stalled:
        return _stalled(stalled, paths, plan, logs, note, done)

    failed_connect = {n: t for n, t in consoles.items() if _STORE_FAIL.search(t)}
    if failed_connect and _succeeded(codes, report, plan):
        # a store error that stopped nothing: typically an agent closing the rendezvous after
        # the hosting agent had left (torchrun's shutdown race) -- evidence, not the verdict
        for n, t in failed_connect.items():
            note(logs[n], "console", f"did not stop the run (every agent exited 0, the world is "
                 f"whole): {_line(t, _STORE_FAIL)}")
        failed_connect = {}
    if failed_connect:
        for n, t in failed_connect.items():
            targets = {(a, int(p)) for a, p in _CONNECT_TO.findall(t)}
            target = sorted(targets)[0] if targets else None
            for pat, kind in ((_NO_ROUTE, "no route"), (_REFUSED, "refused"), (_STORE_FAIL, "failed")):
                line = _line(t, pat)
                if line:
                    note(logs[n], "console", line)
                    break
            tgt = f"{target[0]}:{target[1]}" if target else "the rendezvous endpoint"
            beyond = _beyond_rendezvous(t, target, host_addr, host_port)
            if beyond:
                note(logs[n], "console", f"the rendezvous worked: {beyond}")
                note("launch", "endpoint", f"{plan[0]['name']} hosts the rendezvous on port "
                     f"{host_port}; {n} then dialled port {target[1]} of the same address")
                host_wait = _line(consoles.get(plan[0]["name"], ""), _STORE_WAIT)
                if host_wait:
                    note(logs[plan[0]["name"]], "console", host_wait)
                return done("blocked_data_ports", f"{n} reached the rendezvous on {host_addr}:"
                            f"{host_port}, then its connects to {tgt} -- another port of "
                            f"{plan[0]['name']}, opened at run time (torchrun's workers' store, "
                            f"MASTER_PORT, or a backend's own) -- timed out, never refused: a "
                            f"firewall on {plan[0]['name']} passes the rendezvous port and drops "
                            f"the others. Open a port range too (net.ipv4.ip_local_port_range).")
            if _NO_ROUTE.search(t) or (target and target[0] not in addresses):
                note("launch", "addresses", f"nodes have {', '.join(sorted(addresses))}; "
                     f"{n} dialled {tgt}")
                return done("wrong_master_addr", f"{n} dialled the rendezvous at {tgt}, an "
                            f"address no node has (no host answered): --rdzv-endpoint / "
                            f"MASTER_ADDR must be the first node's address "
                            f"({host_addr}:{host_port}).")
            if _REFUSED.search(t) and target and target[1] != host_port:
                note("launch", "endpoint", f"{plan[0]['name']} hosts the rendezvous on port "
                     f"{host_port}; {n} dialled port {target[1]}")
                return done("wrong_port", f"{n}'s connects to {tgt} were refused at once: the "
                            f"host is right, nothing listens on that port -- the rendezvous is on "
                            f"{host_addr}:{host_port}.")
            if target == (host_addr, host_port) and not _REFUSED.search(t):
                note("launch", "endpoint", f"{n} dialled {tgt}, the address and port "
                     f"{plan[0]['name']} hosts the rendezvous on, and got no answer at all")
                _note_host_timeout(consoles, plan, logs, note)
                return done("blocked_port", f"{n}'s connects to {tgt} -- the right address and "
                            f"port -- timed out without being refused: a firewall on the way or "
                            f"on {plan[0]['name']} drops them (nft list ruleset / iptables -L).")
            if _REFUSED.search(t):
                return done("wrong_port", f"{n}'s connects to {tgt} were refused: nothing "
                            f"listens there (is the first node's agent running?).")
        return done("launch_failed", "the rendezvous store could not be reached: "
                    + "; ".join(e["finding"] for e in ev))

    silent = [p["name"] for p in plan if not consoles.get(p["name"], "").strip()]
    host_timed_out = _RDZV_TIMEOUT.search(consoles.get(plan[0]["name"], ""))
    if host_timed_out and silent:
        _note_host_timeout(consoles, plan, logs, note)
        for n in silent:
            note(n, "console", "no output at all: its agent never ran")
        return done("missing_node", f"the rendezvous waited for {len(plan)} nodes and closed "
                    f"at join_timeout without {', '.join(silent)}: start torchrun on every "
                    f"node (srun: one task per node), or lower --nnodes.")

    if report is not None:
        if not report.get("ok"):
            probs = {k: report[k] for k in ("missing", "duplicate_ranks", "duplicate_gpus",
                                            "bad_local_ranks") if report.get(k)}
            note("report.json", "check", str(probs))
            return done("world_incomplete", f"the check ran but the world is not whole: {probs}")
        slow = _slow_link(report, qdiscs or {}, plan, note)
        if slow:
            return done("slow_link", slow)
        for p in _short_paths(paths):  # TCP's MSS can hide it: the run worked, the path is short
            note(f"{p['src']}: ping -M do", "path", _path_finding(p))
        bw = report.get("bandwidth_GBps") or {}
        measured = ", ".join(f"{k} {bw[k]:.4f} GB/s" for k in ("within", "across")
                             if bw.get(k) is not None)
        note("report.json", "check", f"{report['ranks_present']} of {report['world_size']} ranks"
             + (f", {measured}" if measured else ""))
        return done("no_failure", "every rank present, no duplicate, links as expected")

    # exit codes known (codes names a node: None = it was still running when stopped), none
    # failed, some still running: the limit came first; a cluster's logs alone tell no codes
    started = [p["name"] for p in plan if p.get("start", True)]
    running = [n for n in started if n in codes and codes[n] is None]
    if running and all(n in codes and codes[n] in (0, None) for n in started):
        for n in running:
            last = (consoles.get(n, "").strip().splitlines() or ["(no output yet)"])[-1]
            note(f"{n}.log", "console", f"still running when stopped; its last line: {last[:300]}")
        short = _short_paths(paths)
        for p in short:  # between real hosts an MTU black hole hangs like this, silent
            note(f"{p['src']}: ping -M do", "path", _path_finding(p))
        return done("unfinished", f"no agent failed, but the check had not reported when "
                    f"{', '.join(running)} were stopped at the rehearsal's time limit: too slow "
                    f"to tell whether the launch works (a busy machine? larger --join-timeout "
                    f"and --pg-timeout give it longer)" + (
                        "; and ping -M do finds a path that drops frames its NICs send (see the "
                        "evidence): big messages would hang on it" if short else ""))

    for n, t in consoles.items():
        if codes.get(n) not in (0, None):
            errs = [ln.strip() for ln in t.splitlines() if re.search(r"Error|error:", ln)]
            note(f"{n}.log", "console", (errs[-1] if errs else f"exit {codes[n]}")[:300])
    if host_timed_out:
        return done("launch_failed", "the rendezvous timed out; see each node's last error")
    return done("launch_failed", "the launch failed before the check reported; see each node's "
                "last error")


def _succeeded(codes: dict[str, int | None], report: dict | None, plan: list[dict]) -> bool:
    """Every started agent exited 0 and the check found the world whole."""
    return (report is not None and bool(report.get("ok"))
            and all(codes.get(p["name"]) == 0 for p in plan if p.get("start", True)))


def _note_host_timeout(consoles, plan, logs, note) -> None:
    line = _line(consoles.get(plan[0]["name"], ""), _RDZV_TIMEOUT)
    if line:
        note(logs[plan[0]["name"]], "console", f"the hosting agent: {line}")


def _rate_Bps(value: str, unit: str) -> float:
    return float(value) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[unit.upper()] / 8


def _slow_link(report: dict, qdiscs: dict[str, str], plan: list[dict], note) -> str | None:
    """A rate limit that explains the across-node bandwidth, by alpha-beta, or None."""
    across = [m for m in report.get("pairs", []) if m["kind"] == "across"]
    if not across:
        return None
    limited = {n: _TBF.search(q) for n, q in qdiscs.items() if _TBF.search(q)}
    nbytes = report["bytes"]
    if limited:
        n, m = next(iter(limited.items()))
        rate = _rate_Bps(m.group(1), m.group(2))
        note(f"{n}: tc qdisc show", "qdisc", m.group(0))
        worst = min(across, key=lambda p: p["bandwidth_GBps"])
        alpha = worst["latency_us"] * 1e-6
        # a two-rank ring all_reduce sends S bytes each way: t(S) = alpha + S / rate
        predicted = nbytes / (alpha + nbytes / rate) / 1e9
        within = report["bandwidth_GBps"].get("within")
        note("report.json", "timing", f"across {worst['bandwidth_GBps']:.4f} GB/s measured, "
             f"{predicted:.4f} GB/s predicted (alpha {alpha * 1e6:.0f} us + {nbytes} B / "
             f"{rate / 1e6:.1f} MB/s)" + (f"; within a node {within:.4f} GB/s" if within else ""))
        return (f"the link of {n} is rate-limited ({m.group(0)}): all_reduce across nodes runs at "
                f"{worst['bandwidth_GBps']:.4f} GB/s, the alpha-beta model predicts "
                f"{predicted:.4f} GB/s" + (f", {within / worst['bandwidth_GBps']:.0f}x slower "
                                           f"than within a node" if within else ""))
    if len(across) >= 3:
        bws = sorted(p["bandwidth_GBps"] for p in across)
        median = bws[len(bws) // 2]
        slow = [p for p in across if p["bandwidth_GBps"] < median / 3]
        if slow:
            for p in slow:
                note("report.json", "timing", f"nodes {p['nodes']}: {p['bandwidth_GBps']:.4f} "
                     f"GB/s vs a median of {median:.4f} GB/s across nodes")
            return f"{len(slow)} node pair(s) at under a third of the median across-node bandwidth"
    return None


def _beyond_rendezvous(text: str, target, host_addr: str, host_port: int) -> str | None:
    """The line that shows this node had reached the rendezvous, when its failed connect was to
    another port of the hosting node and timed out after that -- never refused after it (a
    refusal before it, while the store was not yet up, is ordinary)."""
    if not target or target[0] != host_addr or target[1] == host_port:
        return None
    reached = next((m for m in _CONNECTED.finditer(text)
                    if (m.group(1), int(m.group(2))) == (host_addr, host_port)), None)
    reached = reached or _RANK_LINE.search(text)
    if not reached:
        return None
    after = text[reached.start():]
    timed_out = any((a, int(p)) == tuple(target) for a, p in _TIMED_OUT.findall(after))
    if not timed_out or _REFUSED.search(after):
        return None
    return text[reached.start():].splitlines()[0].strip()[:300]


def _short_paths(paths: list[dict] | None) -> list[dict]:
    """Probed paths that carry less than the sending interface's MTU."""
    return [p for p in paths or [] if p.get("path_mtu") is not None and p["path_mtu"] < p["mtu"]]


def _path_finding(p: dict) -> str:
    return (f"to {p['dst']}: the largest payload that crosses is {p['largest_payload']} B (path "
            f"MTU {p['path_mtu']} = payload + 28), while {p['src']}'s eth0 has MTU {p['mtu']}")


def _stalled(stalled: dict[str, str], paths, plan, logs, note, done) -> dict:
    """A pair's connection stopped carrying data: an MTU black hole if a probe between its two
    ends says so, else unsure (the summary names the ping test)."""
    for n, t in stalled.items():
        note(logs[n], "console", _line(t, _STALL))
        shapes = _COLLECTIVE.findall(t[:t.find("Connection timed out")])
        if shapes:  # TORCH_DISTRIBUTED_DEBUG=DETAIL: what ran before it stopped
            op, shape = shapes[-1]
            note(logs[n], "console", f"the last collective it started: {op} of shape [{shape}], "
                 f"after {len(shapes) - 1} others")
    n = sorted(stalled)[0]
    peer = _STALL.search(stalled[n]).group(1)
    ends = {n, *(q["name"] for q in plan if q["address"] == peer)}
    short = _short_paths(paths)
    for p in short:
        note(f"{p['src']}: ping -M do", "path", _path_finding(p))
    short = [p for p in short if {p["src"], p["dst"]} == ends]  # the stalled pair's own path
    if short:
        p = short[0]
        return done("mtu_mismatch", f"{n}'s connection to {peer} stopped carrying data mid-run "
                    f"('Connection timed out': the kernel gave up retransmitting), and ping -M do "
                    f"finds frames over {p['path_mtu']} bytes lost between {p['src']} and "
                    f"{p['dst']}, whose NICs send up to {p['mtu']}: an MTU mismatch on the way "
                    f"(a switch port at a smaller MTU sends no ICMP back). Set one MTU end to end.")
    probed = [p for p in paths or [] if {p["src"], p["dst"]} == ends]
    if probed:
        note("ping -M do", "path", f"the path between {' and '.join(sorted(ends))} carries its "
             f"interface's full MTU")
        why = ("the path between them carries full-size frames, so not the MTU: a firewall that "
               "drops an established flow, a link or a host gone mid-run")
    else:
        why = (f"an MTU black hole (big frames lost, small ones pass), a firewall, a link or a "
               f"host gone mid-run. Tell them apart from {n}: `ping -M do -s $((MTU - 28)) -c 1 "
               f"{peer}` with the NIC's MTU -- no echo while `ping -M do -s 1472 -c 1 {peer}` "
               f"answers means a smaller MTU on the way")
    return done("stalled", f"unsure: {n}'s connection to {peer} stopped carrying data after the "
                f"process group was up ('Connection timed out': the kernel gave up "
                f"retransmitting). Something on the path drops packets: {why}.")
