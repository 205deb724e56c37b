"""NCCL's own account of one setting's run, read from its ``NCCL_DEBUG=INFO`` files.

Each setting runs with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING`` and
``NCCL_DEBUG_FILE=<folder>/nccl.%h.%p.log``. From those files:

* **transport** -- how the ranks' collective connections travel (``P2P/CUMEM``, ``SHM``,
  ``NET/Socket``, ``NET/IB`` ...), from the ``Channel 00/0 : 0[0] -> 1[1] via ...`` lines;
* **comm_channels** -- the channels the communicator set up (``24 coll channels, ...``);
* per call, from rank 0's TUNING line ``AllReduce: 1048576 Bytes -> Algo RING proto LL
  channel{Lo..Hi}={0..21}``: the **algorithm**, **protocol** and **channels** (Hi - Lo + 1) NCCL
  chose. The byte count there is the call's ``count x element size`` -- for AllGather and
  ReduceScatter ``count`` is per rank -- i.e. a sweep row's ``count`` column times its element
  size, which is how rows and lines are matched (:func:`call_bytes`).

The sweep's own helper calls (barriers, the MAX/SUM of times and ``#wrong``) are all-reduces of
1-8 bytes; where one shares a row's byte count, the majority of that size's lines -- the timed
loop's -- decides.

>>> acc = read_account("data/h200x2-nccl-logs/p2p_disabled")          # doctest: +SKIP
>>> acc["transport"], acc["comm_channels"], acc["calls"][("AllReduce", 262144)]  # doctest: +SKIP
('SHM', 4, ('Ring', 'LL', 4))
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..vocab import DTYPES, dtype_name

if TYPE_CHECKING:
    import pandas

# dtlab.vocab op name -> NCCL's function name in TUNING lines; all_to_all and sendrecv are
# grouped Send/Recv calls, for which NCCL chooses no algorithm
NCCL_FUNC = {"all_reduce": "AllReduce", "all_gather": "AllGather",
             "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce"}
COLUMNS = ["algorithm", "protocol", "channels", "comm_channels", "transport"]


def debug_env(folder: str | os.PathLike) -> dict[str, str]:
    """The variables that make NCCL write its account into ``folder`` (one file per process)."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,TUNING",
            "NCCL_DEBUG_FILE": os.path.join(os.fspath(folder), "nccl.%h.%p.log")}


def _per_call(paths: list[Path]) -> dict[tuple[str, int], tuple[str, str, int | None]]:
    """(NCCL function, bytes) -> the (algorithm, protocol, channels) most of its calls got."""
    from ..nccl_log import lines
    from ..nccl_log.sources import Source, numbered_lines

    seen: dict[tuple[str, int], Counter] = {}
    # numbered_lines: line by line, overlong lines skipped (memory stays bounded)
    for _, _, text in numbered_lines([Source(str(p), False, path=str(p)) for p in paths]):
        if "Bytes -> Algo" not in text:  # cheap filter: most lines are something else
            continue
        rec = lines.split_line(text)
        got = lines.algo(rec.msg) if rec else None
        if not got or got["op"] is None:
            continue
        lo_hi = got.get("channels")
        nch = lo_hi[1] - lo_hi[0] + 1 if lo_hi else None
        seen.setdefault((got["op"], got["bytes"]), Counter())[
            (got["algorithm"], got["protocol"], nch)] += 1
    return {key: c.most_common(1)[0][0] for key, c in seen.items()}


def read_account(folder: str | os.PathLike) -> dict[str, Any] | None:
    """What NCCL logged in ``folder``; None when it holds no NCCL log (gloo, or logging off).

    Keys: ``transport`` ('P2P/CUMEM', 'SHM', 'NET/Socket', several joined by '+'),
    ``comm_channels``, ``calls`` {(NCCL function, bytes): (algorithm, protocol, channels)},
    ``env`` (NCCL_* NCCL says it read), ``nccl_version``, ``warning`` (first WARN message),
    ``files``.
    """
    from .. import nccl_log

    folder = Path(folder)
    paths = sorted(p for p in folder.glob("*") if p.is_file()) if folder.is_dir() else []
    if not paths:
        return None
    try:
        log = nccl_log.parse(str(folder))
    except nccl_log.NotAnNcclLog:
        return None
    comms = [log.world] if log.world else log.communicators
    views = [v for c in comms for _, v in sorted(c.members.items())]
    kinds = sorted({t.kind for v in views for t in v.transports})
    return {"transport": "+".join(kinds) or None,
            "comm_channels": next((v.n_channels for v in views if v.n_channels), None),
            "calls": _per_call(paths), "env": log.env, "nccl_version": log.nccl_version,
            "warning": log.warnings[0]["msg"] if log.warnings else None,
            "files": [str(p) for p in paths]}


def call_bytes(op: str, count: int, type_name: str) -> int | None:
    """The byte count NCCL's TUNING line prints for a sweep row (``count`` is the NCCL count
    argument, as in nccl-tests' count column)."""
    # the frame's ``type`` column holds nccl-tests' names ('float', 'half'): vocab reads both
    name = dtype_name(type_name)
    if name not in DTYPES or count is None:
        return None
    return int(count) * DTYPES[name][0]


def annotate(df: "pandas.DataFrame", account: dict | str | os.PathLike | None
             ) -> "pandas.DataFrame":
    """``df`` (rows with op, count, type) with NCCL's account beside each row: algorithm,
    protocol, channels, comm_channels, transport. ``account``: :func:`read_account`'s dict or
    the folder itself; None (gloo) leaves the columns empty.

    >>> import pandas as pd
    >>> rows = pd.DataFrame({"op": ["all_reduce"], "size": [1024], "count": [256],
    ...                      "type": ["float"]})
    >>> annotate(rows, "data/h200x2-nccl-logs/default")[COLUMNS].iloc[0].tolist()  # doctest: +SKIP
    ['Ring', 'LL', 1, 24, 'P2P/CUMEM']
    """
    import pandas as pd

    if account is not None and not isinstance(account, dict):
        account = read_account(account)
    out = df.copy()
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for op, count, type_name in zip(out["op"], out["count"], out["type"]):
        chosen = None
        if account and op in NCCL_FUNC and pd.notna(count):
            chosen = account["calls"].get((NCCL_FUNC[op], call_bytes(op, count, type_name)))
        algo, proto, nch = chosen or (None, None, None)
        cols["algorithm"].append(algo)
        cols["protocol"].append(proto)
        cols["channels"].append(nch)
        cols["comm_channels"].append(account["comm_channels"] if account else None)
        cols["transport"].append(account["transport"] if account else None)
    for c in COLUMNS:
        out[c] = pd.array(cols[c], dtype="Int64") if "channels" in c else cols[c]
    return out
