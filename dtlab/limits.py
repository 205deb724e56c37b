"""Numbers a caller gives, checked before anything starts: each refusal is one ValueError that
names the argument, the range and why -- ``dtlab CMD: ...`` and exit status 2 at the terminal.

NaN compares false with everything, so ``if iters < 1`` lets it through; ``10**15`` iterations
are "valid" and never end; ``[2]`` fails later as a TypeError deep inside a rank. Every entry
point's counts, seeds and delays go through :func:`whole` / :func:`number` instead. Ranks and
the timeouts of a launch are the runtime's own check (:mod:`dtlab.runtime.plan`).

A leaf, like :mod:`dtlab.vocab`: it imports nothing from dtlab.

>>> whole("iters", 20, 1, MAX_ITERS)
20
>>> try:
...     whole("iters", float("nan"), 1, MAX_ITERS, "timed calls per size")
... except ValueError as e:
...     print(e)
iters=nan must be a whole number >= 1 and <= 100000 (timed calls per size).
"""

from __future__ import annotations

import math
import operator

# calls per measurement: nccl-tests' default is 20; 100,000 calls of 1 ms are 100 s per size
MAX_ITERS = 100_000
# training steps of the course's models: the longest run any section makes is a few hundred
MAX_STEPS = 100_000
# numpy takes seeds below 2**32 (torch below 2**64): one range that both take
MAX_SEED = 2**32 - 1


def whole(name: str, value, low: int, high: int, why: str = "") -> int:
    """``value`` if it is a whole number (int, numpy int; not bool, not 2.0) in [low, high]."""
    try:
        v = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        v = None
    if v is None or not low <= v <= high:
        raise ValueError(f"{name}={value!r} must be a whole number >= {low} and <= {high}"
                         + (f" ({why})" if why else "") + ".")
    return v


def number(name: str, value, low: float, high: float, why: str = "") -> float:
    """``value`` as a float if it is a finite real number (not bool) in [low, high]."""
    try:
        v = math.nan if isinstance(value, (bool, str, bytes)) else float(value)
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not (math.isfinite(v) and low <= v <= high):
        raise ValueError(f"{name}={value!r} must be a number >= {low:g} and <= {high:g}"
                         + (f" ({why})" if why else "") + ".")
    return v
