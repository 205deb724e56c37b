"""A clean run of the capstone's training job, recorded before anything breaks, so that a broken
run has something to be compared with.

    dtlab capstone baseline [--size S] [--steps N] [--nprocs N] [--backend B] [--out DIR] [--json]

What it records (the folder is an evidence folder like any other: ``dtlab diagnose`` reads it and
finds no failure):

* on NCCL, ``NCCL_DEBUG=INFO`` set *before* launch (``NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH``: no
  per-call lines, so a long run's log stays small) into ``nccl/<host>.<pid>.log``; the rings and
  trees NCCL built, the transport to each peer, the channel count and the NCCL variables seen,
  extracted with :mod:`dtlab.nccl_log`. On gloo there is no NCCL log: ``nccl`` is None and says
  why;
* the throughput table: per rank the median step time, tokens/s, peak memory and MFU, from
  :func:`dtlab.capstone.train.rank_train`;
* the loss per step; consoles of every rank and ``run.json`` (written by the runtime).

``baseline.json`` holds all of it. :func:`compare` reads a broken run's evidence folder (from
``dtlab capstone hang``) against it: how far each rank got, whether the good steps before the
failure ran at the baseline's speed (a hang, not a slowdown), and whether NCCL built the same
rings and transports and saw the same variables (a changed environment is a classic cause).
"""

from __future__ import annotations

import json
import os
import statistics

from ..paths import check_output_folder, label, read_bytes
from ..reporting import Data
from ..runtime.evidence import new_folder

STEPS = 10
NCCL_SUBSYS = "INIT,ENV,GRAPH"
SLOWER = 1.5   # good steps this much slower than the baseline's median: say so


def check_args(size: str, steps: int, nprocs: int | None, backend: str,
               out: str | None) -> None:
    """Raises ValueError / LaunchError for bad arguments; starts nothing."""
    from ..runtime.plan import resolve
    from .train import WARMUP_STEPS
    from .train import check_args as check_train

    check_train(size, steps)
    if steps <= WARMUP_STEPS:  # a step time from warm-up steps alone is no baseline
        raise ValueError(f"steps={steps}: a baseline needs at least {WARMUP_STEPS + 1} steps, so "
                         f"that its step time is from steps after the {WARMUP_STEPS} warm-up "
                         f"steps.")
    resolve(nprocs, backend)
    if out is not None:
        check_output_folder(out, "out", empty=True, so="two baselines never mix")


def nccl_env(out: str) -> dict:
    """The variables a baseline sets before launch (NCCL reads them once, at init)."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": NCCL_SUBSYS,
            "NCCL_DEBUG_FILE": os.path.join(os.path.abspath(out), "nccl", "%h.%p.log")}


def topology(folder: str) -> dict | None:
    """What NCCL built, from the logs in ``folder``: version, ranks, channels, rings, trees,
    transports per rank, NCCL variables. None when the folder holds no NCCL log."""
    from .. import nccl_log

    try:
        log = nccl_log.parse(folder)
    except (nccl_log.NotAnNcclLog, FileNotFoundError):
        return None
    d = log.to_dict()
    ranks = d["ranks"]
    comm = d.get("communicator") or {}
    return {
        "nccl_version": d["nccl_version"], "world_size": d["world_size"],
        "network": d["network"], "env": d["env"],
        "n_channels": {r["rank"]: r["n_channels"] for r in ranks},
        "rings": comm.get("ring_order", []),
        "trees": {r["rank"]: [(t["channel"], t["up"], t["down"]) for t in r.get("trees") or []]
                  for r in ranks},
        "transports": {r["rank"]: sorted({f"{t['peer']}:{t['kind']}" for t in r["transports"]})
                       for r in ranks},
    }


def baseline(size: str = "tiny", steps: int = STEPS, nprocs: int | None = 2,
             backend: str = "auto", out: str | None = None, timeout: float = 600) -> dict:
    """Train ``steps`` clean steps with the NCCL log on, keep it all in ``out``; returns what
    ``baseline.json`` holds."""
    import torch

    from ..runtime.launch import launch
    from ..runtime.plan import resolve
    from .train import rank_train

    check_args(size, steps, nprocs, backend, out)
    plan = resolve(nprocs, backend)
    out = out or new_folder("capstone-baseline")
    os.makedirs(out, exist_ok=True)
    env = {}
    if plan.backend == "nccl":
        os.makedirs(os.path.join(out, "nccl"), exist_ok=True)
        env = nccl_env(out)
    res = launch(rank_train, (size, steps), nprocs=plan.nprocs, backend=plan.backend,
                 timeout=timeout, env=env, evidence_dir=out,
                 meta={"baseline": {"tool": "dtlab capstone baseline", "size": size,
                                    "steps": steps, "env": env}})
    ranks = res.values
    first = ranks[0]
    topo = topology(os.path.join(out, "nccl")) if plan.backend == "nccl" else None
    b = {"size": size, "steps": steps, "world": first["world"], "backend": first["backend"],
         "n_params": first["n_params"], "config": first["config"], "torch": torch.__version__,
         "losses": first["losses"],
         "throughput": [{k: r[k] for k in ("rank", "device", "gpu", "step_s", "tokens_per_s",
                                            "peak_bytes", "mfu", "of_matmul")} for r in ranks],
         "nccl": topo,
         "nccl_note": None if topo else (
             "no NCCL log: the ranks ran on gloo" if plan.backend != "nccl" else
             "NCCL wrote no log lines (NCCL_DEBUG_FILE not writable?)"),
         "folder": os.path.abspath(out)}
    with open(os.path.join(out, "baseline.json"), "w") as f:
        json.dump(b, f, indent=1, default=str)
    return Baseline(b)


class Baseline(Data):
    """What :func:`baseline` returns: plain data (a dict, also baseline.json), and
    :func:`format_baseline` as its text."""

    def render(self) -> str:
        return format_baseline(self)


def format_baseline(b: dict, gpu: str | None = None) -> str:
    """The baseline as text. MFU is computed here, from each rank's tokens/s, the model's
    configuration and its GPU's datasheet peak (:mod:`.mfu`), never read from the record: a record
    made before the GPU's name was stored takes it as ``gpu`` (its README says what ran it)."""
    from .mfu import mfu, percent
    from .model import Config, flops_per_token

    fpt = flops_per_token(Config(**b["config"]))
    lines = [f"baseline: capstone {b['size']}, {b['world']} ranks ({b['backend']}), "
             f"{b['steps']} steps, loss {b['losses'][0]:.4f} -> {b['losses'][-1]:.4f}",
             f"{'rank':>4} {'device':>8} {'ms/step':>9} {'tok/s':>10} {'peak MiB':>9} {'MFU':>6}"]
    for r in b["throughput"]:
        mem = f"{r['peak_bytes'] / 2**20:.0f}" if r["peak_bytes"] is not None else "-"
        name = r.get("gpu") or (gpu if str(r["device"]).startswith("cuda") else None)
        lines.append(f"{r['rank']:>4} {r['device']:>8} {r['step_s'] * 1e3:>9.1f} "
                     f"{r['tokens_per_s']:>10.0f} {mem:>9} "
                     f"{percent(mfu(fpt, r['tokens_per_s'], name)):>6}")
    t = b["nccl"]
    if t is None:
        lines.append(f"NCCL: {b['nccl_note']}")
    else:
        rings = t["rings"]
        lines.append(f"NCCL {t['nccl_version']}: {len(rings)} rings, e.g. "
                     f"{' -> '.join(map(str, rings[0])) if rings else '-'}; transports "
                     + "; ".join(f"rank {r}: {', '.join(v)}" for r, v in t["transports"].items())
                     + f"; network for other nodes: {t['network'] or '-'}")
        if t["env"]:
            lines.append("NCCL variables: " + ", ".join(f"{k}={v}" for k, v in t["env"].items()))
    lines.append(f"folder: {b['folder']}")
    return "\n".join(lines)


def step_phases(folder: str) -> dict[int, dict[int, dict[str, float]]]:
    """rank -> step -> phase -> time, from the ``[dtlab-step]`` lines of a run's consoles (read
    by :mod:`dtlab.hang.diagnose`, as for the diagnosis)."""
    from ..hang.diagnose import gather, load
    from ..hang.diagnose.facts import step_times

    return {r: {s: dict(p) for s, p in steps.items()}
            for r, steps in sorted(step_times(gather(load(folder))).items())}


def _nprocs(folder: str) -> int | None:
    try:
        with open(os.path.join(folder, "run.json")) as f:
            return int(json.load(f)["nprocs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_baseline(folder: str) -> dict:
    """``folder``'s baseline.json (from :func:`baseline`), read as every path a person names is
    (:mod:`dtlab.paths`); ValueError naming what is wrong: not there, not a regular file, too
    big, not JSON (nested past Python's limit included), not a baseline."""
    hint = "record one with dtlab capstone baseline --out DIR"
    path = os.path.join(folder, "baseline.json")
    try:
        raw = read_bytes(path, hint, name="baseline")
    except FileNotFoundError:
        raise ValueError(f"{label(folder, 'baseline')} holds no baseline.json: {hint}.") from None
    try:
        b = json.loads(raw)
    except (ValueError, RecursionError):
        b = None
    ok = (isinstance(b, dict) and isinstance(b.get("world"), int)
          and isinstance(b.get("throughput"), list) and b["throughput"]
          and all(isinstance(r, dict) and isinstance(r.get("step_s"), (int, float))
                  for r in b["throughput"]))
    if not ok:
        raise ValueError(f"{label(path, 'baseline')} is not a baseline dtlab wrote (JSON with "
                         f"world and throughput): {hint}.")
    return b


def compare(evidence_dir: str, baseline_dir: str) -> dict:
    """What a broken run did differently from the baseline: ``last_step`` per rank (the last
    step it finished), ``step_ms`` of its finished steps vs ``baseline_step_ms``, ``slower``
    (the finished steps were more than SLOWER x the baseline's: a slowdown, not only a hang),
    ``nccl`` differences (rings, transports, variables; None when either side has no NCCL log),
    and ``lines``, the same in words."""
    b = read_baseline(baseline_dir)
    base_ms = statistics.median(r["step_s"] for r in b["throughput"]) * 1e3
    phases = step_phases(evidence_dir)
    last = {r: max((s for s, p in steps.items() if "done" in p), default=None)
            for r, steps in sorted(phases.items())}
    # the good steps: finished by every rank, not step 0 (first all-gathers, allocations); the
    # median, so that one step holding the bug's own extra work does not move it
    common = min((s for s in last.values() if s is not None), default=None)
    good = [(p["done"] - p["compute"]) * 1e3 for steps in phases.values()
            for s, p in steps.items()
            if "done" in p and "compute" in p and common is not None and 1 <= s <= common]
    world = _nprocs(evidence_dir)
    if world is not None and world != b["world"]:
        good = []   # step times of another number of ranks say nothing about this one
    step_ms = statistics.median(good) if good else None
    slower = step_ms is not None and step_ms > SLOWER * base_ms
    lines = []
    if last:
        lines.append("steps finished: " + ", ".join(
            f"rank {r}: {'none' if s is None else f'0-{s}'}" for r, s in last.items()))
    if world is not None and world != b["world"]:
        lines.append(f"the baseline ran on {b['world']} ranks, this run on {world}: their step "
                     f"times are not comparable")
    elif step_ms is not None:
        span = "1" if common == 1 else f"1-{common}"
        lines.append(f"good steps ({span}) ran at {step_ms:.1f} ms (median) vs the "
                     f"baseline's {base_ms:.1f} ms: " + (
                         f"{step_ms / base_ms:.1f}x slower: the job slowed down before it "
                         f"stopped (or this machine was busier than during the baseline)"
                         if slower else f"within {SLOWER}x of it: the job did not slow down "
                         f"before it stopped"))
    else:
        lines.append("too few good steps to compare their speed with the baseline's")
    nccl = None
    if b.get("nccl") is not None:
        now = topology(os.path.join(evidence_dir, "nccl"))
        if now is None:
            lines.append("NCCL: the broken run has no NCCL log to compare")
        else:
            then = b["nccl"]
            nccl = {"same_rings": now["rings"] == then["rings"],
                    "transports": {r: (then["transports"].get(r), v)
                                   for r, v in ((str(k), v) for k, v in now["transports"].items())
                                   if then["transports"].get(r) != v},
                    "env": {k: (then["env"].get(k), now["env"].get(k))
                            for k in set(then["env"]) | set(now["env"])
                            if then["env"].get(k) != now["env"].get(k)
                            and not k.startswith("NCCL_DEBUG")}}
            lines.append("NCCL: " + ("same rings" if nccl["same_rings"] else "rings differ")
                         + ("; transports differ: " + str(nccl["transports"])
                            if nccl["transports"] else "; same transports")
                         + ("; variables differ: " + ", ".join(
                             f"{k}: {a} -> {c}" for k, (a, c) in sorted(nccl["env"].items()))
                            if nccl["env"] else "; same NCCL variables"))
    elif b.get("nccl_note"):
        lines.append(f"NCCL: nothing to compare ({b['nccl_note']})")
    return {"baseline": os.path.abspath(baseline_dir), "last_step": last,
            "step_ms": step_ms, "baseline_step_ms": base_ms, "slower": slower, "nccl": nccl,
            "lines": lines}


def format_comparison(c: dict) -> str:
    return "\n".join([f"against the baseline ({c['baseline']}):"]
                     + [f"  {ln}" for ln in c["lines"]])
