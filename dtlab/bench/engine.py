"""``dtlab.bench.sweep``: nccl-tests' bandwidth sweep, done with torch.distributed on N ranks.

One launch runs every requested collective over sizes ``min_bytes .. max_bytes`` (times
``factor``), each size out-of-place and in-place, timed and checked as nccl-tests does (see
:mod:`dtlab.bench.timing`), and comes back as a :class:`~dtlab.bench.result.SweepResult` whose
``frame`` is a pandas DataFrame with nccl-tests' columns::

    op nranks backend tool size count type redop root
    oop_time_us oop_algbw oop_busbw oop_wrong ip_time_us ip_algbw ip_busbw ip_wrong

Which columns are N/A (NaN), and why:

* ``oop_*`` of all_reduce, broadcast and reduce: torch's APIs for them work in place only (one
  tensor is both input and output), which is nccl-tests' in-place column;
* ``ip_wrong`` of all_to_all and sendrecv: in place, send and receive buffers are one buffer and
  the result is undefined, so nccl-tests prints N/A there and so do we (both are still timed);
* a column the backend cannot run (the result's ``unsupported`` says which, and the error).

all_gather in place passes the rank's slice of the output as input (nccl-tests' in-place);
reduce_scatter in place writes into the rank's slice of the input. Sizes that nccl-tests rounds
down to 0 B (per-rank chunks are whole 16-byte lines) are skipped: the result's ``skipped``.

    >>> import dtlab.bench as bench
    >>> res = bench.sweep("all_gather", "1K", "64K", nprocs=2, backend="gloo")  # doctest: +SKIP
    >>> res.frame[["size", "oop_busbw", "ip_busbw", "oop_wrong"]]               # doctest: +SKIP
    >>> print(res.render())                                                     # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..limits import MAX_ITERS, whole
from ..vocab import check_dtype, op_name
from .formulas import OPS, canonical_op, format_size, sweep_sizes
from .nccl_tests import parse_nccl_tests_all
from .report import render_report
from .result import _COLUMN_NAMES, _VALUES, SweepConfig, SweepResult, frame_of, to_reports

if TYPE_CHECKING:
    import pandas

FRAME_COLUMNS = ["op", "nranks", "backend", "tool", "size", "count", "type", "redop", "root",
                 "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
                 "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong"]
# the dtypes a sweep runs (names: dtlab.vocab): the ones every backend can sum; torch lacks
# reductions of uint32/uint64 and of the float8 types
SWEEP_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")


def resolve_ops(op: str | Sequence[str]) -> list[str]:
    """'all' -> every op; 'all_reduce,broadcast' or a list -> those, canonical, de-duplicated."""
    if isinstance(op, str):
        names = list(OPS) if op.strip().lower() == "all" else op.split(",")
    elif isinstance(op, Sequence) and op:
        names = list(op)
    else:
        raise ValueError(f"op={op!r}: name a collective ({', '.join(OPS)}), a list of them, "
                         f"or 'all'.")
    return list(dict.fromkeys(canonical_op(n) for n in names))


def resolve_dtype(dtype: Any) -> str:
    """torch.float32, 'float32', 'float' (nccl-tests' name), 'bf16' ... -> 'float32' etc.;
    ValueError naming :data:`SWEEP_DTYPES` for anything else."""
    return check_dtype(dtype, SWEEP_DTYPES)


def sweep(op: str | Sequence[str] = "all_reduce", min_bytes: int | str = 8,
          max_bytes: int | str = "128M", factor: int = 2, iters: int = 20, warmup: int = 5,
          dtype: Any = "float32", nprocs: int | None = None, backend: str = "auto", pool=None,
          progress: bool = True, timeout: float | None = 600, check: bool = True,
          env: dict | None = None, graph: bool | int = False) -> SweepResult:
    """Measure algbw/busbw of ``op`` (a name, a list, or ``"all"``) like nccl-tests' ``*_perf``.

    Launches through :func:`dtlab.run` (``nprocs``, ``backend`` as there), or through
    ``pool.run`` when a :class:`dtlab.Pool` is given. ``progress``: a line here before and after,
    and rank 0 prints each size's row as it completes. ``check=False`` skips the ``#wrong``
    check (N/A). ``env``: the ranks' environment (e.g. ``{"NCCL_PROTO": "Simple"}``; NCCL reads
    it when ranks start, so not with ``pool=``). ``graph=True`` captures each size's timed loop
    in a CUDA graph and times :data:`GRAPH_LAUNCHES` replays of it (``graph=N``: N replays; as
    nccl-tests ``-G N``; :mod:`dtlab.bench.graph`; NCCL on GPUs only, else ValueError before
    anything starts). Flight Recorder is off in the sweep's ranks
    (:func:`quiet_env`); a pool's ranks keep what they started with.

    >>> res = sweep("all_reduce", 8, "1M", nprocs=2, backend="gloo")   # doctest: +SKIP
    >>> df = res.frame; df.loc[df["size"] == 1 << 20, "ip_busbw"]      # doctest: +SKIP

    Terminal: ``dtlab bench --op all -b 8 -e 128M``. Returns a
    :class:`~dtlab.bench.result.SweepResult`: ``frame`` (the DataFrame described in the module
    docstring), ``header``, ``unsupported`` and ``skipped``; ``render()`` / ``to_dict()`` are
    what ``dtlab bench`` / ``dtlab bench --json`` print.
    """
    cfg = make_config(op, min_bytes, max_bytes, factor, iters, warmup, dtype, progress, check,
                      nprocs=nprocs if pool is None else None, graph=graph)
    graph = cfg.graph
    if graph:
        from .graph import check_graph_possible

        check_graph_possible(None if pool is not None else backend)
    from .timing import run_sweep

    sizes = cfg.sizes
    if progress:
        print(f"dtlab.bench: {', '.join(cfg.ops)} | {len(sizes)} sizes "
              f"{format_size(sizes[0])}..{format_size(sizes[-1])} (x{factor}) | {cfg.warmup} "
              f"warmup + {cfg.iters} timed calls per size and column | rank 0 prints each "
              f"size as it completes{f' | CUDA graph, {graph} replays per size' if graph else ''}",
              flush=True)
    t0 = time.monotonic()
    if pool is not None:
        if env:
            raise ValueError("env= applies to fresh ranks; a pool's ranks already started "
                             "(NCCL read its variables then): use Pool(env=...) or drop pool=")
        res = pool.run(run_sweep, cfg, timeout=timeout)
    else:
        from ..runtime import run

        res = run(run_sweep, cfg, nprocs=nprocs, backend=backend, timeout=timeout,
                  env={**quiet_env(graph), **(env or {})})
    result = sweep_result(res.values[0], cfg)
    if progress:
        extra = "".join(f"; {o}: {', '.join(_COLUMN_NAMES[g] for g in why)} unsupported"
                        for o, why in result.unsupported.items())
        print(f"dtlab.bench: {len(result.frame)} rows in {time.monotonic() - t0:.1f} s{extra}",
              flush=True)
    return result


# What every dtlab launch turns on for the post-mortem and a benchmark does not need: Flight
# Recorder records each collective with its Python stack, ~10-13 us of host time per eager
# all_reduce on 2x H200 (torch 2.11; BENCHMARKS.md). Off in the ranks of a sweep, unless this
# shell set it.
def quiet_env(graph: bool = False) -> dict[str, str]:
    """The ranks' environment for a measurement, where the user left these unset: Flight
    Recorder off (under the name this torch reads, evidence.fr_buffer_var); with
    ``graph``, NCCL_GRAPH_MIXING_SUPPORT=0 -- NCCL's support for graph launches mixed with
    outstanding eager calls on one communicator, which a benchmark never has, cost a captured
    8 B all_reduce 18.6 us a call instead of 4.6 on 2x H200 (data/h200x2-bandwidth/
    graph_variants.txt)."""
    from ..runtime.evidence import FR_BUFFER_VARS, fr_buffer_var

    env = {}
    if not any(k in os.environ for k in FR_BUFFER_VARS):
        env[fr_buffer_var()] = "0"
    if graph and "NCCL_GRAPH_MIXING_SUPPORT" not in os.environ:
        env["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
    return env


# replays of the captured loop per size with graph=True: nccl-tests -G 100, the setting every
# side-by-side comparison in BENCHMARKS.md uses (one replay leaves the launch skew between the
# ranks' processes in the figure, spread over only `iters` calls)
GRAPH_LAUNCHES = 100


def graph_launches(graph) -> int:
    """``sweep``'s ``graph=``: False -> 0 (eager), True -> :data:`GRAPH_LAUNCHES`, N >= 1 -> N."""
    if graph is False or graph is None:
        return 0
    if graph is True:
        return GRAPH_LAUNCHES
    return whole("graph", graph, 1, 100_000, "replays, as nccl-tests -G N; or True / False")


def make_config(op, min_bytes, max_bytes, factor=2, iters=20, warmup=5, dtype="float32",
                progress=True, check=True, nprocs=None, graph=False) -> SweepConfig:
    """Check :func:`sweep`'s arguments and return what the ranks get
    (:func:`dtlab.bench.timing.run_sweep`'s one argument); ValueError on bad input. ``nprocs``
    is only checked (the launch decides the rest: a type error there is a LaunchError)."""
    if isinstance(nprocs, int) and not isinstance(nprocs, bool) and nprocs < 2:
        raise ValueError(f"nprocs={nprocs}: a bandwidth sweep needs at least 2 ranks.")
    return SweepConfig(ops=tuple(resolve_ops(op)),
                       sizes=tuple(sweep_sizes(min_bytes, max_bytes, factor)), factor=factor,
                       iters=whole("iters", iters, 1, MAX_ITERS),
                       warmup=whole("warmup", warmup, 0, MAX_ITERS), dtype=resolve_dtype(dtype),
                       progress=bool(progress), check=bool(check), graph=graph_launches(graph),
                       run_id=os.urandom(6).hex())


def sweep_result(out: dict, cfg: SweepConfig) -> SweepResult:
    """What rank 0 of :func:`~dtlab.bench.timing.run_sweep` returned -> the sweep's result."""
    df = rows_to_frame(out["rows"], nranks=out["nranks"], backend=out["backend"], tool="dtlab")
    return SweepResult(df, _header(out, cfg), dict(out["unsupported"]), list(out["skipped"]))


def _header(out: dict, cfg: SweepConfig) -> dict:
    from .. import __version__

    devices = [{"rank": d["rank"], "group": 0, "pid": d["pid"], "host": d["host"],
                "device": int(d["device"].split(":")[1]) if ":" in d["device"] else 0,
                "pci": d["device"], "name": d["name"]} for d in out["devices"]]
    h = {"tool": "dtlab bench", "tool_version": __version__, "torch": out["torch"],
         "backend": out["backend"], "nranks": out["nranks"], "devices": devices,
         "nthreads": 1, "ngpus": 1,  # one process per rank, one device each (nccl-tests + MPI)
         "min_bytes": cfg.sizes[0], "max_bytes": cfg.sizes[-1], "step": cfg.factor,
         "step_kind": "factor", "warmup_iters": cfg.warmup, "iters": cfg.iters,
         "validation": int(cfg.check), "graph": int(cfg.graph),
         "dtype": cfg.dtype, "notes": [], "warnings": []}
    if out.get("nccl_version"):
        h["nccl_version"] = out["nccl_version"]
    return h


# --- reports <-> DataFrames --------------------------------------------------------------------

def rows_to_frame(rows: list[dict], *, nranks: int | None, backend: str | None, tool: str,
                  op: str | None = None) -> "pandas.DataFrame":
    """Report rows (nested oop/ip objects) -> a DataFrame with :data:`FRAME_COLUMNS`."""
    import pandas as pd

    flat = []
    for r in rows:
        rec = {"op": r.get("op", op), "nranks": nranks, "backend": backend, "tool": tool,
               **{k: r.get(k) for k in ("size", "count", "type", "redop", "root")}}
        for g in ("oop", "ip"):
            vals = r.get(g) or {}
            rec.update({f"{g}_{k}": vals.get(k) for k in _VALUES})
        flat.append(rec)
    df = pd.DataFrame(flat, columns=FRAME_COLUMNS)
    for g in ("oop", "ip"):
        for k in ("time_us", "algbw", "busbw"):
            df[f"{g}_{k}"] = df[f"{g}_{k}"].astype("float64")
        df[f"{g}_wrong"] = df[f"{g}_wrong"].astype("Int64")  # nullable: N/A stays <NA>
    return df


def to_frame(data) -> "pandas.DataFrame":
    """A DataFrame from nccl-tests output (path or text), a report, a list of reports, or a
    :func:`sweep`'s result -- the same columns :func:`sweep`'s frame has, with
    ``tool == "nccl-tests"`` for nccl-tests' rows, so the two sit side by side in one table or
    plot (the headers are :func:`dtlab.bench.parse_nccl_tests_all`'s). A DataFrame (or a ``.csv`` path) of a saved sweep comes back
    with its ``op`` column in today's names: a sweep recorded before dtlab.vocab says
    ``alltoall`` where :func:`sweep` now says ``all_to_all``."""
    import pandas as pd

    data = frame_of(data)
    if isinstance(data, (str, os.PathLike)) and os.fspath(data).endswith(".csv"):
        data = pd.read_csv(data)
    if isinstance(data, pd.DataFrame):
        if "op" not in data or data["op"].map(_renamed).eq(data["op"]).all():
            return data
        return data.assign(op=data["op"].map(_renamed))
    reports = data if isinstance(data, list) else [data] if isinstance(data, dict) \
        else parse_nccl_tests_all(data)
    frames = []
    for rep in reports:
        h = rep["header"]
        tool = "nccl-tests" if h.get("tool", "nccl-tests") == "nccl-tests" else "dtlab"
        frames.append(rows_to_frame(rep["rows"], nranks=h.get("nranks"), tool=tool,
                                    backend=h.get("backend", "nccl"), op=h.get("op")))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _renamed(op):
    return op_name(op) if isinstance(op, str) else op


def render_text(data) -> str:
    """nccl-tests-like text for a sweep's result (or DataFrame), a report, or a list of reports.

    >>> print(render_text(sweep("broadcast", "1K", "4K", backend="gloo")))    # doctest: +SKIP
    """
    import pandas as pd

    if isinstance(data, (SweepResult, pd.DataFrame)):
        data = to_reports(data)
    reports = data if isinstance(data, list) else [data]
    return "\n".join(render_report(r) for r in reports)
