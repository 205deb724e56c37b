"""The one object that owns rank processes: start, poll, stop -- and leave nothing behind.

Each rank is ``python -m dtlab.runtime.worker ARGS`` as a process of its own, in a new session,
with fd 1 and 2 in per-rank log files and ``TORCHELASTIC_ERROR_FILE`` for structured failures --
never a fork of the caller, so a kernel that already initialized CUDA is fine. Two ways to get
there, with the same result:

* **forked** (Linux, the default) from this process's rank zygote
  (:class:`.zygote.Zygote`), a fresh interpreter started once, in this process's environment and
  working directory, that has imported torch and nothing of dtlab and never touches CUDA. A fork
  costs a small part of the CPU a fresh ``import torch`` costs, for each rank of each launch
  (measured: BENCHMARKS.md, section "Launch overhead"). What a fresh interpreter would read as
  it starts (the ``PYTHON*``, ``LD_*`` variables: :data:`AT_START`) is the zygote's: a launch
  whose ranks set one differently gets a zygote of its own.
* **fresh interpreters** (``DTLAB_RANK_ZYGOTE=0``, elsewhere, or when the zygote would not
  start): torch elastic's ``start_processes``, the machinery under ``torchrun``.

What dtlab adds:

* the caller's signal handlers survive, and an interrupt during the start waits until every
  rank is accounted for (``PContext.start`` installs torchrun's own SIGINT/SIGTERM handlers
  when called on the main thread, so ranks are started from a thread);
* ``stop()`` escalates SIGTERM -> SIGKILL over each rank's whole process group *and* every
  descendant found with psutil (a DataLoader worker, a shell a rank started), and never lets a
  second Ctrl-C leave half the ranks alive;
* every live launch is stopped at interpreter exit (and, if the interpreter is killed, by the
  launch's reaper, :mod:`.reaper`; a rank zygote ends when its parent does, and each rank's
  guard, :mod:`.guard`, ends its rank when the zygote does).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import psutil

from .zygote import Zygote, ZygoteTimeout

_LIVE: "weakref.WeakSet[RankProcs]" = weakref.WeakSet()

# torch._dynamo: DDP's and FSDP's constructors import it (~800 modules): 1.2-1.4 s per launch
# of 2 ranks on a 2-core box when each rank imports it, 0.2 s when the zygote did once (~1 s
# more at its start); measured 2026-11-27
WARM_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "cloudpickle", "psutil")
# what a fresh interpreter reads from its environment as it starts, where a fork would keep the
# zygote's: Python's own variables, the dynamic loader's, the thread pools' (OpenMP reads
# OMP_NUM_THREADS as it loads; calling torch.set_num_threads in a fork instead aborted CUDA
# builds' autograd threads: "Invalid thread pool!", torch 2.11 on 2x H200) and torch's logging
AT_START = ("PYTHON", "LD_", "MALLOC_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "PYTORCH_",
            "TORCH_CPP_LOG", "TORCH_LOGS", "TORCH_SHOW_CPP")
_ZYGOTES: dict[tuple, Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()
_COLD_WHY: list[str] = []  # why the zygote is off in this process, once found
ZYGOTE_REPLY_S = 30.0  # a fork answers in milliseconds; this long means stopped or starved


def _after_fork_in_child() -> None:
    """A fork of the launcher (os.fork, multiprocessing) starts with no zygote of its own, and
    with locks no thread of it holds (one held by another thread at the fork would be held
    for ever: a launch in the child blocked on it)."""
    global _ZYGOTES_LOCK
    _ZYGOTES_LOCK = threading.Lock()
    _ZYGOTES.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _launcher_traits() -> dict:
    """What a fresh child of this process inherits besides its environment: the umask and the
    resource limits (a forked rank gets them from the zygote otherwise, set when it started)."""
    import resource

    mask = os.umask(0o022)
    os.umask(mask)
    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                limits[name] = list(resource.getrlimit(getattr(resource, name)))
            except (ValueError, OSError):
                pass
    return {"umask": mask, "rlimits": limits}


def _end_zygote(z: Zygote) -> None:
    """SIGKILL a zygote that stopped answering (a stopped process takes SIGKILL too) and forget
    it; its ranks' guards end them when it is gone."""
    with _ZYGOTES_LOCK:
        for k, v in list(_ZYGOTES.items()):
            if v is z:
                del _ZYGOTES[k]
    try:
        os.kill(z.pid, signal.SIGKILL)
    except OSError:
        pass
    z.close()


def rank_zygote(env: dict[str, str]) -> Zygote | None:
    """The zygote this process's ranks with environment ``env`` (on top of this process's) fork
    from, started on first use; None where ranks start as fresh interpreters (off, not Linux,
    or the zygote would not start)."""
    if os.environ.get("DTLAB_RANK_ZYGOTE", "1") == "0" or not sys.platform.startswith("linux") \
            or _COLD_WHY:
        return None
    at_start = {k: v for k, v in {**os.environ, **env}.items() if k.startswith(AT_START)}
    key = (sys.executable, os.getcwd(), tuple(sorted(at_start.items())))
    with _ZYGOTES_LOCK:
        z = _ZYGOTES.get(key)
        if z is not None and z.alive():
            return z
        for k, old in list(_ZYGOTES.items()):  # idle ones of other settings: a few at most
            if not old.alive() or (len(_ZYGOTES) >= 3 and not old.busy()):
                old.close()
                del _ZYGOTES[k]
        try:
            z = Zygote(list(WARM_PRELOAD), full_env={**os.environ, **at_start}, cwd=key[1])
        except (OSError, RuntimeError) as e:
            _COLD_WHY.append(str(e))
            logging.getLogger(__name__).warning("dtlab: ranks start as fresh interpreters (the "
                                                "rank zygote did not start: %s)", e)
            return None
        _ZYGOTES[key] = z
        return z


class RankProcs:
    """N rank processes running ``python -m dtlab.runtime.worker ARGS`` with per-rank envs."""

    def __init__(self, log_dir: str, envs: dict[int, dict[str, str]], worker_args: tuple[str, ...]):
        self.log_dir = log_dir
        self.envs = envs
        self.worker_args = worker_args
        self.ctx = None  # torch elastic's context, for a cold start
        self.handles: dict = {}  # rank -> its process (Popen, or zygote.Forked when warm)
        self.files: dict[int, tuple[str, str]] = {}  # rank -> (stdout, stderr) log files
        self.error_files: dict[int, str] = {}
        self.exit_codes: dict[int, int | None] = dict.fromkeys(envs)
        self.exit_times: dict[int, float] = {}
        self.stopped: set[int] = set()
        self._ended = False  # stop() ran to the end: every rank and descendant is gone
        self._owner = os.getpid()  # a fork of the launcher (os.fork) inherits this object

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every rank. An interrupt meanwhile (Ctrl-C, a kernel's interrupt button) waits
        until every rank is accounted for, then is raised: the caller stops what started."""
        got: dict = {}
        done = threading.Event()

        def start_all() -> None:
            try:
                z = rank_zygote(self.envs[0])
                if z is not None:
                    try:
                        self._start_warm(z)
                    except OSError as e:  # an environment too large for one message: as cold
                        if e.errno != errno.EMSGSIZE or self.handles:
                            raise
                        self._start_cold()
                    except ZygoteTimeout as e:
                        _end_zygote(z)
                        raise RuntimeError(f"dtlab: {e} (stopped, or starved of CPU): it was "
                                           f"ended, with the ranks it had started; the next "
                                           f"launch starts a new one") from None
                else:
                    self._start_cold()
            except BaseException as e:  # noqa: BLE001 -- handed to the caller's thread
                got["error"] = e
            finally:
                done.set()

        # On the main thread, PContext.start installs torchrun's handlers for SIGINT/SIGTERM,
        # which raise SignalException wherever the interrupt lands -- half-way through starting
        # the ranks, it dropped the handles of those already started, and it was never a
        # KeyboardInterrupt. Blocking SIGINT on this thread did not hold it back: the store's
        # and the control server's threads took it. From a thread of its own, torch leaves the
        # handlers alone. The interrupt itself is held by a handler of our own meanwhile: a
        # KeyboardInterrupt can land between any two statements, and one that landed outside a
        # try around the wait left this call before the thread had started every rank (a rank
        # started after the caller had given up on it; seen once in 2 runs of the test suite on
        # 2 busy cores). Once every rank is accounted for the caller's handler is back and gets
        # the interrupt, as it would have.
        _quiet_torchrun_thread_warning()
        starter = threading.Thread(target=start_all, name="dtlab-start-ranks", daemon=True)
        held: list[int] = []
        # only the main thread gets interrupts; a handler installed outside Python (None) stays
        previous = (signal.getsignal(signal.SIGINT)
                    if threading.current_thread() is threading.main_thread() else None)
        if previous is not None:
            signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
        try:
            starter.start()
            done.wait()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        if self.handles:
            _LIVE.add(self)
        if held:  # the user's Ctrl-C first (the caller's handler): an error it caused is its echo
            signal.raise_signal(signal.SIGINT)
        if "error" in got:
            raise got["error"]

    def _start_warm(self, z: Zygote) -> None:
        """Fork each rank from ``z``, with what ``start_processes`` would give it: this
        process's environment plus the rank's, its log files, its error file."""
        cwd, traits = os.getcwd(), _launcher_traits()
        for r, env in self.envs.items():
            d = os.path.join(self.log_dir, str(r))
            os.makedirs(d, exist_ok=True)
            self.files[r] = (os.path.join(d, "stdout.log"), os.path.join(d, "stderr.log"))
            self.error_files[r] = os.path.join(d, "error.json")
            full = {**os.environ, **env, "TORCHELASTIC_ERROR_FILE": self.error_files[r],
                    "DTLAB_PARENT_PID": str(z.pid)}  # the guard's parent is the zygote
            self.handles[r] = z.spawn("dtlab.runtime.worker:forked", list(self.worker_args),
                                      env=full, cwd=cwd, files=self.files[r],
                                      die_with_parent=False,  # the guard ends its rank first
                                      inherit=traits, reply_timeout=ZYGOTE_REPLY_S)

    def _start_cold(self) -> None:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

        specs = DefaultLogsSpecs(log_dir=self.log_dir, redirects=Std.ALL, tee=Std.NONE)
        self.ctx = ctx = start_processes(
            name="dtlab",
            entrypoint=sys.executable,
            args={r: ("-m", "dtlab.runtime.worker", *self.worker_args) for r in self.envs},
            envs=self.envs,
            logs_specs=specs,
        )
        self.handles = {r: h.proc for r, h in ctx.subprocess_handlers.items()}
        self.files = {r: (ctx.stdouts[r], ctx.stderrs[r]) for r in self.envs}
        self.error_files = dict(ctx.error_files)

    # -- what is running ------------------------------------------------------------------------
    @property
    def pids(self) -> dict[int, int]:
        return {r: h.pid for r, h in self.handles.items()}

    def poll(self) -> dict[int, int | None]:
        """Exit code of each rank (None while it runs); records when each was first seen done."""
        for r, h in self.handles.items():
            if self.exit_codes[r] is None:
                code = h.poll()
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
        if not self.handles or self._ended:  # a second call (launch's, then close's): no work
            return []
        if os.getpid() != self._owner:  # a fork's atexit: the ranks are its parent's to stop
            return []
        running = self.alive()
        self.stopped |= set(running)
        procs = dict(self.handles)
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
        if self.ctx is not None:
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
    with _ZYGOTES_LOCK:  # after the ranks: a zygote's end would end its ranks' guards
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()


class LeftBehind:
    """What is alive below this process after dtlab's launches: :attr:`left` (ranks, anything a
    rank started, a pool's reaper while its pool is open) and :attr:`helpers` (this process's
    rank zygotes: warm interpreters that new ranks are forked from, kept for the process's life
    and ended with it). ``str()`` says it in one paragraph, as the course's last cells print it."""

    def __init__(self, left: list[psutil.Process], helpers: list[psutil.Process]):
        self.left, self.helpers = left, helpers

    def __bool__(self) -> bool:
        return bool(self.left)

    def __str__(self) -> str:
        def name(p: psutil.Process) -> str:
            try:
                return f"pid {p.pid} ({p.name()}: {' '.join(p.cmdline()[:3])[:80]})"
            except psutil.Error:
                return f"pid {p.pid} (gone)"

        head = ("left behind: " + "; ".join(map(name, self.left)) if self.left
                else "nothing left behind: no rank, and nothing a rank started, is alive")
        if not self.helpers:
            return head
        return (f"{head}. Still here by design: {len(self.helpers)} rank zygote(s), "
                f"{', '.join(str(p.pid) for p in self.helpers)} (warm interpreters that new ranks "
                f"are forked from; they end with this process).")


def left_behind() -> LeftBehind:
    """Every process below this one, split into what dtlab should have ended (:attr:`left`) and
    this process's rank zygotes, which stay by design (:attr:`helpers`).

    >>> import dtlab
    >>> _ = dtlab.run(lambda: 1, nprocs=2, backend="gloo")   # doctest: +SKIP
    >>> print(dtlab.left_behind())                           # doctest: +SKIP
    nothing left behind: no rank, and nothing a rank started, is alive. Still here by design: ...
    """
    with _ZYGOTES_LOCK:
        zygotes = {z.pid for z in _ZYGOTES.values() if z.alive()}
    zygotes |= {z.pid for z in Zygote._shared.values() if z.alive()}
    left, helpers = [], []
    for p in psutil.Process().children(recursive=True):
        (helpers if p.pid in zygotes else left).append(p)
    return LeftBehind(left, helpers)
