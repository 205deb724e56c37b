"""Broken training runs made on the spot for a graded cell: hidden inputs nobody has seen.

:func:`broken_runs` runs several ``dtlab capstone hang`` jobs side by side (each its own dtlab
process with its own ranks, started and stopped by :class:`dtlab.runtime.agents.Agents`, so a
cell timeout or an interrupt leaves nothing running) and hands back each run's evidence folder
as an unlabeled copy (:func:`~dtlab.course.checks.unlabeled_copy`: no diagnosis, no README, no
note of which bug was planted, a neutral name). Only the caller knows which spec made which
folder. Side by side, four 3-rank runs on 2 CPU cores take about as long as two one after the
other: most of a run is the ranks waiting out the collective timeout.

>>> folders = broken_runs([{"bug": "stuck_loader", "culprit": 0}], nprocs=3)   # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

TIMEOUT = 150.0   # for all the runs together; each is bounded by its own 45 s deadline


def _argv(spec: dict, nprocs: int, out: str) -> list[str]:
    argv = [sys.executable, "-m", "dtlab", "capstone", "hang", "--bug", str(spec["bug"]),
            "--nprocs", str(nprocs), "--backend", "gloo", "--out", out]
    for key, flag in (("culprit", "--culprit"), ("at_step", "--at-step")):
        if spec.get(key) is not None:
            argv += [flag, str(spec[key])]
    return argv


def broken_runs(specs: list[dict], nprocs: int = 3, into: str | None = None,
                timeout: float = TIMEOUT) -> list[str]:
    """Run each spec (``{"bug": KIND, "culprit": R, "at_step": K}``; culprit and at_step
    optional) as a broken capstone job on ``nprocs`` gloo ranks, all at once; return their
    evidence folders, unlabeled, in ``into`` (a new temporary folder if None), in spec order."""
    from ..capstone.hang import check_args
    from ..runtime.agents import Agents
    from .checks import unlabeled_copy

    for spec in specs:
        unknown = set(spec) - {"bug", "culprit", "at_step"}
        if unknown or "bug" not in spec:
            raise ValueError(f"spec {spec!r}: needs a 'bug', may have 'culprit' and 'at_step'"
                             + (f"; unknown keys {sorted(unknown)}" if unknown else ""))
        check_args(spec["bug"], nprocs, "gloo", None, spec.get("culprit"), spec.get("at_step"))
    into = into or tempfile.mkdtemp(prefix="dtlab-cases-")
    work = tempfile.mkdtemp(prefix="dtlab-broken-")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DTLAB_OUTPUT": "none"}
    try:
        outs = [os.path.join(work, f"run{i}") for i in range(len(specs))]
        with Agents(os.path.join(work, "agents")) as ag:
            for i, (spec, out) in enumerate(zip(specs, outs)):
                ag.start(f"run{i}", _argv(spec, nprocs, out), env)
            codes = ag.wait(timeout)
            logs = {name: ag.output(name) for name in codes}
        for i, out in enumerate(outs):
            if codes.get(f"run{i}") != 0 or not os.path.isfile(os.path.join(out, "run.json")):
                tail = logs.get(f"run{i}", "").strip().splitlines()[-3:]
                raise RuntimeError(f"broken run {i} did not finish cleanly (exit "
                                   f"{codes.get(f'run{i}')}): {' | '.join(tail)}")
        return [unlabeled_copy(out, into) for out in outs]
    finally:
        shutil.rmtree(work, ignore_errors=True)
