"""``dtlab.tuning.sweep``: dtlab.bench's timed loop under each NCCL setting, in fresh ranks.

Per setting::

    env = caller's env= + the setting + NCCL_NVLS_ENABLE=0 (+ NCCL_DEBUG=INFO into its folder)
    dtlab.run(run_setting, cfg, env=env)   -- new processes: NCCL reads its env at comm init
        ok     -> dtlab.bench rows -> one tidy row per size, NCCL's account beside each
        fails  -> one row with status "failed" (or "timeout") and the error's first line
    progress: one line per setting (terminal) or an updating display (notebook)

The rank side is :func:`dtlab.bench.timing.run_sweep` -- the same buffers, CUDA-event timing,
MAX over ranks and ``#wrong`` check as ``dtlab bench`` -- launched here through
:func:`dtlab.run` because :func:`dtlab.bench.sweep` takes no per-launch ``env``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..vocab import format_size
from .account import annotate, debug_env, read_account
from .report import TuneResult, split
from .settings import FORCED, TUNABLE, VARS, Setting, resolve_settings

if TYPE_CHECKING:
    import pandas

    from ..bench.result import SweepConfig

MEASURED = ["op", "size", "count", "type", "time_us", "algbw", "busbw", "wrong"]
ACCOUNT = ["algorithm", "protocol", "channels", "comm_channels", "transport"]
TAIL = ["inplace", "nranks", "backend", "status", "error", "nccl_error"]


def columns(var_names: Sequence[str]) -> list[str]:
    """The tidy frame's columns: setting, its NCCL variables, the measurement, NCCL's account."""
    return ["setting", *var_names, *MEASURED, *ACCOUNT, *TAIL]


@dataclass(frozen=True)
class TuneOptions:
    """How a tuning sweep runs, beside what each setting measures (its
    :class:`~dtlab.bench.result.SweepConfig`): :func:`sweep`'s keyword arguments of the same
    names, checked."""

    nprocs: int | None = None
    backend: str = "auto"
    progress: bool = True
    timeout: float | None = 300
    log_dir: str | os.PathLike | None = None
    nccl_log: bool = True
    with_default: bool = True
    env: dict = field(default_factory=dict)
    progress_stream: Any = None


def run_setting(cfg: "SweepConfig", label: str = "") -> dict | None:
    """Rank side of one setting (``label``): :func:`dtlab.bench.timing.run_sweep`. A test may
    make the setting's last rank raise, as a setting that NCCL rejects makes a rank raise
    (``"fail"`` of :data:`dtlab.bench.timing.FAULTS_VAR`)."""
    import torch.distributed as dist

    from ..bench.timing import faults, run_sweep

    fail = (faults().get("fail") or {}).get(label)
    if fail and dist.get_rank() == dist.get_world_size() - 1:
        raise RuntimeError(fail)
    # run_sweep exchanges device names through the store, not an NCCL collective, so a setting
    # that leaves some collective no algorithm (NCCL_ALGO=Tree has none for AllGather,
    # data/h200x2-nccl-logs/tree_ll) still measures the all_reduce it was asked for
    return run_sweep(cfg)


@contextlib.contextmanager
def _quiet_ranks():
    """The progress display stands in for the ranks' panes (ten settings would draw ten empty
    pane grids); rank output stays in each launch's results. A caller's DTLAB_OUTPUT wins."""
    if "DTLAB_OUTPUT" in os.environ:
        yield
        return
    os.environ["DTLAB_OUTPUT"] = "none"
    try:
        yield
    finally:
        os.environ.pop("DTLAB_OUTPUT", None)


def _check_env(env: dict | None) -> dict[str, str]:
    env = dict(env or {})
    for k, v in env.items():
        if k == "NCCL_NVLS_ENABLE" and str(v) != "0":
            raise ValueError(f"env={{'NCCL_NVLS_ENABLE': {v!r}}}: dtlab never enables NVLink "
                             f"multicast; every setting runs with NCCL_NVLS_ENABLE=0.")
        if k in TUNABLE:
            raise ValueError(f"env sets {k}, which a sweep varies: put it in the settings "
                             f"(e.g. [{{'{k}': {v!r}}}]); env= is for variables every setting "
                             f"shares.")
    return env


def _slug(label: str) -> str:
    return re.sub(r"[^\w.=,+-]+", "_", label).strip("_") or "setting"


def _fresh_folder(root: Path, label: str) -> Path:
    """The setting's log folder, without logs of an earlier sweep (only NCCL's files go)."""
    folder = root / _slug(label)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("nccl.*.log"):
        old.unlink()
    return folder


def error_line(err: BaseException) -> str:
    """The first line that says what failed: the root-cause rank's, for a RankError."""
    failures = getattr(err, "failure_list", None)
    if failures:
        return f"rank {failures[0].rank}: {failures[0].summary.strip().splitlines()[0]}"
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def nccl_reason(err: BaseException, account: dict | None) -> str | None:
    """NCCL's own words for a failure: the first WARN of its log, else the 'Last error:' line
    torch copies into the exception (``Error : no algorithm/protocol available ...``)."""
    if account and account.get("warning"):
        return account["warning"]
    text = "\n".join((getattr(err, "failures", None) or {}).values()) or str(err)
    m = re.search(r"Last error:\s*\n\s*(\S.*)", text)
    return m.group(1).strip() if m else None


def _rows(setting: Setting, frame, err, account, var_names, cfg: "SweepConfig", backend,
          nranks) -> list[dict]:
    import pandas as pd

    base = {"setting": setting.label, **{v: setting.env.get(v) for v in var_names}}
    if frame is None:
        status = "timeout" if isinstance(err, TimeoutError) else "failed"
        return [{**base, "op": op, "status": status, "error": error_line(err),
                 "nccl_error": nccl_reason(err, account), "backend": backend, "nranks": nranks,
                 "transport": (account or {}).get("transport"),
                 "comm_channels": (account or {}).get("comm_channels")} for op in cfg.ops]
    frame = annotate(frame, account)
    rows = []
    for rec in frame.to_dict(orient="records"):
        # out-of-place where torch has it (nccl-tests' usual column), else in-place
        g = "oop" if pd.notna(rec["oop_time_us"]) else "ip"
        rows.append({**base, **{k: rec[k] for k in ("op", "size", "count", "type", *ACCOUNT,
                                                    "nranks", "backend")},
                     "time_us": rec[f"{g}_time_us"], "algbw": rec[f"{g}_algbw"],
                     "busbw": rec[f"{g}_busbw"], "wrong": rec[f"{g}_wrong"],
                     "inplace": g == "ip", "status": "ok", "error": None, "nccl_error": None})
    return rows


def _present(v) -> bool:
    """Not None, NaN or <NA> (rows hold all three for "not measured")."""
    import pandas as pd

    return v is not None and not pd.isna(v)


def _summary(rows: list[dict]) -> str:
    ok = [r for r in rows if r["status"] == "ok" and _present(r.get("busbw"))]
    if not ok:
        if not rows:
            return "EMPTY: no rows (every size skipped?)"
        why = rows[0].get("nccl_error") or rows[0].get("error")
        return f"{rows[0]['status'].upper()}: {str(why)[:160]}"
    top = max(ok, key=lambda r: r["busbw"])
    out = [f"ok, peak busbw {top['busbw']:.2f} GB/s at {format_size(int(top['size']))}"]
    if _present(top.get("transport")):
        out.append(f"{top['transport']}, {top['comm_channels']} channels")
    chosen = [f"{r['algorithm']}/{r['protocol']}" for r in ok if _present(r.get("algorithm"))]
    if chosen:
        out.append(" -> ".join(dict.fromkeys(chosen)))
    wrong = sum(int(r["wrong"]) for r in ok if _present(r.get("wrong")))
    if wrong:
        out.append(f"#wrong {wrong}!")
    return " | ".join(out)


def _notes(backend: str, logging: bool, inherited: dict[str, str]) -> list[str]:
    notes = []
    if backend != "nccl":
        notes.append(f"backend {backend}: NCCL is not used, so the NCCL settings have no effect "
                     f"(every setting measures the same thing) and there is no NCCL log: "
                     f"algorithm, protocol, channels and transport are empty.")
    elif not logging:
        notes.append("NCCL logging off (nccl_log=False): algorithm, protocol, channels and "
                     "transport are empty.")
    else:
        notes.append("NCCL_DEBUG=INFO: rank 0 writes one TUNING line per call, host time that "
                     "shows at the smallest sizes; nccl_log=False measures without it.")
    if inherited:
        shown = " ".join(f"{k}={v}" for k, v in inherited.items())
        notes.append(f"your environment sets {shown}: settings that do not set these inherit "
                     f"them, so 'default' is not NCCL's own default.")
    return notes


def check(settings: Any = None, op: str | Sequence[str] = "all_reduce",
          min_bytes: int | str = "1K", max_bytes: int | str = "256M", factor: int = 2,
          iters: int = 20, warmup: int = 5, dtype: Any = "float32", nprocs: int | None = None,
          backend: str = "auto", with_default: bool = True, env: dict | None = None) -> tuple:
    """Every check :func:`sweep` makes before its first setting runs (ValueError; LaunchError
    for nprocs/backend): (settings, the ranks' config, the launch plan, the shared env).
    ``dtlab tune`` calls it first, so that bad input is told apart from a failed run."""
    from ..bench.engine import make_config
    from ..runtime import plan as _plan

    chosen = resolve_settings(settings, with_default)
    cfg = make_config(op, min_bytes, max_bytes, factor, iters, warmup, dtype, progress=False,
                      nprocs=nprocs)
    extra = _check_env(env)
    return chosen, cfg, _plan.resolve(nprocs, backend, extra), extra


def sweep(settings: Any = None, op: str | Sequence[str] = "all_reduce",
          min_bytes: int | str = "1K", max_bytes: int | str = "256M", factor: int = 2,
          iters: int = 20, warmup: int = 5, dtype: Any = "float32", nprocs: int | None = None,
          backend: str = "auto", progress: bool = True, timeout: float | None = 300,
          log_dir: str | os.PathLike | None = None, nccl_log: bool = True,
          with_default: bool = True, env: dict | None = None,
          progress_stream=None) -> TuneResult:
    """busbw vs size of ``op`` under each NCCL setting, each setting in fresh ranks.

    ``settings``: dicts of NCCL variables (:func:`grid` makes them), preset or group names
    (:data:`PRESETS`, :data:`GROUPS`), ``(label, dict)`` pairs, or ``{label: dict}``; NCCL's
    default is added first unless ``with_default=False``. Every setting runs with
    ``NCCL_NVLS_ENABLE=0``. Sizes, ``iters``, ``warmup``, ``dtype``, ``nprocs`` and ``backend``
    are :func:`dtlab.bench.sweep`'s; ``timeout`` is per setting. ``nccl_log``: capture NCCL's
    account (NCCL_DEBUG=INFO) into ``log_dir/<setting>/`` (default: a temporary folder, removed
    afterwards). ``env``: extra variables for every setting. ``progress_stream``: where the
    terminal progress lines go (default stdout).

    >>> import dtlab.tuning as tuning
    >>> res = tuning.sweep(["default", {"NCCL_PROTO": "LL"}], min_bytes="1K", max_bytes="4K",
    ...                    nprocs=2, backend="gloo")                              # doctest: +SKIP
    >>> print(res.render())                     # = tuning.table(res)          # doctest: +SKIP

    Returns a :class:`~dtlab.tuning.report.TuneResult`: ``frame``, one row per (setting, size)
    -- see :func:`columns` -- or one row per op with status "failed"/"timeout" for a setting
    that did not finish; beside it "settings", "failed", "errors" (the full error text),
    "notes", "nccl" (per setting: transport, channels, NCCL's env), "log_dirs", "header".
    Terminal: ``dtlab tune --algo Ring,Tree -b 1K -e 256M``.
    """
    chosen, cfg, plan, extra = check(settings, op, min_bytes, max_bytes, factor, iters, warmup,
                                     dtype, nprocs, backend, with_default, env)
    opts = TuneOptions(nprocs=nprocs, backend=backend, progress=bool(progress), timeout=timeout,
                       log_dir=log_dir, nccl_log=bool(nccl_log), with_default=with_default,
                       env=extra, progress_stream=progress_stream)
    return _run(chosen, cfg, plan, opts)


def _run(chosen: list[Setting], cfg: "SweepConfig", plan, opts: TuneOptions) -> TuneResult:
    """Each setting in fresh ranks (``plan``: :func:`check`'s launch plan)."""
    import pandas as pd

    from ..bench.engine import sweep_result
    from ..runtime import HangError, RankError, run
    from .progress import Progress

    logging = opts.nccl_log and plan.backend == "nccl"
    own_root = logging and opts.log_dir is None
    root = Path(tempfile.mkdtemp(prefix="dtlab-tune-")) if own_root else \
        Path(opts.log_dir) if opts.log_dir is not None else None
    inherited = {k: os.environ[k] for k in TUNABLE if k in os.environ}
    var_names = [v for v in VARS if any(v in s.env for s in chosen)]
    sizes = cfg.sizes
    what = (f"{', '.join(cfg.ops)} {format_size(sizes[0])}..{format_size(sizes[-1])} "
            f"(x{cfg.factor}), {plan.nprocs} ranks {plan.backend}, {cfg.warmup}+{cfg.iters} "
            f"calls per size")
    if plan.backend != "nccl":
        what += f" | {plan.backend}: NCCL settings change nothing here, no NCCL log"
    bar = Progress(len(chosen), what, stream=opts.progress_stream) if opts.progress else None
    rows: list[dict] = []
    failed, errors, accounts, folders, header = {}, {}, {}, {}, None
    try:
        with _quiet_ranks():
            for i, s in enumerate(chosen):
                if bar:
                    bar.start(i, s.label)
                run_env = {**opts.env, **s.launch_env()}
                folder = _fresh_folder(root, s.label) if logging else None
                if folder:
                    run_env.update(debug_env(folder))
                    folders[s.label] = None if own_root else str(folder)
                frame = err = None
                try:
                    res = run(run_setting, cfg, s.label, nprocs=plan.nprocs,
                              backend=plan.backend, timeout=opts.timeout, env=run_env)
                    measured = sweep_result(res.values[0], cfg)
                    frame, header = measured.frame, header or measured.header
                except (RankError, HangError) as e:  # data, not the end of the sweep
                    err = e
                account = read_account(folder) if folder else None
                got = _rows(s, frame, err, account, var_names, cfg, plan.backend, plan.nprocs)
                if err is not None:
                    failed[s.label] = got[0]["nccl_error"] or got[0]["error"]
                    errors[s.label] = str(err)  # every rank's traceback, for the post-mortem
                if account:
                    accounts[s.label] = {k: account[k] for k in ("transport", "comm_channels",
                                                                 "env", "nccl_version")}
                rows += got
                if bar:
                    bar.done(i, s.label, _summary(got))
    finally:
        if bar:
            bar.close()
        if own_root and root is not None:
            shutil.rmtree(root, ignore_errors=True)
    df = pd.DataFrame(rows, columns=columns(var_names))
    for c in ("size", "count", "wrong", "channels", "comm_channels", "nranks"):
        df[c] = df[c].astype("Int64")
    for c in ("time_us", "algbw", "busbw"):
        df[c] = df[c].astype("float64")
    df["inplace"] = df["inplace"].astype("boolean")
    for c in (*var_names, "algorithm", "protocol", "transport", "error", "nccl_error"):
        if df[c].isna().all():  # all None (gloo): keep a text column, not float NaN
            df[c] = pd.Series([None] * len(df), index=df.index, dtype=object)
    return TuneResult(df, settings={s.label: s.launch_env() for s in chosen}, failed=failed,
                      errors=errors, notes=_notes(plan.backend, opts.nccl_log, inherited),
                      nccl=accounts, log_dirs=folders, header=header or {},
                      forced=dict(FORCED))


def combine(*results: "TuneResult | pandas.DataFrame") -> TuneResult:
    """Several sweeps as one (e.g. the network setting swept to a smaller max size): rows
    concatenated, the per-setting records merged, notes de-duplicated, the first sweep's
    header. A bare DataFrame adds its rows only."""
    import pandas as pd

    if not results:
        raise ValueError("combine() needs at least one result of dtlab.tuning.sweep.")
    parts = [split(r) for r in results]
    df = pd.concat([f for f, _ in parts], ignore_index=True)
    var_names = [v for v in VARS if v in df.columns]  # the union, in the usual column order
    df = df[columns(var_names) + [c for c in df.columns if c not in columns(var_names)]]
    merged: dict[str, Any] = {k: {} for k in ("settings", "failed", "errors", "nccl",
                                              "log_dirs", "forced")}
    notes: list[str] = []
    header: dict = {}
    for _, res in parts:
        if res is None:
            continue
        for k, v in merged.items():
            v.update(getattr(res, k) or {})
        notes += [n for n in res.notes if n not in notes]
        header = header or dict(res.header or {})  # the first sweep's machine
    return TuneResult(df, notes=notes, header=header, **merged)
