"""The whole diagnosis of one folder (load, gather, decide); ``dtlab diagnose`` prints it
(dtlab/hang/diagnose/cli.py).

>>> print(render(diagnose("data/h200x2-hang/size_mismatch")))     # doctest: +SKIP
failure class : size_mismatch
...
"""

from __future__ import annotations

from .facts import gather
from .load import load
from .verdict import Diagnosis, decide


def diagnose(path: str) -> Diagnosis:
    """The verdict for the evidence folder ``path`` (raises :class:`NoEvidence` if empty)."""
    return decide(gather(load(path)))


def render(d: Diagnosis) -> str:
    """``d.render()`` (notebook 07 and ``dtlab hang`` call it by this name)."""
    return d.render()
