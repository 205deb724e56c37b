"""Prove a collective did what it says, on live ranks: :func:`validate`, :func:`validate_all`.

One launch (``dtlab.run``) runs every check asked for; each rank runs
:func:`dtlab.collectives.checks.run_specs` and judges its own output; the rows come back and
are merged into a :class:`~dtlab.collectives.report.Report`::

    validate(op, impl) ─► dtlab.run(run_specs, [spec...]) ─► per rank: every check -> rows
                      ─► merge(rows of all ranks) ─► Report(.ok, .rows, .failures, .table())

``impl`` judges your implementation instead of torch's: a function with the signature of the
torch.distributed call it replaces (``impl(tensor, op=ReduceOp.SUM, group=None,
async_op=False)`` for all_reduce, ``impl(tensor_list, tensor)`` for all_gather ...), or a dict
``{torch function name: function}`` to replace several (``{"send": my_send, "recv": my_recv}``
for sendrecv, ``{"all_gather_into_tensor": f}`` for the tensor variant). Only checks of the
calls it replaces run. It travels to the ranks by value, so a notebook cell's function works.

>>> from dtlab import collectives
>>> rep = collectives.validate("all_reduce", nprocs=2, backend="gloo")   # doctest: +SKIP
>>> rep.ok, len(rep.rows)                                                 # doctest: +SKIP
(True, 42)
"""

from __future__ import annotations

from .. import vocab
from ..limits import MAX_SEED, whole
from ..runtime import run
from ..runtime.plan import resolve
from .checks import FLOAT_DTYPES, KNOWN_DTYPES
from .report import Report, merge

OPS = tuple(o for o in vocab.COLLECTIVES if o != "barrier") + ("sendrecv", "batch_isend_irecv")

DTYPES = ("float32", "float16", "bfloat16", "int64")
SIZES = (1, 7, 67)  # one element; primes, so never divisible by the world size

# the torch function a plain ``impl`` replaces, per op (sendrecv needs two: give a dict)
PRIMARY = {op: op for op in OPS if op != "sendrecv"}
REPLACEABLE = set(PRIMARY) | {"all_gather_into_tensor", "reduce_scatter_tensor",
                              "all_to_all_single", "send", "recv"}


def check_op(op: str) -> str:
    """Any spelling dtlab bench accepts ('allreduce', 'alltoall') -> the name in :data:`OPS`."""
    if isinstance(op, str) and op.strip().lower() in ("batch_isend_irecv", "batchisendirecv"):
        return "batch_isend_irecv"
    return vocab.check_op(op, OPS)


def impl_table(op: str, impl) -> dict | None:
    """``impl`` as {torch function name: function}; ValueError for what cannot be judged."""
    if impl is None:
        return None
    if callable(impl):
        if op not in PRIMARY:
            raise ValueError(f"impl for {op!r}: give a dict {{'send': fn, 'recv': fn}}, the two "
                             f"torch.distributed calls it replaces.")
        return {PRIMARY[op]: impl}
    if isinstance(impl, dict) and impl and all(callable(f) for f in impl.values()):
        unknown = sorted(set(impl) - REPLACEABLE)
        if unknown:
            raise ValueError(f"impl names {unknown}: give torch.distributed function names, "
                             f"one of {', '.join(sorted(REPLACEABLE))}.")
        return dict(impl)
    raise ValueError(f"impl={impl!r}: give a function, or a dict of torch function name -> "
                     f"function.")


def _check_list(values, allowed, what) -> tuple:
    values = tuple(values)
    if not values:
        raise ValueError(f"{what}: give at least one.")
    if what == "dtypes":
        values = tuple(vocab.check_dtype(v, allowed, "dtypes") for v in values)
    elif any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 9999 for s in values):
        raise ValueError(f"sizes={values!r}: give element counts from 1 to 9999 (known values "
                         f"r*K+i stay exact in float32 below that).")
    return values


def validate_each(cases, *, nprocs: int | None = None, backend: str = "auto", dtypes=None,
                  sizes=None, timeout: float = 120.0, seed: int = 0) -> list[Report]:
    """Several (op, impl) cases in ONE launch: one Report per case, in order. This is what
    :func:`validate` and :func:`validate_all` do; use it to judge many implementations at the
    cost of one launch (about 2 s on a CPU).

    >>> reps = validate_each([("all_reduce", None), ("broadcast", None)],
    ...                      nprocs=3, backend="gloo")                   # doctest: +SKIP
    >>> [r.ok for r in reps]                                             # doctest: +SKIP
    [True, True]
    """
    dtypes = _check_list(DTYPES if dtypes is None else dtypes,
                         tuple(dict.fromkeys(KNOWN_DTYPES + FLOAT_DTYPES)), "dtypes")
    sizes = _check_list(SIZES if sizes is None else sizes, None, "sizes")
    specs = [{"op": check_op(op), "impl": impl_table(check_op(op), impl), "dtypes": dtypes,
              "sizes": sizes} for op, impl in cases]
    whole("seed", seed, 0, MAX_SEED)
    plan = resolve(nprocs, backend)  # LaunchError before anything starts
    if plan.nprocs < 2:
        raise ValueError(f"nprocs={plan.nprocs}: a collective needs at least 2 ranks to show "
                         f"anything (send/recv needs a peer).")
    from ..runtime.plan import check_timeout

    check_timeout(timeout)
    res = run(_rank_main, specs, seed, nprocs=plan.nprocs, backend=backend, timeout=timeout)
    per_rank = res.values  # [rank][spec] -> rows
    return [Report(merge([ranks[i] for ranks in per_rank]), nprocs=plan.nprocs,
                   backend=plan.backend) for i in range(len(specs))]


def _rank_main(specs, seed):
    from .checks import run_specs  # imported in the rank: the checks travel by reference

    return run_specs(specs, seed)


def validate(op: str, impl=None, *, nprocs: int | None = None, backend: str = "auto",
             dtypes=None, sizes=None, timeout: float = 120.0) -> Report:
    """Check one collective (torch's, or ``impl``) on ``nprocs`` live ranks; see the module
    docstring for ``impl``. ``dtypes`` default float32, float16, bfloat16, int64 (float16 and
    bfloat16 get only random checks, judged against the float64 reference within
    :func:`~dtlab.collectives.numerics.sum_error_bound`); ``sizes`` default 1, 7, 67 elements.

    Returns a :class:`Report`: ``.ok`` is False when any row failed; rows the backend refused
    are "unsupported". Raises ValueError / :class:`dtlab.LaunchError` for bad arguments (before
    anything starts), :class:`dtlab.HangError` after ``timeout`` seconds (an implementation
    that deadlocks), :class:`dtlab.RankError` if a rank dies.

    >>> validate("broadcast", nprocs=3, backend="gloo").ok                # doctest: +SKIP
    True
    """
    return validate_each([(op, impl)], nprocs=nprocs, backend=backend, dtypes=dtypes,
                         sizes=sizes, timeout=timeout)[0]


def validate_all(ops=None, *, nprocs: int | None = None, backend: str = "auto", dtypes=None,
                 sizes=None, timeout: float = 120.0) -> Report:
    """Every collective in ``ops`` (default :data:`OPS`) of torch's, in one launch, as one
    Report: what ``dtlab validate`` runs on a new node.

    >>> print(validate_all(nprocs=4, backend="gloo").summary())          # doctest: +SKIP
    ok: 470 passed, 0 failed, 0 unsupported on 4 ranks (gloo)
    """
    ops = OPS if ops is None else [ops] if isinstance(ops, str) else ops
    reps = validate_each([(op, None) for op in ops], nprocs=nprocs, backend=backend,
                         dtypes=dtypes, sizes=sizes, timeout=timeout)
    return Report([row for rep in reps for row in rep.rows], nprocs=reps[0].nprocs,
                  backend=reps[0].backend)
