"""``dtlab diagnose DIR``: read whatever a failed distributed job left behind and name the cause.

    dtlab diagnose evidence/size_mismatch
    dtlab diagnose /path/to/job/logs --json

A small pipeline of passes, each tested on its own (nbgrader-style):

1. :mod:`.load`     find the evidence, recognising each file by content, not name; regular
                    files only, bounded reads, malformed files listed as unreadable
2. :mod:`.signals`  messages in console text (tracebacks, gloo/NCCL errors, watchdog, DETAIL, OOM)
   :mod:`.launcher` what torchrun / srun / slurmstepd say about how each rank ended
3. :mod:`.traces`   each rank's collective sequence (Flight Recorder or NCCL COLL lines)
4. :mod:`.facts`    everything about one folder, per rank
5. :mod:`.verdict`  the failure class, the culprit and root ranks, the collective, a summary
                    (rules in :mod:`.failed` and :mod:`.mismatch`)

``main`` (``dtlab diagnose DIR``) exits 0 when the evidence shows no failure, 1 when it names
one (any class but ``no_failure``), 2 when the folder holds no usable evidence (or is not a
folder); the reason goes to stderr in one line.

>>> d = diagnose("data/h200x2-hang/size_mismatch")       # doctest: +SKIP
>>> d.failure_class, d.culprit_ranks, d.collective_seq   # doctest: +SKIP
('size_mismatch', [0, 1], 3)

Step 3 builds on torch's own Flight Recorder analyzer where it applies: when the calls that
disagree are Flight Recorder entries, the kind of mismatch is the one torch's ``Op.match``
reports (``torch.distributed.flight_recorder``). dtlab adds what that analyzer lacks: NCCL's COLL
lines and gloo's dumps as sequences too, evidence of other kinds (stacks, console messages,
exit codes), and ranks that left no dump because they had already died.
"""

from __future__ import annotations

import json
import sys

from .facts import gather
from .load import NoEvidence, load
from .verdict import CLASSES, Diagnosis, decide

__all__ = ["diagnose", "Diagnosis", "NoEvidence", "CLASSES", "render", "main"]


def diagnose(path: str) -> Diagnosis:
    """The verdict for the evidence folder ``path`` (raises :class:`NoEvidence` if empty)."""
    return decide(gather(load(path)))


def render(d: Diagnosis) -> str:
    culprit = ", ".join(map(str, d.culprit_ranks)) or "-"
    lines = [f"failure class : {d.failure_class}",
             f"culprit ranks : {culprit}",
             "collective    : " + (f"#{d.collective_seq}" + (f" ({d.op})" if d.op else "")
                                    if d.collective_seq else
                                    f"{d.op} (which one: unknown)" if d.op else "-"),
             f"confident     : {'yes' if d.confident else 'no: ' + _unsure(d)}",
             "", d.summary, "", "evidence:"]
    for e in d.evidence:
        lines.append(f"  [{e['kind']}] {e['file']}: {e['finding']}")
    if not d.evidence:
        lines.append("  (none that points anywhere)")
    return "\n".join(lines)


def _unsure(d: Diagnosis) -> str:
    return ("no majority singles a rank out" if len(d.culprit_ranks) > 1
            else "the evidence is thin; see the summary")


def main(path: str, as_json: bool = False) -> int:
    """Print the diagnosis of ``path``; the exit status is 0 (no failure), 1 (failure found)
    or 2 (no usable evidence)."""
    try:
        d = diagnose(path)
    except NoEvidence as e:
        print(f"dtlab diagnose: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d.to_dict(), indent=2) if as_json else render(d))
    return 0 if d.failure_class == "no_failure" else 1
