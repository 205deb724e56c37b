"""Section 07: reproduce distributed failures on purpose, and diagnose them automatically.

    dtlab hang KIND [--nprocs N] [--backend B] [--timeout S] [--out DIR]   (reproduce)
    dtlab diagnose DIR [--json]                                            (diagnose)
"""

from .diagnose import CLASSES, Diagnosis, NoEvidence, diagnose
from .kinds import KINDS
from .reproduce import Reproduction, reproduce

__all__ = ["reproduce", "diagnose", "KINDS", "CLASSES", "Diagnosis", "NoEvidence", "Reproduction"]
