"""The only code that starts, talks to, watches and stops ranks.

launch (one-shot ``run``) and pool (persistent ranks) on top of procs (process lifetime),
worker (the rank side), output (per-rank streams), stacks (py-spy / faulthandler).
"""

from .errors import HangError, LaunchError, PoolBrokenError, RankError
from .launch import run
from .results import RankResult, Results

__all__ = ["run", "Results", "RankResult", "RankError", "HangError", "LaunchError",
           "PoolBrokenError"]
