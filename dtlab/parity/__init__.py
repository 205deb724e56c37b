"""Section 05: convergence parity -- does the distributed run train like the one it replaces?

Contract: :func:`compare` (DDP vs one process, one bug or its fix) and :func:`compare_many` (many
in one launch) return :class:`Report`; :func:`verdict` says whether a bug was caught by its own
definition; :data:`TOLERANCE` holds the tolerances per dtype and backend and
:mod:`dtlab.parity.report` says why. :func:`broadcast_at_construction` shows what DDP already
guarantees. FSDP2 lives in :mod:`dtlab.parity.fsdp`, gradient accumulation (DDP and FSDP2) in
:mod:`dtlab.parity.accumulate`, checkpoint and resume (DCP, N ranks -> M) in
:func:`resume` (:mod:`dtlab.parity.checkpoint`), mixed precision (bf16, fp16 with GradScaler,
FSDP2's MixedPrecisionPolicy) against float32 in :func:`mixed_precision`
(:mod:`dtlab.parity.precision`).
From a terminal::

    dtlab parity --bug batchnorm --json
    dtlab parity --bug batchnorm --fix

>>> from dtlab.parity import compare          # doctest: +SKIP
>>> compare("no_set_epoch").first_divergent_step   # doctest: +SKIP
4
"""

from .checkpoint import resume
from .ddp import compare, compare_many, verdict
from .guarantees import broadcast_at_construction
from .precision import mixed_precision
from .report import BUGS, TOLERANCE, Report, tolerance

__all__ = ["compare", "compare_many", "verdict", "broadcast_at_construction", "BUGS",
           "TOLERANCE", "Report", "tolerance", "resume", "mixed_precision"]
