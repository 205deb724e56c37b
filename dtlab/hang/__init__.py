"""Section 07: reproduce distributed failures on purpose, and diagnose them automatically.

    dtlab hang KIND [--nprocs N] [--backend B] [--timeout S] [--out DIR]   (reproduce)
    dtlab diagnose DIR [--json]                                            (diagnose)

Below Python (py-spy --native, cuda-gdb, NCCL's RAS client): :mod:`dtlab.hang.native`.
"""

import importlib

from . import diagnose as _package  # noqa: F401 (first: the name `diagnose` is the function below)
from .diagnose import NoEvidence
from .kinds import KINDS
from .reproduce import Reproduction, reproduce

__all__ = ["reproduce", "diagnose", "KINDS", "CLASSES", "Diagnosis", "NoEvidence", "Reproduction"]


def diagnose(path: str):
    """The verdict for the evidence folder ``path`` (:func:`dtlab.hang.diagnose.pipeline.diagnose`;
    raises :class:`NoEvidence` if it holds none)."""
    from .diagnose.pipeline import diagnose as verdict_of

    return verdict_of(path)


# imported when first asked for, so that a world without the verdict still has the readers
_LAZY = {"CLASSES": ".diagnose.verdict", "Diagnosis": ".diagnose.verdict"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
