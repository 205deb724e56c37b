"""What went wrong in a multi-node launch, from what an engineer has: each node's torchrun console,
the launch lines, each host's addresses, ``tc qdisc show`` and ``ping -M do`` path MTUs, and the
check's report.

Contract: :func:`diagnose` returns a :class:`~dtlab.hang.diagnose.verdict.Diagnosis`, the shape
``dtlab diagnose`` gives, with ``about="launch"``: ``failure_class``, ``summary``, ``evidence``
(``{file, kind, finding}`` items) and ``confident``; no rank or collective is named
(``culprit_ranks`` and ``root_ranks`` empty, ``collective_seq`` and ``op`` None). ``to_dict()`` is
its JSON form, ``render()`` its text.

The same pipeline as :mod:`dtlab.hang.diagnose`, smaller:

1. :mod:`.facts`    the consoles, exit codes, report, plan and probes, and what they say at a
                    glance (which nodes could not find an interface, stalled, failed to reach
                    the store, printed nothing)
2. :mod:`.verdict`  the rules in order, the first that names the failure decides: each takes
                    the :class:`~.verdict.Verdict` (the facts, the evidence noted so far) and
                    returns a Diagnosis or None (pass); they live in :mod:`.network` (the
                    interface, a connection that stalled), :mod:`.rendezvous` (the store could
                    not be reached, a node never came) and :mod:`.outcome` (the check's report,
                    a rehearsal stopped at its limit, anything else)

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

Unsure (``confident`` False, as ``dtlab diagnose`` says of thin evidence): ``stalled``,
``unfinished`` and ``launch_failed`` -- the evidence fits more than one cause, or names none; the
summary says what would decide. Every other class is named only when its evidence decides it.

The store rules read one failing node at a time, in the consoles' order, each node through the
per-node rules of :mod:`.rendezvous` in turn: the first node whose connects a rule explains
decides.

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

from ...hang.diagnose.verdict import Diagnosis
from .facts import gather
from .verdict import decide

__all__ = ["diagnose", "Diagnosis"]


def diagnose(consoles: dict[str, str], codes: dict[str, int | None], report: dict | None,
             plan: list[dict], qdiscs: dict[str, str] | None = None,
             paths: list[dict] | None = None) -> Diagnosis:
    """Name the failure (module docstring). ``plan``: one dict per node in launch order with
    ``name``, ``address``, ``endpoint`` and ``start`` (the first node hosts the rendezvous);
    ``paths``: :func:`dtlab.multinode.netns.path_mtu` results, None where nobody probed."""
    return decide(gather(consoles, codes, report, plan, qdiscs, paths))
