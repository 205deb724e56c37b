"""The one object that owns rank processes: start, poll, stop -- and leave nothing behind.

Built on torch elastic's ``start_processes``, the machinery under ``torchrun``: it starts each
rank as a fresh interpreter (``subprocess.Popen`` in a new session -- never a fork of the
caller, so a kernel that already initialized CUDA is fine), redirects fd 1 and 2 into
per-rank log files, and gives each rank ``TORCHELASTIC_ERROR_FILE`` for structured failures.

What dtlab adds:

* the caller's signal handlers survive, and an interrupt during the start waits until every
  rank is accounted for (``PContext.start`` installs torchrun's own SIGINT/SIGTERM handlers
  when called on the main thread, so ranks are started from a thread);
* ``stop()`` escalates SIGTERM -> SIGKILL over each rank's whole process group *and* every
  descendant found with psutil (a DataLoader worker, a shell a rank started), and never lets a
  second Ctrl-C leave half the ranks alive;
* every live launch is stopped at interpreter exit (and, if the interpreter is killed, by the
  launch's reaper, :mod:`.reaper`).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import psutil

_LIVE: "weakref.WeakSet[RankProcs]" = weakref.WeakSet()


class RankProcs:
    """N rank processes running ``python -m dtlab.runtime.worker ARGS`` with per-rank envs."""

    def __init__(self, log_dir: str, envs: dict[int, dict[str, str]], worker_args: tuple[str, ...]):
        self.log_dir = log_dir
        self.envs = envs
        self.worker_args = worker_args
        self.ctx = None
        self.exit_codes: dict[int, int | None] = dict.fromkeys(envs)
        self.exit_times: dict[int, float] = {}
        self.stopped: set[int] = set()
        self._ended = False  # stop() ran to the end: every rank and descendant is gone
        self._owner = os.getpid()  # a fork of the launcher (os.fork) inherits this object

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every rank. An interrupt meanwhile (Ctrl-C, a kernel's interrupt button) waits
        until every rank is accounted for, then is raised: the caller stops what started."""
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

        specs = DefaultLogsSpecs(log_dir=self.log_dir, redirects=Std.ALL, tee=Std.NONE)
        n = len(self.envs)
        got: dict = {}
        done = threading.Event()

        def start_all() -> None:
            try:
                got["ctx"] = start_processes(
                    name="dtlab",
                    entrypoint=sys.executable,
                    args={r: ("-m", "dtlab.runtime.worker", *self.worker_args) for r in range(n)},
                    envs=self.envs,
                    logs_specs=specs,
                )
            except BaseException as e:  # noqa: BLE001 -- handed to the caller's thread
                got["error"] = e
            finally:
                done.set()

        # On the main thread, PContext.start installs torchrun's handlers for SIGINT/SIGTERM,
        # which raise SignalException wherever the interrupt lands -- half-way through starting
        # the ranks, it dropped the handles of those already started, and it was never a
        # KeyboardInterrupt. Blocking SIGINT on this thread did not hold it back: the store's
        # and the control server's threads took it. From a thread of its own, torch leaves the
        # handlers alone; the interrupt lands here, in join(), and waits for the handles.
        _quiet_torchrun_thread_warning()
        starter = threading.Thread(target=start_all, name="dtlab-start-ranks", daemon=True)
        interrupted = None
        starter.start()
        while not done.is_set():
            try:  # not join(): one interrupted by KeyboardInterrupt marks the thread as ended
                done.wait()
            except KeyboardInterrupt as e:
                interrupted = e
        self.ctx = got.get("ctx")
        if self.ctx is not None:
            _LIVE.add(self)
        if "error" in got:
            raise got["error"]
        if interrupted is not None:
            raise interrupted

    # -- what is running ------------------------------------------------------------------------
    @property
    def files(self) -> dict[int, tuple[str, str]]:
        return {r: (self.ctx.stdouts[r], self.ctx.stderrs[r]) for r in self.envs}

    @property
    def error_files(self) -> dict[int, str]:
        return dict(self.ctx.error_files)

    @property
    def pids(self) -> dict[int, int]:
        return self.ctx.pids() if self.ctx else {}

    def poll(self) -> dict[int, int | None]:
        """Exit code of each rank (None while it runs); records when each was first seen done."""
        if self.ctx is None:
            return dict(self.exit_codes)
        for r, h in self.ctx.subprocess_handlers.items():
            if self.exit_codes[r] is None:
                code = h.proc.poll()
                if code is not None:
                    self.exit_codes[r] = code
                    self.exit_times[r] = time.time()
        return dict(self.exit_codes)

    def alive(self) -> list[int]:
        return [r for r, c in self.poll().items() if c is None]

    # -- stop -----------------------------------------------------------------------------------
    def descendants(self) -> list[psutil.Process]:
        out = []
        for pid in self.pids.values():
            try:
                out += psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                pass
        return out

    def stop(self, grace: float = 3.0) -> list[int]:
        """SIGTERM every rank's process group and descendants; SIGKILL what is left after
        ``grace`` seconds. Returns the ranks that were still running. Idempotent."""
        if self.ctx is None or self._ended:  # a second call (launch's, then close's) has no work
            return []
        if os.getpid() != self._owner:  # a fork's atexit: the ranks are its parent's to stop
            return []
        running = self.alive()
        self.stopped |= set(running)
        procs = {r: h.proc for r, h in self.ctx.subprocess_handlers.items()}
        desc = self.descendants()
        interrupted = None
        try:
            signal_all(procs, desc, signal.SIGTERM)
            wait_all(procs, desc, grace)
        except KeyboardInterrupt as e:  # a second interrupt: skip the grace, but finish the job
            interrupted = e
        desc += [d for d in self.descendants() if d not in desc]  # started during the grace
        signal_all(procs, desc, signal.SIGKILL)
        wait_all(procs, desc, 10.0)
        self.poll()
        try:
            self.ctx.close(timeout=1)  # everything is dead: no signals sent
        except Exception:
            pass
        _close_logs(self.ctx)
        _LIVE.discard(self)
        self._ended = interrupted is None and None not in self.exit_codes.values()
        if interrupted is not None:
            raise interrupted
        return running


def _close_logs(ctx) -> None:
    """Close the parent's handles on the ranks' log files. torch closes them only in
    ``SubprocessHandler.close()``, which ``PContext.close()`` calls for ranks still running --
    ours are all stopped by then -- so each pool start left its files open, deleted with the
    run folder (26 -> 54 fds after 20 pool hangs, 7 left after ``close()``)."""
    for h in getattr(ctx, "subprocess_handlers", {}).values():
        for f in (getattr(h, "_stdout", None), getattr(h, "_stderr", None)):
            if f is not None:
                f.close()


class _NotTorchrun(logging.Filter):
    """torch warns, for torchrun's agent, that a context started off the main thread cannot
    stop its workers on a signal; dtlab starts from a thread on purpose and stops them itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "running on a child thread" not in record.getMessage()


def _quiet_torchrun_thread_warning() -> None:
    log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    if not any(isinstance(f, _NotTorchrun) for f in log.filters):
        log.addFilter(_NotTorchrun())


def signal_all(procs: dict, desc: list[psutil.Process], sig) -> None:
    """``sig`` to each process's group and to each of ``desc``. Each process leads its own
    session (start_new_session): its group holds its children, and outlives the leader, so the
    group is signalled even when the process itself has exited. Also used by :mod:`.agents`."""
    for p in procs.values():
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    groups = {p.pid for p in procs.values()}
    for d in desc:
        try:
            if os.getpgid(d.pid) not in groups:  # those in a group above had it once already
                d.send_signal(sig)
        except (psutil.Error, OSError):
            pass


def wait_all(procs: dict, desc: list[psutil.Process], timeout: float) -> None:
    """Wait up to ``timeout`` s in all for ``procs`` (our children, through Popen) and ``desc``."""
    end = time.monotonic() + timeout
    for p in procs.values():
        try:
            p.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    # descendants are grandchildren, never ours to reap, so psutil may wait on them
    # (for our own children it would reap them behind Popen's back and lose exit codes)
    psutil.wait_procs(desc, timeout=max(0.0, end - time.monotonic()))


@atexit.register
def _stop_all_at_exit() -> None:
    for rp in list(_LIVE):
        try:
            rp.stop(grace=1.0)
        except BaseException:
            pass
