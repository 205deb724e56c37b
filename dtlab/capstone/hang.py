"""Break the capstone's training job on purpose, let dtlab collect the evidence, diagnose it.

    dtlab capstone hang [--bug KIND] [--nprocs N] [--backend B] [--out DIR]
                        [--culprit R] [--at-step K] [--baseline DIR] [--json]

The job is :mod:`.train`'s: the tiny Llama sharded with FSDP2 (``fully_shard`` per block, then
the root), AdamW, the loss all-reduced every step for the log. It runs good steps; then, at step
``at_step`` (default ``BAD_STEP``), the culprit rank (default rank 1) does one thing differently
inside the training loop (the statement under a ``# the bug (KIND)`` comment; the comment sits on
its own line so that no traceback quotes it). Each bug is a mistake people make:

* ``extra_metric``: the culprit all-reduces one more metric (its gradient norm, "for the log")
  after its step. The other ranks' next collective is FSDP2's parameter all-gather of the next
  forward: a genuine hang -- the ranks' collective sequences are off by one from there on, and
  gloo waits until the process group's timeout.
* ``gather_shapes``: every rank all-gathers its per-rank outputs (the predicted token ids of its
  non-padding positions), whose lengths differ by rank; ``all_gather`` needs one shape on every
  rank. On gloo this does not hang and does not corrupt silently: gloo's pair transport sees
  a message of the wrong size and every rank fails at once (an exception in ``all_gather``).
* ``stuck_loader``: the culprit blocks fetching its next batch (a data-loading worker that never
  answers); the others enter the next forward and wait in FSDP2's all-gather until the process
  group's timeout: a hang whose culprit issued *fewer* collectives.
* ``skip_metric``: the culprit skips the logged loss's all-reduce on one step (a rank-local
  condition around it: "only log finite losses"); it goes on into the next forward, whose first
  collective is FSDP2's all-gather, while the others wait in the all-reduce it skipped: the
  mirror image of ``extra_metric`` -- the ops differ at one position, the culprit is the rank
  that is *ahead*, and its stack is in FSDP2's all-gather, not on a line of the bug.
* ``loader_timeout``: ``stuck_loader`` with the usual fix half-done: the culprit's data loader
  waits ``LOADER_TIMEOUT_S`` for a batch, then gives up and raises. The stack snapshot (taken
  while every rank was quiet) shows the culprit *waiting*; its traceback, later, shows where it
  *ended*: two different lines of the loader, and a postmortem must read the more recent one.

Every run is bounded: the collective timeout (``init_process_group(timeout=...)``) is
``PG_TIMEOUT`` seconds, and ``dtlab.run``'s own deadline stops whatever is still stuck.
The evidence folder (consoles, stacks of every rank, Flight Recorder dumps, ``run.json``) is
written by the runtime itself; :func:`dtlab.hang.diagnose` reads it.

>>> r = hang("extra_metric", nprocs=2, backend="gloo")     # doctest: +SKIP
>>> r["diagnosis"]["failure_class"], r["diagnosis"]["confident"]  # doctest: +SKIP
('missing_collective', False)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from ..hang.kinds import CULPRIT  # the rank that breaks, as in every reproducer
from ..paths import check_output_folder
from ..reporting import Data
from ..runtime.evidence import new_folder

GOOD_STEPS = 3      # good steps before the bug: the loss falls, every collective matches
BAD_STEP = GOOD_STEPS   # the capstone's own: the reproducers of dtlab.hang break at their step 2
MAX_STEP = 8        # --at-step bound: each good step costs time, the bug is the point
PG_TIMEOUT = 5.0    # seconds a collective may wait before gloo gives up
TIMEOUT = 45.0      # dtlab.run's deadline for the whole job
STUCK_S = 3600.0    # how long the stuck loader blocks: longer than any deadline
LOADER_TIMEOUT_S = 4.0   # loader_timeout: after the quiet snapshot (2 s), before the collective
                         # timeout (PG_TIMEOUT): the culprit's error comes first
PAD = 3             # gather_shapes: padding positions the culprit drops from its outputs


@dataclass(frozen=True)
class Bug:
    name: str
    what: str             # the bug, one line
    behaviour: str        # "hang" or "error": what it really does on gloo
    expect_class: str     # what dtlab diagnose should call it
    expect: str           # what it is expected to look like (on gloo)
    on_nccl: str = ""     # where NCCL differs (recorded on 2x H200: data/h200x2-capstone-run)


BUGS = {b.name: b for b in [
    Bug("extra_metric", "the culprit all-reduces one extra metric (its grad norm) after its step",
        "hang", "op_mismatch",
        "a hang: the culprit's extra all_reduce meets the others' next collective, FSDP2's "
        "parameter all_gather of the next forward; the Flight Recorder shows the two ops at the "
        "same position and every rank waits there until the collective timeout (gloo: 'Timed "
        "out waiting ... for send/recv'). 3+ ranks: the culprit is the odd one out; 2 ranks: "
        "both are candidates, confident false."),
    Bug("gather_shapes", "every rank all-gathers per-rank outputs whose lengths differ by rank",
        "error", "size_mismatch",
        "no hang, on gloo: the culprit's buffers are shorter, so gloo receives more bytes than "
        "they hold and aborts the culprit process (SIGABRT, 'op.preamble.length <= op.nbytes'); "
        "a rank with the longer tensor receives a short message without complaint (its gather "
        "is silently incomplete) and then loses its peer. The console names the byte counts, "
        "not the rank, so the diagnosis is size_mismatch with every rank a candidate, "
        "confident false (TORCH_DISTRIBUTED_DEBUG=DETAIL would name the shapes).",
        "on NCCL a hang, not an error: NCCL does not check sizes; each rank's Flight Recorder "
        "shows its own element count (512 vs 509) at the same position, the watchdog times "
        "out. 2 ranks: both candidates, confident false."),
    Bug("stuck_loader", "the culprit blocks in data loading before its next step",
        "hang", "missing_collective",
        "a hang: the others wait in FSDP2's all-gather of the next forward until the collective "
        "timeout; the culprit is stuck in the data loader and issued fewer collectives. Its "
        "stack shows the loader, not a collective: missing_collective, culprit the rank outside "
        "any collective, confident false (stacks are one snapshot)."),
    Bug("loader_timeout", "the culprit's data loader waits for a batch, times out and raises",
        "error", "missing_collective",
        "the others wait in FSDP2's all-gather of the next forward; the culprit's loader gives "
        "up after a few seconds and raises (a TimeoutError), so the others lose their peer. "
        "The culprit issued fewer collectives: missing_collective. Its stack snapshot shows it "
        "waiting in the loader; its traceback, more recent, the line that raised."),
    Bug("skip_metric", "the culprit skips the logged loss's all_reduce on one step",
        "hang", "op_mismatch",
        "a hang: the others wait in the loss all_reduce the culprit skipped, the culprit waits "
        "in FSDP2's all_gather of its next forward; the Flight Recorder shows the two ops at "
        "the same position. 3+ ranks: the culprit is the odd one out (it is ahead); 2 ranks: "
        "both are candidates, confident false."),
]}

# the bugs whose diagnosis dtlab gets right (class, and culprit or an honest "unsure")
DIAGNOSED = ("extra_metric", "gather_shapes", "stuck_loader", "skip_metric", "loader_timeout")

# What to change, per bug: the fix a postmortem names (section 08's vocabulary).
FIXES = {"extra_metric": "same_collectives", "skip_metric": "same_collectives",
         "gather_shapes": "same_shapes", "stuck_loader": "unblock_rank",
         "loader_timeout": "unblock_rank"}


def bug_site(bug: str) -> str:
    """``hang.py:LINE`` of the statement a bug plants (the line under its ``# the bug (KIND)``
    comment). ``skip_metric`` plants nothing: it leaves a line out."""
    import inspect
    import sys

    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    marker = f"# the bug ({bug})"
    for i, line in enumerate(lines):
        if line.strip().startswith(marker):
            return f"hang.py:{i + 2}"
    raise ValueError(f"{bug!r} plants no statement of its own")


def check_args(bug: str, nprocs: int | None, backend: str, out: str | None,
               culprit: int | None = None, at_step: int | None = None,
               baseline: str | None = None) -> None:
    """Raises ValueError / LaunchError for bad arguments; starts nothing."""
    from ..runtime.plan import resolve

    if bug not in BUGS:
        raise ValueError(f"bug={bug!r} is not one of: {', '.join(BUGS)}.")
    if nprocs is not None and (isinstance(nprocs, bool) or not isinstance(nprocs, int)
                               or nprocs < 2):
        raise ValueError(f"nprocs={nprocs!r} must be at least 2: a hang needs two ranks.")
    n = resolve(nprocs, backend).nprocs
    if culprit is not None and (isinstance(culprit, bool) or not isinstance(culprit, int)
                                or not 0 <= culprit < n):
        raise ValueError(f"culprit={culprit!r} must be a rank from 0 to {n - 1}.")
    if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int)
                                or not 1 <= at_step <= MAX_STEP):
        raise ValueError(f"at_step={at_step!r} must be a step from 1 to {MAX_STEP}: at least "
                         f"one good step first.")
    if baseline is not None:
        from .baseline import read_baseline

        read_baseline(baseline)
    if out is not None:
        check_output_folder(out, "out", empty=True, so="evidence from two runs never mixes")


def _stuck_batches(batches, culprit: bool, at_step: int, bug: str = "stuck_loader"):
    """The data loader: yields batches; on the culprit, before step at_step, blocks for good
    (stuck_loader) or waits LOADER_TIMEOUT_S and raises (loader_timeout)."""
    import threading

    for step, b in enumerate(batches):
        if culprit and step == at_step and bug == "stuck_loader":
            # the bug (stuck_loader): a loader worker that never answers
            threading.Event().wait(STUCK_S)
        if culprit and step == at_step and bug == "loader_timeout":
            threading.Event().wait(LOADER_TIMEOUT_S)  # a worker that never answers, and then:
            # the bug (loader_timeout): the loader gives up, and takes its rank down with it
            raise TimeoutError(f"data loader timed out: no batch within {LOADER_TIMEOUT_S:g} s")
        yield b


def rank_hang(bug: str, size: str = "tiny", seed: int = 0, culprit_rank: int = CULPRIT,
              at_step: int = BAD_STEP) -> dict:
    """Rank side of :func:`hang` (inside ``dtlab.run``): the capstone's loop, broken by ``bug``."""
    import torch
    import torch.distributed as dist

    from ..runtime.context import device as rank_device
    from ..runtime.evidence import dump_own_trace
    from . import data as corpus
    from .model import CONFIGS, Llama
    from .train import make_optimizer, shard, train_step

    rank, world, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    culprit = rank == culprit_rank % world
    cfg = CONFIGS[size]
    torch.manual_seed(seed)
    with torch.device(dev):
        model = Llama(cfg)
    shard(model, dev)
    opt = make_optimizer(model, cfg.lr)
    batches = corpus.batches(corpus.corpus(), cfg.batch, cfg.seq, rank, world, seed, dev)
    if bug in ("stuck_loader", "loader_timeout"):
        batches = _stuck_batches(batches, culprit, at_step, bug)
    losses = []
    for step in range(at_step + 2):
        print(f"[dtlab-step] rank={rank} step={step} phase=data t={time.time():.6f}", flush=True)
        x, y = next(batches)
        print(f"[dtlab-step] rank={rank} step={step} phase=compute t={time.time():.6f}",
              flush=True)
        loss = train_step(model, opt, x, y)
        mean = loss.clone()
        # skip_metric's bug is this condition: one rank leaves the logged loss's all_reduce out
        if not (step == at_step and bug == "skip_metric" and culprit):
            dist.all_reduce(mean)   # the logged loss
        losses.append(mean.item() / world)
        if step == at_step and bug == "extra_metric" and culprit:
            norm = torch.stack([p.detach().to_local().float().norm() for p in
                                model.parameters()]).norm()
            # the bug (extra_metric): a metric all-reduced on this rank only
            dist.all_reduce(norm)
        if step == at_step and bug == "gather_shapes":
            with torch.no_grad():
                pred = model(x).argmax(-1).flatten()
            pad = PAD if culprit else 0                 # only the culprit's batch is padded
            keep = pred[: pred.numel() - pad]           # its non-padding positions
            parts = [torch.empty_like(keep) for _ in range(world)]
            # the bug (gather_shapes): shapes differ by rank
            dist.all_gather(parts, keep)
        print(f"[dtlab-step] rank={rank} step={step} phase=done loss={losses[-1]:.4f} "
              f"t={time.time():.6f}", flush=True)
    dump_own_trace(rank)
    return {"rank": rank, "losses": losses}


def hang(bug: str = "extra_metric", nprocs: int | None = 2, backend: str = "auto",
         out: str | None = None, timeout: float = TIMEOUT, pg_timeout: float = PG_TIMEOUT,
         progress: bool = True, culprit: int | None = None, at_step: int | None = None,
         baseline: str | None = None) -> dict:
    """Run the broken job, keep its evidence in ``out`` (a new temporary folder if None),
    diagnose it. ``culprit`` (default rank 1) and ``at_step`` (default ``BAD_STEP``) place the
    bug; ``baseline``, a folder from :func:`dtlab.capstone.baseline.baseline`, adds what the
    broken run did differently from the clean one. Returns the report described in the module
    docstring."""
    from ..hang.diagnose.verdict import decide
    from ..runtime import HangError, RankError
    from ..runtime.launch import launch
    from ..runtime.plan import resolve

    check_args(bug, nprocs, backend, out, culprit, at_step, baseline)
    plan = resolve(nprocs, backend)
    be, n = plan.backend, plan.nprocs
    culprit = CULPRIT % n if culprit is None else culprit
    at_step = BAD_STEP if at_step is None else at_step
    out = out or new_folder(f"capstone-hang-{bug}")
    os.makedirs(out, exist_ok=True)
    env = {}
    if be == "nccl":
        os.makedirs(os.path.join(out, "nccl"), exist_ok=True)
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,COLL",
                    "NCCL_DEBUG_FILE": os.path.join(os.path.abspath(out), "nccl", "%h.%p.log")})
    b = BUGS[bug]
    behaviour, looks_like = b.behaviour, b.expect
    if be == "nccl" and b.on_nccl:
        behaviour, looks_like = "hang", b.on_nccl
    meta = {"reproducer": {"tool": "dtlab capstone hang", "kind": bug, "culprit_rank": culprit,
                           "at_step": at_step, "pg_timeout_s": pg_timeout, "env": env}}
    t0 = time.monotonic()
    try:
        launch(rank_hang, (bug,), {"culprit_rank": culprit, "at_step": at_step}, nprocs=n,
               backend=be, timeout=timeout, env=env,
               snapshot_quiet=2.0, evidence_dir=out, meta=meta, failure_grace=3.0,
               pg_timeout=pg_timeout)
        outcome, error = "ok", None
    except (RankError, HangError) as e:
        outcome, error = type(e).__name__, str(e).splitlines()[0]
    wall = time.monotonic() - t0
    facts = _facts(out)   # the evidence read once, for the verdict and the sites alike
    d = decide(facts)
    with open(os.path.join(out, "diagnosis.json"), "w") as f:
        json.dump(d.to_dict(), f, indent=2)
    report = {"bug": bug, "what": b.what, "nprocs": n, "backend": be, "culprit_rank": culprit,
              "at_step": at_step, "evidence_dir": out, "outcome": outcome, "error": error,
              "wall_s": round(wall, 1),
              "expected": {"behaviour": behaviour, "failure_class": b.expect_class,
                           "looks_like": looks_like, "fix": FIXES[bug]},
              "diagnosis": {**d.to_dict(), "sites": _sites(out, range(n), facts),
                            "site_sources": site_sources(out, range(n), facts)},
              "baseline": None}
    if baseline is not None:
        from .baseline import compare

        report["baseline"] = compare(out, baseline)
    return Postmortem(report)


def _facts(path: str):
    """What ``dtlab diagnose`` gathers from the evidence folder ``path``."""
    from ..hang.diagnose.facts import gather
    from ..hang.diagnose.load import load

    return gather(load(path))


def _sites(path: str, ranks, facts=None) -> dict[int, str]:
    """Where each rank's stack or traceback shows it (its own code's innermost line), from the
    same evidence the diagnosis read (``facts``, when the caller has gathered it already)."""
    from ..hang.diagnose.verdict import Verdict

    v = Verdict(facts or _facts(path))
    return {str(r): s for r in ranks if (s := v.site_of(r))}


def site_sources(path: str, ranks, facts=None) -> dict[str, list[dict]]:
    """Every place the evidence puts each rank, each with where it comes from, freshest kind
    first: the traceback it died with, its stack (py-spy or faulthandler, and when: at the quiet
    snapshot, at the timeout), and the line that issued its last collective in its Flight
    Recorder dump. A snapshot taken in a quiet spell and a dump written later can disagree;
    both are shown, labelled, rather than one passed off as the other."""
    f = facts or _facts(path)
    out: dict[str, list[dict]] = {}
    for r in ranks:
        seen = []
        for kind in ("fatal", "exception"):
            for s in f.of(kind, r):
                if s.data.get("site"):
                    seen.append({"site": s.data["site"], "source": "its traceback"})
                    break
        st = f.stacks.get(r)
        if st is not None and st.data.get("site"):
            when = st.data.get("when", "dump")
            seen.append({"site": st.data["site"], "source": "its stack at the " + (
                "quiet-spell snapshot" if when == "snapshot" else when)})
        calls = f.traces.get(r) or []
        if calls and calls[-1].site:
            c = calls[-1]
            state = "" if c.completed is None else ", completed" if c.completed else ", not completed"
            seen.append({"site": c.site, "source": f"Flight Recorder: its last collective, "
                                                   f"#{c.seq} {c.op}{state}"})
        if seen:
            out[str(r)] = seen
    return out


def _format_sites(d: dict) -> str:
    by_rank = d.get("site_sources")
    if not by_rank:  # a report made before sources were kept
        return ", ".join(f"rank {k}: {v}" for k, v in sorted(d["sites"].items())) or "-"
    lines = []
    for r, seen in sorted(by_rank.items(), key=lambda kv: int(kv[0])):
        lines.append(f"rank {r}: " + "; ".join(f"{s['site']} ({s['source']})" for s in seen))
    return "\n                " .join(lines)


class Postmortem(Data):
    """What :func:`hang` returns: plain data (a dict), and :func:`format_report` as its text."""

    def render(self) -> str:
        return format_report(self)


def format_report(r: dict) -> str:
    """The run, what the bug really does, then the diagnosis as ``dtlab diagnose`` prints it."""
    from ..hang.diagnose import Diagnosis

    d = r["diagnosis"]
    diag = Diagnosis(**{k: d[k] for k in ("failure_class", "culprit_ranks", "collective_seq",
                                          "op", "summary", "evidence", "confident",
                                          "root_ranks")})
    e = r["expected"]
    sites = _format_sites(r["diagnosis"])
    against = []
    if r.get("baseline"):
        from .baseline import format_comparison

        against = ["", format_comparison(r["baseline"])]
    return "\n".join([
        f"capstone hang --bug {r['bug']}: {r['what']} (culprit rank {r['culprit_rank']}, "
        f"step {r['at_step']}, {r['nprocs']} ranks, {r['backend']})",
        f"outcome: {r['outcome']} after {r['wall_s']} s" + (f" ({r['error']})" if r["error"]
                                                           else ""),
        f"expected: {e['behaviour']}, diagnosed as {e['failure_class']}: {e['looks_like']}",
        f"evidence: {r['evidence_dir']}", "",
        diag.render(), "", f"sites         : {sites or '-'}", *against])
