"""The only code that starts, talks to, watches and stops ranks.

launch (one-shot ``run``) and pool (persistent ranks) on top of procs (process lifetime),
worker/serve (the rank side), channel (the pool's authenticated socket), output (per-rank
streams), stacks (py-spy / faulthandler), magics (``%dtlab``, a skin over Pool).
"""

from .errors import HangError, LaunchError, PoolBrokenError, RankError
from .launch import run
from .pool import Pool
from .procs import left_behind
from .results import RankResult, Results
from .torchrun import Torchrun, torchrun

__all__ = ["run", "Pool", "Results", "RankResult", "RankError", "HangError", "LaunchError",
           "PoolBrokenError", "left_behind", "torchrun", "Torchrun"]
