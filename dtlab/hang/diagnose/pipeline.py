"""The whole diagnosis of one folder (load, gather, decide), and ``dtlab diagnose``'s output.

>>> print(render(diagnose("data/h200x2-hang/size_mismatch")))     # doctest: +SKIP
failure class : size_mismatch
...
"""

from __future__ import annotations

import json
import sys

from .facts import gather
from .load import NoEvidence, load
from .verdict import Diagnosis, decide


def diagnose(path: str) -> Diagnosis:
    """The verdict for the evidence folder ``path`` (raises :class:`NoEvidence` if empty)."""
    return decide(gather(load(path)))


def render(d: Diagnosis) -> str:
    """``d.render()`` (notebook 07 and ``dtlab hang`` call it by this name)."""
    return d.render()


def main(path: str, as_json: bool = False) -> int:
    """Print the diagnosis of ``path``; the exit status is 0 (no failure), 1 (failure found)
    or 2 (no usable evidence)."""
    try:
        d = diagnose(path)
    except NoEvidence as e:
        print(f"dtlab diagnose: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d.to_dict(), indent=2) if as_json else d.render())
    return 0 if d.failure_class == "no_failure" else 1
