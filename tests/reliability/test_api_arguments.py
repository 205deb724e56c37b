"""Every public entry point that starts ranks or measures x {nan, inf, negative, zero, huge, wrong
type} for each numeric argument: a ValueError (dtlab.LaunchError is one) naming the argument,
raised before any process starts (starting one raises :class:`forked.Started` here). ``dtlab.run``
and ``dtlab.Pool`` have their own table (tests/runtime/test_arguments.py).

A value an argument takes on purpose is listed with why (``warmup=0``: no warm-up; ``timeout=inf``:
no limit, as in ``dtlab.run``). The public API is walked: a new public function with a numeric
parameter fails :func:`test_every_public_function_with_numbers_is_classified` until it is in
:data:`ENTRY_POINTS` or :data:`NOT_ENTRY_POINTS`.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os

import pytest

from forked import nothing_starts  # noqa: F401 -- a fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAD = {"nan": math.nan, "inf": math.inf, "negative": -1, "zero": 0, "huge": 10**15,
       "wrong type": "5"}
NO_LIMIT = "inf: no limit, as in dtlab.run"
GLOO = {"nprocs": 2, "backend": "gloo"}
SWEEP = {**GLOO, "min_bytes": 8, "max_bytes": 8, "iters": 1, "warmup": 0, "progress": False}
SIZES = {"wrong type": [8]}  # a size may be a string ("1K"): a list is the wrong type
# entry point -> (a call that would start, {numeric argument: {value it takes: why} or, under
# "wrong type", the wrong-typed value to try instead of "5"})
ENTRY_POINTS = {
    "dtlab.torchrun": ({"script": os.path.join(ROOT, "dtlab", "byhand", "classic.py")}, {
        "nproc": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.bench.sweep": (SWEEP, {
        "min_bytes": SIZES, "max_bytes": SIZES, "factor": {}, "iters": {},
        "warmup": {"zero": "no warm-up"}, "nprocs": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.tuning.sweep": (SWEEP, {
        "min_bytes": SIZES, "max_bytes": SIZES, "factor": {}, "iters": {},
        "warmup": {"zero": "no warm-up"}, "nprocs": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.bench.timing_pitfalls": (GLOO, {
        "nprocs": {}, "iters": {}, "late_ms": {"zero": "no rank late"},
        "late_rank": {"zero": "rank 0 late"}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.bench.bucketing": ({**GLOO, "total": "1K", "buckets": ("1K",)}, {
        "nprocs": {}, "iters": {}, "warmup": {"zero": "no warm-up"}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.bench.p2p_matrix": ({"size": "1K"}, {
        "iters": {}, "warmup": {"zero": "no warm-up (then: no GPUs here, also a ValueError)"},
        "lat_bytes": {}}),
    "dtlab.collectives.validate": ({**GLOO, "op": "all_reduce"}, {
        "nprocs": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.collectives.validate_all": (GLOO, {"nprocs": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.collectives.validate_each": ({**GLOO, "cases": [("all_reduce", None)]}, {
        "nprocs": {}, "timeout": {"inf": NO_LIMIT}, "seed": {"zero": "a seed"}}),
    "dtlab.collectives.reduction_error": ({"nprocs": 2, "size": 8}, {
        "nprocs": {}, "size": {}, "seed": {"zero": "a seed"}}),
    "dtlab.hang.reproduce": ({**GLOO, "kind": "size_mismatch"}, {
        "nprocs": {}, "timeout": {}, "delay": {"zero": "no straggler lag"}, "pg_timeout": {}}),
    "dtlab.parity.compare": (GLOO, {"nprocs": {}, "steps": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.parity.compare_many": ({**GLOO, "runs": [("none", False)]}, {
        "nprocs": {}, "steps": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.parity.broadcast_at_construction": (GLOO, {"nprocs": {}, "seed": {"zero": "a seed"}}),
    "dtlab.parity.resume": ({"backend": "gloo"}, {
        "save_ranks": {}, "load_ranks": {}, "steps": {}, "stop_at": {},
        "timeout": {"inf": NO_LIMIT}}),
    "dtlab.parity.mixed_precision": (GLOO, {
        "nprocs": {}, "steps": {}, "init_scale": {}, "growth_interval": {},
        "timeout": {"inf": NO_LIMIT}}),
    "dtlab.parity.scaling.report": ({"nranks_list": (1, 2), "backend": "gloo"}, {
        "steps": {}, "per_rank_batch": {}}),
    "dtlab.capstone.train": ({**GLOO, "progress": False}, {
        "steps": {}, "nprocs": {}, "batch": {}, "seq": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.capstone.baseline.baseline": (GLOO, {
        "steps": {}, "nprocs": {}, "timeout": {"inf": NO_LIMIT}}),
    "dtlab.capstone.hang.hang": ({**GLOO, "progress": False}, {
        "nprocs": {}, "timeout": {"inf": NO_LIMIT}, "pg_timeout": {"inf": NO_LIMIT},
        "culprit": {"zero": "rank 0 the culprit"}, "at_step": {}}),
}
FORMULA = "arithmetic on the caller's numbers: nothing starts, NaN in is NaN out"
RECORD = "a record of results, made by dtlab"
# public functions and classes with numeric parameters that start nothing and measure nothing
NOT_ENTRY_POINTS = {
    **{f"dtlab.bench.{n}": FORMULA for n in (
        "algbw", "busbw", "busbw_factor", "coll_shape", "format_size", "parse_size",
        "slow_pairs", "data_rate")},
    "dtlab.bench.sweep_sizes": "checked as sweep()'s min_bytes/max_bytes/factor above",
    "dtlab.bench.rows_to_frame": RECORD, "dtlab.bench.Fit": RECORD,
    "dtlab.bench.SweepConfig": "a record: make_config checks what goes in it (sweep's table)",
    "dtlab.bench.plot": "draws a frame it is given", "dtlab.tuning.plot": "draws a frame",
    "dtlab.bench.ceiling_lines": "lines for a plot, from a GPU's name",
    "dtlab.tuning.call_bytes": FORMULA, "dtlab.topology.pcie_gbps": FORMULA,
    "dtlab.topology.predict_pairs": FORMULA, "dtlab.topology.reconcile": FORMULA,
    "dtlab.capstone.Config": "a model's shape (train() checks what it is given)",
    "dtlab.capstone.flops_per_token": FORMULA,
    "dtlab.collectives.Report": RECORD, "dtlab.collectives.Row": RECORD,
    "dtlab.collectives.tree_broadcast": "runs inside a rank, on the group it is in",
    **{f"dtlab.collectives.{n}": FORMULA for n in ("traffic", "cost", "sum_error_bound")},
    "dtlab.collectives.draw": "draws a picture of world_size ranks",
    "dtlab.hang.Diagnosis": RECORD, "dtlab.parity.Report": RECORD,
    **{f"dtlab.nccl_log.{n}": RECORD for n in (
        "NcclLog", "Call", "CommView", "Communicator", "Transport")},
    "dtlab.nccl_log.parse": "comm= picks a communicator of a parsed log (KeyError names it)",
    "dtlab.nccl_log.divergence": "a pass over parsed calls",
    "dtlab.Torchrun": "a record of a launch that has ended: nothing starts",
}
# tables of their own, or another's
ELSEWHERE = {"dtlab.run", "dtlab.Pool", "dtlab.Results", "dtlab.RankResult",  # runtime's
             "dtlab.multinode.check_world"}  # runs inside a rank of a multinode job
PACKAGES = ["dtlab", "dtlab.bench", "dtlab.capstone", "dtlab.collectives", "dtlab.hang",
            "dtlab.multinode", "dtlab.nccl_log", "dtlab.parity", "dtlab.topology", "dtlab.tuning"]


def _resolve(name: str):
    mod, attr = name.rsplit(".", 1)
    return getattr(importlib.import_module(mod), attr)


def _rows():
    for name, (_, args) in ENTRY_POINTS.items():
        for arg, takes in args.items():
            for case in BAD:
                if case in takes and not isinstance(takes[case], list):
                    continue  # a value it takes on purpose
                short = name.removeprefix("dtlab.")
                yield pytest.param(name, arg, case, id=f"{short} {arg}={case}")


@pytest.mark.parametrize("name, arg, case", list(_rows()))
def test_a_bad_number_is_a_value_error_naming_it_and_nothing_starts(name, arg, case,
                                                                     nothing_starts):
    base, args = ENTRY_POINTS[name]
    value = args[arg].get(case, BAD[case]) if case == "wrong type" else BAD[case]
    with pytest.raises(ValueError) as e:
        _resolve(name)(**{**base, arg: value})
    assert f"{arg}=" in str(e.value) or f"{arg} " in str(e.value), str(e.value)


def _numeric(obj) -> list[str]:
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if (type(p.default) in (int, float))
            or any(t in str(p.annotation) for t in ("int", "float"))]


def test_every_public_function_with_numbers_is_classified():
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        for attr in getattr(mod, "__all__", []):
            obj, name = getattr(mod, attr), f"{pkg}.{attr}"
            if (inspect.isclass(obj) and issubclass(obj, BaseException)) or not callable(obj) \
                    or not _numeric(obj) or name in ELSEWHERE:
                continue
            assert name in ENTRY_POINTS or name in NOT_ENTRY_POINTS, (
                f"{name}{inspect.signature(obj)} takes numbers: add it to ENTRY_POINTS (its "
                f"bad numbers refused before anything starts) or NOT_ENTRY_POINTS (why not)")
