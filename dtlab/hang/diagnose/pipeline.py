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
