"""Reproduce a failure class on purpose and keep everything every tool says about it.

    dtlab hang size_mismatch --nprocs 3 --backend gloo --out evidence/size_mismatch
    dtlab diagnose evidence/size_mismatch

>>> rep = reproduce("skipped_collective", nprocs=3, backend="gloo", out="/tmp/ev")  # doctest: +SKIP
>>> rep.outcome, rep.diagnosis.failure_class, rep.diagnosis.culprit_ranks          # doctest: +SKIP
('RankError', 'missing_collective', [1])

What is recorded (an evidence directory, see :mod:`dtlab.runtime.evidence`):

* every rank's console output, exit codes, and ``run.json``;
* py-spy stacks of every rank taken *during* the hang (once all ranks have been silent for a
  couple of seconds), and again at the timeout if they are still stuck;
* Flight Recorder dumps: from ranks that raise, from finished ranks, and on NCCL from the
  watchdog at the collective timeout and through its dump pipe during the hang;
* on NCCL, the NCCL_DEBUG=INFO logs (INIT,COLL), one file per rank;
* for ``host_oom``, what the kernel counted for the culprit's memory cgroup
  (``cgroup-memory.json``: oom_kill, limit, peak usage; :mod:`.host_oom`), saved once the ranks
  have ended;
* with ``detail=True`` a second run with TORCH_DISTRIBUTED_DEBUG=DETAIL into ``detail/``: the
  same bug as torch's collective checker reports it, before the collective runs.

The collective timeout (``init_process_group(timeout=...)``) is set to ``pg_timeout`` so that,
inside ``timeout``, gloo's waits give up and NCCL's watchdog fires: both are part of what a
real hang shows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..limits import number, whole
from ..paths import check_output_folder
from ..runtime import HangError, RankError
from ..runtime.launch import launch
from ..runtime.evidence import new_folder
from . import host_oom
from .kinds import CULPRIT, KINDS, training_loop


@dataclass
class Reproduction:
    kind: str
    out: str
    outcome: str  # "ok", "RankError" or "HangError"
    error: str | None
    diagnosis: object = None
    detail_outcome: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "out": self.out, "outcome": self.outcome, "error": self.error,
                "detail_outcome": self.detail_outcome,
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None}

    def render(self) -> str:
        return (f"\n{self.kind}: {self.outcome}" + (f" ({self.error})" if self.error else "")
                + f"\nevidence: {self.out}\n\n" + (self.diagnosis.render() if self.diagnosis
                                                    else "no diagnosis"))

    def __repr__(self) -> str:
        d = self.diagnosis
        verdict = f"{d.failure_class}, culprit {d.culprit_ranks}, seq {d.collective_seq}" if d else "-"
        return f"<Reproduction {self.kind}: {self.outcome}; diagnosis: {verdict}; evidence in {self.out}>"


def reproduce(kind: str, nprocs: int = 3, backend: str = "auto", timeout: float = 30,
              out: str | None = None, detail: bool | str = "auto", delay: float = 1.0,
              pg_timeout: float | None = None) -> Reproduction:
    """Run the ``kind`` reproducer on ``nprocs`` ranks and write its evidence into ``out``.

    ``detail``: True adds the TORCH_DISTRIBUTED_DEBUG=DETAIL rerun, False never; "auto" does
    what an engineer would: rerun with DETAIL only when the raw evidence leaves the diagnosis
    unsure (on gloo a size and a dtype mismatch both show as one byte count). ``delay`` is the
    straggler's lag per step.
    """
    be = check_args(kind, nprocs, backend, timeout, out, delay, pg_timeout, detail)
    out = out or new_folder(f"hang-{kind}")
    pg_timeout = pg_timeout or max(3.0, min(10.0, timeout / 3))
    from .diagnose import diagnose

    outcome, error = _one_run(kind, nprocs, be, timeout, out, delay, pg_timeout, detail=False)
    rep = Reproduction(kind, out, outcome, error)
    rep.diagnosis = diagnose(out)
    if detail is True or (detail == "auto" and not rep.diagnosis.confident):
        rep.detail_outcome, _ = _one_run(kind, nprocs, be, timeout, os.path.join(out, "detail"),
                                         delay, pg_timeout, detail=True)
        rep.diagnosis = diagnose(out)
    with open(os.path.join(out, "diagnosis.json"), "w") as f:
        json.dump(rep.diagnosis.to_dict(), f, indent=2)
    return rep


def check_args(kind: str, nprocs: int = 3, backend: str = "auto", timeout: float = 30,
               out: str | None = None, delay: float = 1.0, pg_timeout: float | None = None,
               detail: bool | str = "auto") -> str:
    """What :func:`reproduce` refuses, before it makes a folder or starts a rank: ValueError
    (or LaunchError) naming the argument; `dtlab hang` calls it in its ``arguments()`` block.
    Returns the backend the launch will use."""
    from ..runtime.plan import resolve

    if detail not in (True, False, "auto"):
        raise ValueError(f"detail={detail!r}: use True, False or 'auto'")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of: {', '.join(KINDS)}")
    whole("nprocs", nprocs, 2, 256, "a distributed failure needs at least 2 ranks; 3, the "
          "default, shows the odd one out")
    number("timeout", timeout, 0.1, 86400, "seconds: the reproduction of a hang ends with it")
    number("delay", delay, 0, 600, "the straggler's lag per step, seconds")
    if pg_timeout is not None:
        number("pg_timeout", pg_timeout, 0.1, 86400, "seconds")
    if kind == "host_oom":
        host_oom.check()
    if out is not None:
        check_output_folder(out, "out", empty=True, so="evidence from two runs never mixes")
    return resolve(nprocs, backend).backend


def _one_run(kind: str, nprocs: int, backend: str, timeout: float, out: str, delay: float,
             pg_timeout: float, detail: bool) -> tuple[str, str | None]:
    os.makedirs(out, exist_ok=True)
    env = {}
    if detail:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if backend == "nccl":
        os.makedirs(os.path.join(out, "nccl"), exist_ok=True)
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL",
                    "NCCL_DEBUG_FILE": os.path.join(os.path.abspath(out), "nccl", "%h.%p.log")})
    cgroup, where = None, None
    if kind == "host_oom":  # the culprit's memory cgroup, made here so that it is removed here
        cgroup, where = host_oom.make(CULPRIT % nprocs)
    # provenance for people; `dtlab diagnose` never reads this section
    meta = {"reproducer": {"tool": "dtlab hang", "kind": kind, "culprit_rank": CULPRIT % nprocs,
                           "pg_timeout_s": pg_timeout, "detail": detail, "env": env}}
    try:
        launch(training_loop, (kind, delay, where), nprocs=nprocs, backend=backend,
               timeout=timeout, env=env, snapshot_quiet=2.0, evidence_dir=out, meta=meta,
               failure_grace=5.0, pg_timeout=pg_timeout)
        return "ok", None
    except (RankError, HangError) as e:
        return type(e).__name__, str(e).splitlines()[0]
    finally:
        if cgroup is not None:  # the ranks have ended: what the kernel counted, then no group
            host_oom.record(cgroup, CULPRIT % nprocs, out)
