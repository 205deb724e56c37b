"""Step 5: from facts to a verdict, strongest evidence first.

Each rule either names the failure or passes; the order is the order an engineer trusts
evidence in: an out-of-memory message > a rank's own Python exception > a rank that died >
a collective checker's own report (TORCH_DISTRIBUTED_DEBUG=DETAIL) > the ranks' collective
sequences (Flight Recorder, NCCL COLL lines) > ranks that left while others waited > where the
ranks are stuck (stacks, timeouts) > timing (stragglers). The rules live in :mod:`.failed`
(a rank failed or left) and :mod:`.mismatch` (the ranks disagree or are stuck).

Two kinds of ranks are named:

* ``culprit_ranks``: where the bug is. With a strict majority, the odd ones out; with none (two
  ranks that disagree, a tie) every candidate, with ``confident`` False and a summary that says
  what would tell them apart (:mod:`dtlab.divergence`'s rule). A rank that only lost its peer,
  or that the launcher, dtlab or an outside timeout stopped, is never a culprit.
* ``root_ranks``: the ranks whose own failure or departure ended the run -- a primary
  exception, a death, a rank that returned or exited while its peers still waited in a
  collective. Empty when no rank ended it by itself (a hang stopped from outside, a mismatch).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import failed, mismatch
from .facts import Facts
from .notes import add_context, add_unreadable

CLASSES = ("exception", "size_mismatch", "dtype_mismatch", "op_mismatch", "missing_collective",
           "rank_died", "oom", "p2p_deadlock", "straggler", "start_timeout", "timeout_unknown",
           "no_failure")


@dataclass
class Diagnosis:
    """What ``dtlab diagnose`` concluded (see the module docstring for the two kinds of ranks).

    ``confident`` is False when the verdict rests on thin evidence (a byte count, stacks alone)
    or no majority singles a rank out: a second look (TORCH_DISTRIBUTED_DEBUG=DETAIL, Flight
    Recorder, a third rank) is worth it. ``evidence``: {file, kind, finding} items, including
    one ``unreadable`` item per file that was skipped or could not be made sense of.

    ``about``: what the verdict is about -- ``"ranks"``, one job's ranks and their collectives
    (``dtlab diagnose``), or ``"launch"``, a multi-node launch (:mod:`dtlab.multinode.diagnose`),
    where no rank or collective is named and :meth:`render` leaves those lines out."""

    failure_class: str
    culprit_ranks: list[int]
    collective_seq: int | None
    op: str | None
    summary: str
    evidence: list[dict] = field(default_factory=list)
    confident: bool = True
    root_ranks: list[int] = field(default_factory=list)
    about: str = "ranks"

    def to_dict(self) -> dict:
        return {"failure_class": self.failure_class, "culprit_ranks": self.culprit_ranks,
                "root_ranks": self.root_ranks, "collective_seq": self.collective_seq,
                "op": self.op, "confident": self.confident, "summary": self.summary,
                "evidence": self.evidence, "about": self.about}

    def render(self) -> str:
        """The verdict as ``dtlab diagnose`` prints it: the class, the ranks and collective (for
        a verdict about ranks), whether it is sure and why not, the summary, the evidence."""
        lines = [f"failure class : {self.failure_class}"]
        if self.about == "ranks":
            lines += [f"culprit ranks : {', '.join(map(str, self.culprit_ranks)) or '-'}",
                      "collective    : " + (
                          f"#{self.collective_seq}" + (f" ({self.op})" if self.op else "")
                          if self.collective_seq else
                          f"{self.op} (which one: unknown)" if self.op else "-")]
        lines += [f"confident     : {'yes' if self.confident else 'no: ' + self._unsure()}",
                  "", self.summary, "", "evidence:"]
        for e in self.evidence:
            lines.append(f"  [{e['kind']}] {e['file']}: {e['finding']}")
        if not self.evidence:
            lines.append("  (none that points anywhere)")
        return "\n".join(lines)

    def _unsure(self) -> str:
        return ("no majority singles a rank out" if len(self.culprit_ranks) > 1
                else "the evidence is thin; see the summary")


class Notes:
    """What every diagnosis's rules share: the facts, and the evidence items noted so far (each
    once). The multinode diagnosis (:mod:`dtlab.multinode.diagnose`) builds on it too."""

    def __init__(self, f):
        self.f = f
        self.evidence: list[dict] = []

    def note(self, file: str, kind: str, finding: str) -> None:
        item = {"file": file, "kind": kind, "finding": finding}
        if item not in self.evidence:
            self.evidence.append(item)


class Verdict(Notes):
    """The facts, the evidence items noted so far, and helpers the rules share."""

    f: Facts

    def done(self, cls, culprits, seq, op, summary, confident: bool = True,
             root=()) -> Diagnosis:
        return Diagnosis(cls, sorted(set(culprits)), seq, op, summary, self.evidence, confident,
                         sorted(set(root)))

    def stuck_seq(self, exclude=()) -> tuple[int | None, str | None]:
        """The collective the other ranks were last in (their last recorded call); without
        their traces, the one after the last that the excluded (failed) ranks issued."""
        from ...vocab import op_name

        last = [t[-1] for r, t in self.f.traces.items() if t and r not in exclude]
        if not last:
            mine = [t for r, t in self.f.traces.items() if t and r in exclude]
            waiting = [self.waiting_op(r) for r in self.f.ranks if r not in exclude]
            ops = [w for w in waiting if w]
            if ops:
                return (max(t[-1].seq for t in mine) + 1 if mine else None), op_name(ops[0])
            return None, None
        seq, _ = Counter(c.seq for c in last).most_common(1)[0]
        return seq, next(c.op for c in last if c.seq == seq)

    @staticmethod
    def where(seq: int | None, op: str | None) -> str:
        """' in collective #3 (all_reduce)', ' in all_reduce' or ' in a collective'."""
        return f" in collective #{seq} ({op})" if seq else f" in {op}" if op else " in a collective"

    def waiting_op(self, rank: int) -> str | None:
        """The torch.distributed call a rank's traceback or stack shows it inside, if any."""
        for s in self.f.of("exception", rank):
            if s.data.get("dist_op"):
                return s.data["dist_op"]
        st = self.f.stacks.get(rank)
        return st.data.get("dist_op") if st else None

    def site_of(self, rank: int) -> str | None:
        for kind in ("fatal", "exception"):
            for s in self.f.of(kind, rank):
                if s.data.get("site"):
                    return s.data["site"]
        st = self.f.stacks.get(rank)
        return st.data.get("site") if st else None

    def decide(self) -> Diagnosis:
        for rule in (failed.oom, failed.exception, failed.died, failed.start_up,
                     mismatch.detail_report,
                     mismatch.traces, failed.left_early, mismatch.stuck, mismatch.straggler,
                     fallback):
            d = rule(self)
            if d is not None:
                add_context(self.f, self.note, self.evidence)
                add_unreadable(self.f, self.note)
                return d
        raise AssertionError("fallback always decides")


def fallback(v: Verdict) -> Diagnosis:
    f = v.f
    bad = (f.outcome not in (None, "ok") or f.of("exception") or f.of("watchdog") or f.outside
           or any(c for c in f.reported_exits.values()))
    for s in f.of("watchdog"):
        v.note(s.path, "watchdog", s.line.strip()[:200])
    if bad:
        how = (f"The job was stopped from outside ({f.outside}), which says nothing about the "
               f"cause; and the evidence does not show what the ranks were stuck in"
               if f.outside else "The ranks failed or timed out, but the evidence does not "
                                 "show why")
        return v.done("timeout_unknown", [], None, None,
                      how + ": collect py-spy stacks during the hang, NCCL_DEBUG=INFO "
                      "(NCCL_DEBUG_SUBSYS=INIT,COLL) and Flight Recorder dumps, or rerun with "
                      "TORCH_DISTRIBUTED_DEBUG=DETAIL.", confident=False)
    return v.done("no_failure", [], None, None,
                  "Every rank finished and no rank lagged the others: nothing to fix.")


def decide(facts: Facts) -> Diagnosis:
    return Verdict(facts).decide()
