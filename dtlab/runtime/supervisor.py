"""One owner for the lifetime of a set of ranks and their run folder (dtlab/runtime/README.md).

A :class:`Supervisor` is what torch elastic's ``PContext`` + ``LogsSpecs`` are to torchrun: it
makes the run folder, hosts the rendezvous store, starts the ranks (:class:`.procs.RankProcs`)
and their reaper (:mod:`.reaper`), watches them, examines stuck ones, writes the evidence and
runs the post-mortem, and at the end stops every process and removes the folder. Its two
clients differ only in what "a rank is done" means::

    launch.run (one-shot)   done = the rank exited; it failed if it exited non-zero or without
                            a result file
    Pool (persistent)       done = the rank answered the command; it failed if the answer is an
                            error; a rank that exits is dead (the pool is broken)

:meth:`Supervisor.wait` is the one wait loop for both: output, deaths, the failure grace, the
snapshot of quiet ranks, the deadline.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import tempfile
import time
from typing import Callable

from . import evidence, guard, output, plan as _plan, reaper
from .errors import Failure, exit_summary
from .procs import RankProcs
from .stacks import capture_native

TICK = 0.02  # seconds between looks at the ranks when nothing wakes the loop sooner
FAILURE_GRACE = 1.5  # after a first failure, how long the others get to report theirs

# states a client reports per rank in wait()
RUNNING, OK, FAILED, DEAD = "running", "ok", "failed", "dead"


def make_run_dir(prefix: str) -> str:
    """A private (0700) folder under ``$DTLAB_RUN_ROOT`` or the system's temporary folder."""
    base = os.environ.get("DTLAB_RUN_ROOT") or None
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)  # mkdtemp makes it 0700


def loopback_store(timeout_s: float | None):
    """The rendezvous TCPStore, served by the parent as torchrun's agent serves it, on a socket
    bound to 127.0.0.1 only (TCPStore's own listener binds every interface): no other host can
    reach it. The port is the kernel's choice, so two launches never collide."""
    from torch.distributed import TCPStore

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    store = TCPStore("127.0.0.1", sock.getsockname()[1], is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=timeout_s or 300.0),
                     master_listen_fd=sock.detach())
    return store


def exit_failure(rank: int, code: int | None, when: float, error_file: str, stderr: str,
                 got_result: bool, pid: int | None = None) -> Failure:
    """Turn one rank's exit into a :class:`Failure`, from its error file if it wrote one
    (``pid``: the rank's own process; an error file another process wrote is not its story)."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    # the error file, also for a rank that exited 0 without a result: sys.exit(256) exits with
    # status 0 (a status is one byte), yet it was no success
    foreign = None
    if (code not in (None, 0) or (code == 0 and not got_result)) and os.path.isfile(error_file):
        pf = ProcessFailure(local_rank=rank, pid=0, exitcode=code, error_file=error_file)
        msg = pf.error_file_data.get("message", {})
        extra = msg.get("extraInfo", {}) if isinstance(msg, dict) else {}
        writer = str(extra.get("pid", ""))
        if pid is not None and writer.isdigit() and int(writer) != pid:
            # a process the rank started inherits the path: a fork of rank 1 that raised in
            # the rank's code once made a peer the root cause of rank 1's os._exit(3)
            foreign = (f"(its error file was written by process {writer}, not by the rank: a "
                       f"process it started, a fork of it, raised {extra.get('exc_type', '')})")
        else:
            t = int(extra.get("timestamp_ns", 0)) / 1e9 or float(pf.timestamp)
            summary = msg.get("message", str(pf.message)) if isinstance(msg, dict) else str(msg)
            detail = extra.get("py_callstack", summary)
            if extra.get("exc_type") == "SystemExit":  # a traceback alone: "SystemExit: 3"
                if code == 0:
                    summary += " (its exit status is 0: a status keeps only the low 8 bits)"
                return Failure(rank, "sys_exit", code, summary, f"{summary}, here:\n{detail}", t)
            return Failure(rank, "exception", code, summary, detail, t)
    tail = "\n".join(stderr.rstrip().splitlines()[-25:])
    if code == 0 and not got_result:
        summary = "exited with code 0 before fn returned (os._exit(0) inside fn?)"
        kind = "no_result"
    elif code is not None and code < 0:
        summary = f"{exit_summary(code)} (the process died without a Python exception)"
        kind = "signal"
    else:
        summary = (f"exited with code {code} without a Python exception (os._exit({code}), "
                   f"or C/C++ code that called exit() or abort())")
        kind = "exit"
    detail = summary + (f"\n{foreign}" if foreign else "") \
        + ("\nlast lines of its stderr:\n" + tail if tail else "")
    return Failure(rank, kind, code, summary, detail, when)


class Supervisor:
    """The ranks of one launch or one pool start, their run folder, and their end."""

    def __init__(self, plan: _plan.Plan, mode: str, extra_args: tuple[str, ...] = (),
                 store_timeout: float | None = None, prefix: str = "dtlab-run-",
                 run_dir: str | None = None):
        self.plan = plan
        self.run_dir = run_dir or make_run_dir(prefix)
        self.fr_dir = os.path.join(self.run_dir, "fr")
        try:  # nothing started yet: a failure here must not leave the folder behind
            os.makedirs(self.fr_dir, exist_ok=True)
            self.store = loopback_store(store_timeout)
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        envs = _plan.rank_envs(plan, self.store.port,
                               evidence.fr_env(plan.backend, self.fr_dir, plan.env))
        self.procs = RankProcs(os.path.join(self.run_dir, "logs"), envs,
                               (mode, self.run_dir, *extra_args))
        self.stacks: dict[str, dict[int, str]] = {}
        self.stack_method = ""
        # below Python, taken with the stacks when asked (launch's native_stacks): per moment,
        # {rank: py-spy --native text} and {rank: the OS threads}; kept apart from self.stacks,
        # which the evidence folder and the diagnosis read as Python stacks
        self.native_stacks = False
        self.native: dict[str, dict[int, str]] = {}
        self.threads: dict[str, dict[int, list[dict]]] = {}
        self.phase = "run"  # or "start": wait() was still waiting for ranks to reach user code
        self.late: list[int] = []  # the ranks that had not reached it when start-up timed out
        self._reaper = None
        self._closed = False

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._reaper = reaper.start(self.run_dir)
        self.procs.start()
        for pid in self.procs.pids.values():
            reaper.tell(self._reaper, f"pid {pid}")

    @property
    def files(self) -> dict[int, tuple[str, str]]:
        return self.procs.files

    def rank_pids(self) -> dict[int, int]:
        """Each rank's own process, the child of its guard (:mod:`.guard`); ``procs.pids`` are
        the guards, whose process groups hold the ranks."""
        return {r: guard.rank_pid(self.run_dir, r, pid) for r, pid in self.procs.pids.items()}

    # -- watch ------------------------------------------------------------------------------------
    def wait(self, ranks: list[int], progress: Callable[[float], dict[int, str]],
             pump: output.OutputPump, timeout: float | None,
             failure_grace: float = FAILURE_GRACE, snapshot_quiet: float | None = None,
             entered: Callable[[int], bool] | None = None, start_timeout: float | None = None
             ) -> str:
        """Until every rank in ``ranks`` is done: returns ``done`` (all ok or failed, none left
        running), ``failed`` (a failure, and the grace for the others passed), ``died`` (a rank
        is dead: the client cannot continue), or ``hang`` (the deadline; stacks taken).

        ``progress(tick)`` reports each rank's state (:data:`RUNNING`, :data:`OK`,
        :data:`FAILED`, :data:`DEAD`), waiting at most ``tick`` seconds for news.
        ``snapshot_quiet``: once every running rank has been silent that long, take their
        stacks (and Flight Recorder dumps) while they are still stuck, before any watchdog acts;
        a rank printing to stdout afterwards shows it was a slow step, not a hang: the snapshot
        is dropped and the next quiet spell takes another.

        ``entered(rank)``: whether that rank has reached the user's code. Given, ``timeout``
        counts from the moment every rank still running has (imports and joining the process
        group are start-up, not the user's work), and start-up itself is bounded by
        ``start_timeout``; a start-up that passes it is a hang too, with :attr:`phase` "start".
        """
        t0 = time.monotonic()
        self.phase = "start" if entered is not None else "run"
        deadline = None if timeout is None else t0 + timeout
        if entered is not None:
            deadline = None if start_timeout is None else t0 + start_timeout
        first_failure = None
        quiet_since, spoke = time.monotonic(), False

        def saw(rank, stream, text):
            nonlocal quiet_since, spoke
            quiet_since, spoke = time.monotonic(), True
            if stream == "out" and "snapshot" in self.stacks:
                # the program went on after it (a slow step, not a hang: its stdout moved):
                # those stacks show no hang; the next quiet spell takes new ones. Errors on
                # stderr after a snapshot (timeouts, tracebacks) are the hang ending: kept.
                del self.stacks["snapshot"]

        while True:
            states = progress(TICK)
            pump.pump(on_text=saw)
            running = [r for r in ranks if states[r] == RUNNING]
            now = time.monotonic()
            if any(states[r] == DEAD for r in ranks):
                return "died"
            if not running:
                return "done"
            if first_failure is None and any(states[r] == FAILED for r in ranks):
                first_failure = now
            if first_failure is not None and now - first_failure > failure_grace:
                return "failed"
            if self.phase == "start" and all(entered(r) for r in running):
                self.phase = "run"
                deadline = None if timeout is None else now + timeout
            if (snapshot_quiet is not None and "snapshot" not in self.stacks and spoke
                    and now - quiet_since > snapshot_quiet):
                self.examine(running, "snapshot")
            if deadline is not None and now > deadline:
                if self.phase == "start":
                    self.late = [r for r in running if not entered(r)]
                self.examine(running, "timeout")
                return "hang"

    def examine(self, ranks: list[int], when: str) -> dict[int, str]:
        """Stacks (and, on NCCL, Flight Recorder dumps) of stuck ranks, without stopping them."""
        pids = self.rank_pids()
        live = {r: pids[r] for r in ranks if r in pids}
        self.stack_method, self.stacks[when] = evidence.examine_stuck(
            live, self.run_dir, self.plan.backend)
        if self.native_stacks:
            self.native[when], self.threads[when] = capture_native(live)
        return self.stacks[when]

    # -- conclude ---------------------------------------------------------------------------------
    def write_evidence(self, results, facts: dict, out: str | None = None,
                       err: BaseException | None = None) -> str:
        """The evidence folder (:mod:`.evidence`) of this run, in ``out`` or the run folder;
        with ``err``, the post-mortem runs on it and its verdict is attached to ``err``."""
        out = out or os.path.join(self.run_dir, "evidence")
        facts = {"backend": self.plan.backend, "nprocs": self.plan.nprocs,
                 "stack_method": self.stack_method, **facts}
        evidence.write_evidence(out, results, facts, self.stacks, self.fr_dir,
                                evidence.unprinted_tracebacks(err, results))
        if err is not None:
            evidence.run_postmortem(err, out)
        return out

    def stop(self, grace: float = 3.0) -> list[int]:
        """Stop every rank still running (and its descendants); returns those ranks."""
        return self.procs.stop(grace=grace)

    def close(self, grace: float = 3.0) -> list[int]:
        """Stop everything, release the reaper, remove the run folder (``DTLAB_KEEP_RUNS=1``
        keeps it). Idempotent; returns the ranks that were still running."""
        if self._closed:
            return []
        stopped = self.procs.stop(grace=grace)
        reaper.release(self._reaper)
        self.store = None  # its listening socket closes with it
        if not os.environ.get("DTLAB_KEEP_RUNS"):
            shutil.rmtree(self.run_dir, ignore_errors=True)
        self._closed = True
        return stopped
