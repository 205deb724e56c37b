"""Failures are data: what went wrong on each rank, and which failure came first.

Modelled on torch elastic's ``ProcessFailure`` / ``ChildFailedError``: every failing rank is
reported, and the earliest *primary* failure is named the root cause. A failure that only echoes
another rank's death ("Connection closed by peer" in gloo, "remote process exited" in NCCL) is
marked secondary, so it cannot be blamed while a primary failure exists; a collective's timeout
comes after every other primary failure and, when it comes first, is called the first failure,
not the root cause (every rank of a hang times out, the culprit's peers as often as not first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..vocab import exit_summary

if TYPE_CHECKING:
    from .results import Results


class _ShortTraceback(Exception):
    """IPython renders ``_render_traceback_()`` instead of a traceback through dtlab's
    internals: the message already holds every rank's traceback, which is what matters.

    ``notes`` are lines added after the error was made (what the pool did about it, a
    diagnosis): data, shown after the message, never written into ``args``."""

    def __init__(self, *args):
        super().__init__(*args)
        self.notes: list[str] = []

    def __str__(self) -> str:
        return "\n".join([super().__str__(), *self.notes])

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class LaunchError(_ShortTraceback, ValueError):
    """Bad input to :func:`dtlab.run`, :class:`dtlab.Pool` or a pool's command, found before
    anything started; the message names the argument."""


class PoolBrokenError(_ShortTraceback, RuntimeError):
    """The pool lost a rank; call ``pool.restart()`` (or ``%dtlab restart``) to get a fresh one."""


# Messages a rank prints when it fails *because another rank went away*.
_SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|"
    r"remote process exited|ncclRemoteError|NCCL communicator was aborted|"
    r"Socket Timeout|Connection refused|ECONNRESET|EPIPE|"
    r"DistNetworkError|DistBackendError: .*(closed|reset)",
    re.IGNORECASE,
)

# Messages of a collective that gave up waiting: every rank of a hang ends this way, the culprit's
# peers first or the culprit first depending on whose timer fires first -- a symptom, not a cause.
_TIMEOUT = re.compile(
    r"Timed out waiting \d+ ?ms|Watchdog caught collective operation timeout|DistTimeoutError|"
    r"collective operation timeout|timed out after \d+",
    re.IGNORECASE,
)


@dataclass
class Failure:
    """One rank's failure.

    kind: ``exception`` (fn raised), ``sys_exit`` (fn called ``sys.exit``), ``exit`` (the
    process exited non-zero without a Python exception, e.g. ``os._exit(3)``), ``signal``
    (killed by a signal, e.g. a segfault), ``no_result`` (exited 0 but ``fn`` never returned,
    e.g. ``os._exit(0)``), ``left`` (``fn`` returned normally while its peers still waited for
    it in a collective: it raised nothing, yet it is why they failed), ``bad_result`` (fn
    returned, but its value could not be brought back to the parent).
    """

    rank: int
    kind: str
    exit_code: int | None
    summary: str  # one line
    detail: str  # traceback, or the tail of stderr
    time: float  # epoch seconds when it happened (as precise as the evidence allows)

    @property
    def secondary(self) -> bool:
        """It only echoes another rank's departure ("Connection closed by peer")."""
        return self.kind == "exception" and bool(_SECONDARY.search(self.detail))

    @property
    def timed_out(self) -> bool:
        """A collective gave up waiting (gloo's or NCCL's timeout): what the ranks of a hang
        raise, whichever rank caused it."""
        return self.kind == "exception" and bool(_TIMEOUT.search(self.detail))


def order_failures(failures: list[Failure]) -> list[Failure]:
    """Root cause first: primary failures before timeouts before secondary ones, each by time."""
    return sorted(failures, key=lambda f: (f.secondary, f.timed_out, f.time, f.rank))


class RankError(_ShortTraceback, RuntimeError):
    """One or more ranks failed.

    ``failures`` maps rank -> traceback text (or the end of stderr for a rank that died without
    a Python exception, or what a rank did that made its peers fail), root cause first;
    ``failure_list`` holds the same as :class:`Failure` records; ``root_rank`` names the root
    cause; ``stopped`` the ranks dtlab stopped because they were still running; ``results``
    every rank's output so far; ``diagnosis`` and ``evidence_dir`` are set when a post-mortem
    ran.
    """

    def __init__(self, failures: list[Failure], results: "Results | None" = None,
                 stopped: list[int] | None = None, where: str = "dtlab.run"):
        ordered = order_failures(failures)
        self.failure_list = ordered
        self.failures = {f.rank: f.detail for f in ordered}
        self.root_rank = ordered[0].rank
        self.exit_codes = {f.rank: f.exit_code for f in ordered}
        self.results = results
        self.stopped = stopped or []
        self.diagnosis = None
        self.evidence_dir: str | None = None
        super().__init__(self._format(where))

    def _format(self, where: str) -> str:
        n = len(self.results) if self.results is not None else None
        root = self.failure_list[0]
        # a timeout first says only that the ranks stopped agreeing, not which one caused it
        symptom = root.timed_out
        said = ("first failure (a collective gave up waiting: a symptom, not the cause; "
                "the diagnosis looks for the cause)" if symptom else "root cause")
        lines = [
            f"{where}: {len(self.failure_list)} of {n if n is not None else '?'} ranks failed; "
            f"{said}: rank {root.rank}: {root.summary}"
        ]
        for i, f in enumerate(self.failure_list):
            if i == 0:
                tag = "FIRST FAILURE (a timeout)" if symptom else "ROOT CAUSE (first failure)"
            else:
                dt = f.time - root.time
                when = f"{dt:.2f} s after rank {root.rank}" if dt > 0.005 else "at about the same time"
                tag = ("secondary: it lost a peer, " if f.secondary else "") + when
            status = "" if f.exit_code is None else " " + exit_summary(f.exit_code)
            lines.append(f"\n----- rank {f.rank} [{tag}]{status} -----")
            lines.append(f.detail.rstrip() or f.summary)
        if self.stopped:
            who = ", ".join(map(str, self.stopped))
            lines.append(f"\n(rank {who} was still running and was stopped)" if len(self.stopped) == 1
                         else f"\n(ranks {who} were still running and were stopped)")
        return "\n".join(lines)


class HangError(_ShortTraceback, TimeoutError):
    """The timeout passed with ranks still running: a hang, or work slower than the timeout.

    ``stacks`` maps rank -> the Python stack of that rank's process at the moment the timeout
    passed (py-spy when it can attach, else a faulthandler dump; ``method`` says which);
    ``snapshot`` holds stacks taken earlier, when the ranks first went quiet (if asked for);
    ``finished`` the ranks that had returned; ``diagnosis`` and ``evidence_dir`` are set when a
    post-mortem ran; ``results`` holds each rank's output so far. ``phase`` is "run" when the
    timeout passed in the user's code, "start" when ranks never got there (``start_timeout``;
    ``late`` names them).
    """

    def __init__(self, timeout: float, stacks: dict[int, str], results: "Results | None" = None,
                 method: str = "", where: str = "dtlab.run", finished: list[int] | None = None,
                 snapshot: dict[int, str] | None = None, phase: str = "run",
                 late: list[int] | None = None, native: dict[int, str] | None = None,
                 threads: dict[int, list[dict]] | None = None):
        self.timeout = timeout
        self.native = native or {}
        self.threads = threads or {}
        self.phase = phase
        self.late = late if late is not None else sorted(stacks) if phase == "start" else []
        self.stacks = stacks
        self.results = results
        self.method = method
        self.diagnosis = None
        self.evidence_dir: str | None = None
        self.snapshot = snapshot or {}
        self.finished = finished or []
        super().__init__(self._format(where))

    def _format(self, where: str) -> str:
        live = sorted(self.stacks)
        if self.phase == "start":
            head = (f"{where}: rank(s) {', '.join(map(str, self.late))} did not reach fn within "
                    f"start_timeout={self.timeout:g} s of launch (start-up: the rank's process, "
                    f"imports, joining the process group)")
        else:
            head = (f"{where}: timed out after {self.timeout:g} s with rank(s) "
                    f"{', '.join(map(str, live))} still running")
        lines = [
            head
            + (f" (rank(s) {', '.join(map(str, self.finished))} had finished)" if self.finished else "")
            + f"; all ranks were stopped. Stacks at the timeout ({self.method or 'unavailable'}):"
        ]
        from .stacks import innermost_user_frame

        for rank in live:
            where_line = innermost_user_frame(self.stacks[rank])
            lines.append(f"  rank {rank}: {where_line or 'no Python frame captured'}")
        lines.append("Full stacks: err.stacks[rank]. If the work is just slow, raise "
                     + ("start_timeout=." if self.phase == "start" else "timeout=."))
        return "\n".join(lines)
