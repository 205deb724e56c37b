"""``iperf3`` between two simulated nodes: what the link carries for one TCP stream, the figure to
put beside a collective's bus bandwidth.

Contract: :func:`iperf` runs ``iperf3 -s -1`` (one test, then exit) in node ``server``'s network
namespace and ``iperf3 -c ADDR -J`` in node ``client``'s, both started and stopped by
:class:`dtlab.runtime.agents.Agents` (nothing survives, a SIGKILL of the caller included), and
returns :func:`parse` of the client's JSON. :func:`available` says in one line why not, where
Debian's ``iperf3`` is missing. Root and namespaces, as :class:`.netns.Network`::

    with Network(2) as net:                          # sudo python ...
        iperf(net, 0, 1, seconds=2)["Gbps"]          # 32.3 on a veth pair (2-core VM)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from ..runtime.agents import Agents, temporary

PORT = 5201  # iperf3's own default; free in a fresh namespace


def available() -> str | None:
    """None if ``iperf3`` can run here, else why not (one line)."""
    if not shutil.which("iperf3"):
        return "no `iperf3` command (Debian: apt-get install iperf3)"
    return None


def parse(text: str) -> dict:
    """The figures of one ``iperf3 -c ... -J`` run (a TCP test): bits per second as the receiver
    counted them (``end.sum_received``; what arrived, the sender's count includes what sat in
    its buffers), the sender's, retransmitted segments, seconds, version.

    >>> r = parse('{"start": {"version": "iperf 3.12", "test_start": {"protocol": "TCP", '
    ...           '"duration": 2}}, "end": {"sum_sent": {"bits_per_second": 1.0e8, '
    ...           '"retransmits": 3, "seconds": 2.0}, "sum_received": {"bits_per_second": '
    ...           '9.6e7, "seconds": 2.0}}}')
    >>> r["Gbps"], r["sent_Gbps"], r["retransmits"]
    (0.096, 0.1, 3)
    """
    try:
        j = json.loads(text[text.index("{"):text.rindex("}") + 1])
    except ValueError:
        raise ValueError(f"not iperf3 -J output: {text.strip()[:200]!r}") from None
    if j.get("error"):
        raise RuntimeError(f"iperf3: {j['error']}")
    end, start = j["end"], j["start"]
    proto = start.get("test_start", {}).get("protocol", "TCP")
    if proto != "TCP" or "sum_received" not in end:
        raise ValueError(f"iperf3 -J output of a {proto} test: parse reads TCP tests only")
    recv, sent = end["sum_received"], end["sum_sent"]
    return {"Gbps": round(recv["bits_per_second"] / 1e9, 4),
            "sent_Gbps": round(sent["bits_per_second"] / 1e9, 4),
            "retransmits": sent.get("retransmits"), "seconds": round(recv["seconds"], 2),
            "version": start.get("version")}


def iperf(net, server: int = 0, client: int = -1, seconds: int = 2, timeout: float = 30) -> dict:
    """One TCP stream from node ``client`` to node ``server`` for ``seconds`` s (module
    docstring); adds ``server``/``client`` (node names) and ``command`` (the client's line)."""
    why = available()
    if why:
        raise RuntimeError(why)
    if not 1 <= seconds <= 60:
        raise ValueError(f"seconds {seconds}: give 1 to 60 (iperf3 -t takes whole seconds)")
    client %= net.n
    if client == server % net.n:
        raise ValueError(f"server and client are both node {client}: give two nodes")
    addr = net.addresses[server]
    cmd = ["iperf3", "-c", addr, "-p", str(PORT), "-J", "-t", str(seconds)]
    with temporary("dtlab-iperf-") as ag:
        ag.start("server", [*net.exec_prefix(server), "iperf3", "-s", "-1", "-B", addr,
                            "-p", str(PORT)], dict(os.environ))
        _listening(ag, net, server, timeout=5)
        ag.start("client", [*net.exec_prefix(client), *cmd], dict(os.environ))
        codes = ag.wait(timeout, ["client"])
        text = ag.output("client")
    if codes["client"] is None:
        raise TimeoutError(f"iperf3 client still running after {timeout} s: stopped")
    out = parse(text)
    return {**out, "server": f"node{server}", "client": f"node{client}",
            "command": " ".join(cmd)}


def _listening(ag: Agents, net, node: int, timeout: float) -> None:
    """Until the server listens on PORT in node ``node`` (a client that comes first is refused)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run([*net.exec_prefix(node), "ss", "-Htln", f"sport = :{PORT}"],
                           capture_output=True, text=True, timeout=10)
        if r.stdout.strip():
            return
        if ag.poll()["server"] is not None:
            raise RuntimeError(f"iperf3 server exited: {ag.output('server').strip()[-300:]}")
        time.sleep(0.05)
    raise TimeoutError(f"iperf3 server not listening after {timeout} s")
