"""NCCL tuning sweeps: busbw vs size under a grid of NCCL settings, with NCCL's own account.

NCCL picks an algorithm (Ring, Tree, ...), a protocol (LL, LL128, Simple), a number of channels
and a transport (P2P over NVLink/PCIe, SHM through host memory, the network) for every call.
Environment variables override those choices -- read once, when a communicator is created -- so
each setting here runs in fresh ranks, and NCCL's log of that run (NCCL_DEBUG=INFO) says what it
really did beside each measured row.

* :func:`grid` / :data:`PRESETS` / :data:`GROUPS` -- settings to try (checked before any rank
  starts; NVLS is never enabled: every setting runs with ``NCCL_NVLS_ENABLE=0``);
* :func:`sweep` -- run them: a :class:`TuneResult`, its ``frame`` a tidy DataFrame, one row per
  (setting, size), with the settings, failures, notes and NCCL's account beside it;
* :func:`best`, :func:`table`, :func:`plot`, :func:`to_json` -- read it (or a recorded frame);
* :func:`annotate` / :func:`read_account` -- NCCL's account from a folder of its logs.

>>> import dtlab.tuning as tuning
>>> settings = tuning.grid(NCCL_ALGO=["Ring", "Tree"], NCCL_PROTO=["LL", "Simple"])
>>> len(settings), tuning.label_of(settings[0])
(4, 'ALGO=Ring PROTO=LL')
>>> res = tuning.sweep(settings, min_bytes="1K", max_bytes="1G")            # doctest: +SKIP
>>> print(tuning.table(res)); tuning.best(res, size="1M")                    # doctest: +SKIP
>>> tuning.plot(res, link_limit_gbps=450).figure.savefig("tune.png")         # doctest: +SKIP

Terminal: ``dtlab tune --algo Ring,Tree --proto LL,Simple -b 1K -e 1G [--json]``.
On CPUs (gloo) the sweep runs the same way, but NCCL is not involved: the settings change
nothing and the algorithm/protocol/channels/transport columns stay empty (the result's ``notes``).
Recorded on 2 GPUs: ``benchmarks/tuning_gpu.py``.
"""

from .account import annotate, call_bytes, debug_env, read_account
from .report import (TuneResult, best, best_text, default_label, plot, table, to_json,
                     wide_text)
from .runner import columns, combine, sweep
from .settings import (ALGORITHMS, GROUPS, PRESETS, PROTOCOLS, TUNABLE, VARS, Setting,
                       check_setting, check_value, grid, label_of, preset, resolve_settings)

__all__ = ["sweep", "grid", "preset", "PRESETS", "GROUPS", "VARS", "TUNABLE", "ALGORITHMS",
           "PROTOCOLS", "Setting", "check_setting", "check_value", "label_of",
           "resolve_settings", "best", "best_text", "table", "wide_text", "plot", "to_json",
           "combine", "TuneResult", "columns", "annotate", "read_account", "call_bytes",
           "debug_env", "default_label"]
