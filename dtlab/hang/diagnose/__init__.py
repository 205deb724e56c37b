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

import importlib

from .load import NoEvidence, load

__all__ = ["diagnose", "Diagnosis", "NoEvidence", "CLASSES", "render", "gather", "load"]

# The rest is imported when first asked for: an exercise's world may lack the verdict (07's
# classify) or the facts (07's diagnosis) and still read evidence with ``load``.
_LAZY = {"gather": "facts", "CLASSES": "verdict", "Diagnosis": "verdict", "decide": "verdict",
         "diagnose": "pipeline", "render": "pipeline"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
