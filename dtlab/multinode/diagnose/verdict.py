"""Step 2: from facts to a verdict, as :mod:`dtlab.hang.diagnose.verdict` does it.

Each rule either names the failure or passes; the first that names it decides. The order is the
order the evidence happened in, and trusted in: an interface a node could not find (the process
group never started) > a connection that stalled once the process group was up (so the
rendezvous and the stores had worked; store errors logged after it are agents tearing down) >
the rendezvous store that could not be reached > a node that never came > the check's own
report > a rehearsal stopped at its limit > anything else. A rule may also only add evidence and
pass (a store error in a run that worked).
"""

from __future__ import annotations

from ...hang.diagnose.verdict import Diagnosis, Notes
from . import network, outcome, rendezvous
from .facts import Facts

RULES = (network.wrong_ifname, network.mtu_mismatch, network.stalled,
         rendezvous.store_error_in_a_run_that_worked, rendezvous.store_unreachable,
         rendezvous.missing_node, outcome.world_incomplete, outcome.slow_link,
         outcome.no_failure, outcome.unfinished, outcome.launch_failed)

CLASSES = ("wrong_ifname", "mtu_mismatch", "stalled", "blocked_data_ports", "wrong_master_addr",
           "wrong_port", "blocked_port", "missing_node", "slow_link", "world_incomplete",
           "no_failure", "unfinished", "launch_failed")


class Verdict(Notes):
    """The facts, the evidence items noted so far (:class:`dtlab.hang.diagnose.verdict.Notes`),
    and the Diagnosis they make."""

    f: Facts

    def done(self, cls: str, summary: str, confident: bool = True) -> Diagnosis:
        """A verdict about the launch: no rank, no collective; ``confident`` False when the
        evidence does not decide (the summary says what would)."""
        return Diagnosis(cls, [], None, None, summary, self.evidence, confident, about="launch")

    def decide(self) -> Diagnosis:
        for rule in RULES:
            d = rule(self)
            if d is not None:
                return d
        raise AssertionError("launch_failed always decides")


def decide(facts: Facts) -> Diagnosis:
    return Verdict(facts).decide()
