"""Broken training runs made on the spot for a graded cell: hidden inputs nobody has seen.

:func:`broken_runs` runs ``dtlab capstone hang`` jobs (each its own dtlab process with its own
ranks, started and stopped by :class:`dtlab.runtime.agents.Agents`, so a cell timeout or an
interrupt leaves nothing running) and hands back each run's evidence folder as an unlabeled copy
(:func:`unlabeled_copy`: no diagnosis, no README, no note of which bug was planted, a neutral
name). Only the caller knows which spec made which folder.

A run is a hang on purpose, so it is timed by nature: the collective timeout (5 s) is how the
hang shows. What a busy machine must not do is cut a run short before its bug shows, or make it
show something else: each run gets a deadline far beyond its 20 s on 2 idle cores, at most as
many run side by side as there are cores, and each run's evidence is checked with dtlab's own
diagnosis (it names these bugs right) before it is used: a run that does not show its bug is made
again. Within a grading session (``DTLAB_GRADING_CACHE``, set by ``dtlab course autograde``) a
run of one spec is made once and its evidence shared by every submission graded with it.

>>> folders = broken_runs([{"bug": "stuck_loader", "culprit": 0}], nprocs=3)   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile

from .graded import CACHE_ENV

RUN_TIMEOUT = 600.0   # seconds one run may take (20 s on 2 idle cores)
ATTEMPTS = 3          # makes of a run whose evidence does not show its bug


def unlabeled_copy(src: str, into: str) -> str:
    """Copy the evidence folder ``src`` to a neutrally named folder in ``into`` and return it,
    without what names the answer: ``diagnosis.json``, README files, and the ``reproducer``
    note of ``run.json`` (which bug was planted, with an output path that names it)."""
    dst = os.path.join(into, "case-" + secrets.token_hex(4))
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("diagnosis.json", "README*"))
    run = os.path.join(dst, "run.json")
    if os.path.isfile(run):
        with open(run) as f:
            meta = json.load(f)
        meta.pop("reproducer", None)
        with open(run, "w") as f:
            json.dump(meta, f)
    return dst


def moved_copy(folder: str, into: str, shift: int, name: str = "trainer.py",
               file: str = "hang.py", package: str = "capstone") -> str:
    """An unlabeled copy of the evidence ``folder`` as if the job's code (``file`` of
    ``dtlab/<package>``) had moved and been tidied: every reference to ``file`` (tracebacks and
    fatal-error dumps, stack snapshots, Flight Recorder frames) names ``name`` in the same folder
    instead, ``shift`` lines further down, each function ``file`` defines has another name
    (:func:`renamed`, drawn from ``shift``), and the ``# <- the bug`` marks that tracebacks quote
    are gone. Evidence read for what it says still reads; a table keyed on where the planted
    lines were, or on the functions they sit in, does not."""
    import pickle
    import re

    from ..hang.diagnose.load import plain_pickle

    dst = unlabeled_copy(folder, into)
    where = re.compile(rf"([/\\]){re.escape(file)}(\", line |:)(\d+)")
    new_name = renamed(file, shift, package)
    mark = re.compile(r"[ \t]*# <- the bug[^\n]*")
    called = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(new_name, key=len,
                                                                         reverse=True)))
                        + r")(?!\w)") if new_name else None

    def moved(m) -> str:
        return f"{m.group(1)}{name}{m.group(2)}{int(m.group(3)) + shift}"

    def rename(text: str) -> str:
        return called.sub(lambda m: new_name[m.group(1)], text) if called else text

    for root, _, files in os.walk(dst):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                raw = fh.read()
            if os.path.basename(root) == "fr":
                dump = plain_pickle(raw)
                for entry in dump.get("entries", []):
                    for fr in entry.get("frames") or []:
                        if str(fr.get("filename", "")).endswith(os.sep + file):
                            fr["filename"] = fr["filename"][:-len(file)] + name
                            fr["line"] = int(fr["line"]) + shift
                            fr["name"] = new_name.get(fr.get("name"), fr.get("name"))
                with open(path, "wb") as fh:
                    pickle.dump(dump, fh)
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(mark.sub("", rename(where.sub(moved, text))))
    return dst


# what a tidied copy may call a function instead (verbs x nouns, drawn per shift)
_VERBS = ("fetch", "pull", "feed", "next", "load", "step", "iter", "emit", "make", "take")
_NOUNS = ("batch", "data", "items", "rows", "chunk", "work", "input", "block", "slice", "part")


def renamed(file: str, shift: int, package: str = "capstone") -> dict[str, str]:
    """{function ``file`` (of dtlab/<package>) defines at its top level, with an underscore in
    its name: the name a moved copy gives it}; drawn from ``shift``, all different."""
    import ast
    import random

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package,
                        file)
    try:
        tree = ast.parse(open(path).read())
    except (OSError, SyntaxError):
        return {}
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and "_" in n.name.strip("_")
             or isinstance(n, ast.FunctionDef) and n.name.startswith("_")]
    rng = random.Random(shift)
    pool = [f"_{v}_{n}" for v in _VERBS for n in _NOUNS]
    rng.shuffle(pool)
    return dict(zip(names, pool))


def _argv(spec: dict, nprocs: int, out: str, timeout: float) -> list[str]:
    argv = [sys.executable, "-m", "dtlab", "capstone", "hang", "--bug", str(spec["bug"]),
            "--nprocs", str(nprocs), "--backend", "gloo", "--out", out, "--timeout", str(timeout)]
    for key, flag in (("culprit", "--culprit"), ("at_step", "--at-step")):
        if spec.get(key) is not None:
            argv += [flag, str(spec[key])]
    return argv


def shows_its_bug(spec: dict, out: str) -> str:
    """'' if the evidence in ``out`` shows ``spec``'s bug (dtlab's diagnosis names its class and
    its culprit among the candidates), else what is wrong with it."""
    from ..capstone.hang import BUGS, CULPRIT

    try:
        with open(os.path.join(out, "diagnosis.json")) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return "no diagnosis was written"
    culprit = spec.get("culprit", CULPRIT)
    if d.get("failure_class") != BUGS[spec["bug"]].expect_class:
        return f"diagnosed {d.get('failure_class')}, not {BUGS[spec['bug']].expect_class}"
    if culprit not in d.get("culprit_ranks", []):
        return f"culprit {culprit} is not among the diagnosed {d.get('culprit_ranks')}"
    return ""


def broken_runs(specs: list[dict], nprocs: int = 3, into: str | None = None,
                parallel: int | None = None, timeout: float = RUN_TIMEOUT) -> list[str]:
    """Run each spec (``{"bug": KIND, "culprit": R, "at_step": K}``; culprit and at_step
    optional) as a broken capstone job on ``nprocs`` gloo ranks, ``parallel`` at a time (default:
    the cores); return their evidence folders, unlabeled, in ``into`` (a new temporary folder if
    None), in spec order."""
    into = into or tempfile.mkdtemp(prefix="dtlab-cases-")
    cache = os.environ.get(CACHE_ENV)
    if not cache:
        outs = _make(specs, nprocs, parallel, timeout)
        try:
            return [unlabeled_copy(out, into) for out in outs]
        finally:
            if outs:
                shutil.rmtree(os.path.dirname(outs[0]), ignore_errors=True)
    import fcntl

    folder = os.path.join(cache, "broken-runs")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # gradings side by side (--jobs) wait, then share
        keys = [f"{s['bug']}-n{nprocs}-c{s.get('culprit', '')}-s{s.get('at_step', '')}" for s in specs]
        todo = [(k, s) for k, s in zip(keys, specs) if not os.path.isdir(os.path.join(folder, k))]
        if todo:
            outs = _make([s for _, s in todo], nprocs, parallel, timeout)
            for (k, _), out in zip(todo, outs):
                shutil.move(out, os.path.join(folder, k))
            shutil.rmtree(os.path.dirname(outs[0]), ignore_errors=True)
    return [unlabeled_copy(os.path.join(folder, k), into) for k in keys]


def _make(specs: list[dict], nprocs: int, parallel: int | None, timeout: float) -> list[str]:
    """Each spec's evidence folder, made and checked (see the module); in a temporary folder the
    caller moves or copies from (the OS removes /tmp; a grading session, its cache)."""
    from ..capstone.hang import check_args
    from ..runtime.agents import Agents

    for spec in specs:
        unknown = set(spec) - {"bug", "culprit", "at_step"}
        if unknown or "bug" not in spec:
            raise ValueError(f"spec {spec!r}: needs a 'bug', may have 'culprit' and 'at_step'"
                             + (f"; unknown keys {sorted(unknown)}" if unknown else ""))
        check_args(spec["bug"], nprocs, "gloo", None, spec.get("culprit"), spec.get("at_step"))
    parallel = parallel or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                               else os.cpu_count() or 1)
    work = tempfile.mkdtemp(prefix="dtlab-broken-")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DTLAB_OUTPUT": "none"}
    made: dict[int, str] = {}
    why: dict[int, str] = {}
    try:
        for attempt in range(ATTEMPTS):
            todo = [i for i in range(len(specs)) if i not in made]
            for start in range(0, len(todo), parallel):
                batch = todo[start:start + parallel]
                outs = {i: os.path.join(work, f"run{i}-{attempt}") for i in batch}
                with Agents(os.path.join(work, f"agents-{attempt}-{start}")) as ag:
                    for i in batch:
                        ag.start(f"run{i}", _argv(specs[i], nprocs, outs[i], timeout), env)
                    codes = ag.wait(timeout + 60)
                    logs = {i: ag.output(f"run{i}") for i in batch}
                for i in batch:
                    if codes.get(f"run{i}") != 0:
                        tail = logs.get(i, "").strip().splitlines()[-3:]
                        why[i] = f"exit {codes.get(f'run{i}')}: {' | '.join(tail)}"
                    else:
                        why[i] = shows_its_bug(specs[i], outs[i])
                        if not why[i]:
                            made[i] = outs[i]
            if len(made) == len(specs):
                keep = tempfile.mkdtemp(prefix="dtlab-broken-made-")
                outs = []
                for i in range(len(specs)):
                    outs.append(os.path.join(keep, f"run{i}"))
                    shutil.move(made[i], outs[-1])
                return outs
        bad = [i for i in range(len(specs)) if i not in made]
        raise RuntimeError(f"the grader could not make broken run {bad[0]} ({specs[bad[0]]}) "
                           f"show its bug in {ATTEMPTS} tries: {why.get(bad[0])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
