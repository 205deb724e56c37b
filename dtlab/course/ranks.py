"""Rank exercises, graded by what the ranks sent: the learner's rank function on observed ranks.

    job = course.Ranks(3, offer={"send", "recv"}, without=("dtlab.collectives",))
    out = job.run(harness.gathers, "ring_all_gather", [calls_0, calls_1, calls_2])
    out.values[r]      # what rank r's harness returned: plain data
    out.traffic        # every message between the ranks (dtlab.runtime.relay.Message), in order

The ranks' process group is the relay (:mod:`dtlab.runtime.observed`): they share no network,
memory or files, every message passes through the test's process and is recorded there, and
only the ``offer``'d operations exist. So a test checks *what crossed*, not which functions
were avoided: a ring all-gather must send n-1 chunks to its right neighbour and nothing else;
an all-reduce composed of reduce-scatter and all-gather must move one chunk per rank through
each. Each rank gets only its own arguments (``per_rank[r]``).

Graded (``dtlab course grade``), each rank is a sandbox of its own (:mod:`dtlab.runtime.sandbox`)
that rebuilds the learner's function from the submission's source; in JupyterLab the ranks are
plain child processes, built from the same cell's source. Either way a rank is forked from a
zygote that has imported torch once (:mod:`dtlab.runtime.zygote`), not started cold. The job is bounded by CPU time, a
deadlock (the relay names what each rank waits for) and silence, not by the wall clock.
"""

from __future__ import annotations

import sys
from typing import Callable

from ..runtime import observed
from ..runtime.relay import COLLECTIVES, P2P
from ..runtime.zygote import Zygote
from . import context as grading_context
from .answer import SANDBOX_HOME, data_dir, learner_source, sandbox_box
from .harness import Learner
from .world import world

EVERYTHING = frozenset(P2P + COLLECTIVES)


def secret_pids(n: int) -> list[int]:
    """``n`` distinct numbers above any Linux pid (pid_max is at most 2**22): one per rank, told
    to that rank only (:func:`dtlab.course.harness.with_pid`)."""
    import secrets

    out: list[int] = []
    while len(out) < n:
        p = (1 << 23) + secrets.randbelow(1 << 30)
        if p not in out:
            out.append(p)
    return out


class Ranks:
    """``nprocs`` observed ranks for one exercise: what they may call, what they lack."""

    def __init__(self, nprocs: int, *, offer=EVERYTHING, max_numel: dict | None = None,
                 without: tuple[str, ...] | list[str] = (), cpu_s: float | None = None,
                 deliver: Callable | None = None, serve: Callable | None = None,
                 idle_s: float = 60.0):
        if not isinstance(nprocs, int) or not 1 <= nprocs <= 16:
            raise ValueError(f"Ranks: nprocs must be an int in 1..16, got {nprocs!r}")
        self.nprocs, self.offer = nprocs, set(offer)
        self.max_numel, self.deliver, self.serve = max_numel, deliver, serve
        self.world = world(without)
        self.ctx = grading_context.current()
        self.cpu_s = cpu_s or 60.0 * nprocs
        self.idle_s = idle_s

    def run(self, harness: Callable, name: str, per_rank: list) -> observed.Outcome:
        """``harness(learner's name, per_rank[r])`` on rank r; raises AssertionError (with the
        ranks' tracebacks and output) if a rank failed or the job had to be stopped."""
        if len(per_rank) != self.nprocs:
            raise ValueError(f"per_rank has {len(per_rank)} entries for {self.nprocs} ranks")
        learner = Learner(name, learner_source(name, self.ctx, sys._getframe(1).f_globals,
                                               without=self.world.without))
        out = self.observe(harness, [(learner, a) for a in per_rank])
        _show(out)
        if out.stopped or out.errors:
            raise AssertionError(_failure(name, out))
        return out

    def observe(self, harness: Callable, calls: list[tuple]) -> observed.Outcome:
        """``harness(*calls[r])`` on rank r, each rank in its own sandbox when graded (a plain
        child in JupyterLab); the outcome as it is, failed or not. :meth:`run` is this for a
        learner's function; :func:`dtlab.course.script` for a learner's script."""
        box = sandbox_box(self.ctx) if self.ctx is not None else None
        isolated = box is not None and box.isolate
        # the world first (in a sandbox it is also where it is here), then, without one, this
        # process's path; the zygote's imports are third-party ones the world keeps
        path = [self.world.pythonpath] + ([] if isolated else list(sys.path))
        zygote = Zygote.shared(self.world.keeping(observed.RANK_PRELOAD))
        try:
            spawn = observed.warm_spawn(zygote, path) if box is None else \
                self._sandboxed(box, zygote, path)
            return observed.run(harness, calls, offer=self.offer, max_numel=self.max_numel,
                                deliver=self.deliver, serve=self.serve, path=[], spawn=spawn,
                                cpu_s=self.cpu_s, idle_s=self.idle_s)
        finally:
            if box is not None:
                box.close()

    def _sandboxed(self, box, zygote, path):
        from ..runtime.sandbox import View

        def spawn(rank: int, argv: list[str], socket_path: str):
            # each rank its own sandbox: no network, folder or memory shared with another rank
            root = self.world.pythonpath
            view = View(ro=[*self.world.binds, (root, root)],  # no data/ (see answer.Answer._view)
                        rw=[(socket_path, "/relay.sock")], home=SANDBOX_HOME,
                        env={**observed.RANK_ENV, **({} if box.isolate else {"DTLAB_DATA": data_dir()})})
            return box.spawn_warm(zygote, observed.RANK_MAIN,
                                  ["/relay.sock" if box.isolate else socket_path], view, path)

        return spawn


def _show(out: observed.Outcome, lines: int = 40) -> None:
    """What the ranks printed, labelled, a screenful each (the rest is in ``out.outputs``)."""
    for r in sorted(out.outputs):
        text = [ln for ln in out.outputs[r].splitlines() if ln.strip()]
        for ln in text[:lines]:
            print(f"[rank {r}] {ln}")
        if len(text) > lines:
            print(f"[rank {r}] ... {len(text) - lines} more lines")


def _failure(name: str, out: observed.Outcome) -> str:
    echoes = ("ended without an answer", "the relay is gone", "before it reached the relay")
    own = {r: t for r, t in out.errors.items() if not any(e in t for e in echoes)}
    parts = [f"{name} on {len(out.outputs)} ranks: " + (out.stopped or "a rank failed")]
    for r, text in sorted(own.items()) or sorted(out.errors.items())[:1]:
        parts.append(f"--- rank {r} ---\n{text}")
    return "\n".join(parts)
