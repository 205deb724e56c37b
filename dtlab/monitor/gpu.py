"""The notebook's live view of a training run: every GPU's utilisation and memory, polled about
once a second, and rank 0's progress (step k/N, loss, ms/step, tok/s) as a bar -- one display,
updated in place while the cell waits for the ranks.

    with GpuPanel() as panel:                  # a notebook cell (or a script)
        ...                                    # anything that keeps the GPUs busy
    print(panel.format_summary())              # mean/max utilisation, peak memory per GPU

The capstone's ``train()`` (:mod:`dtlab.capstone.train`) wraps its launch in one (``panel=``; on
when GPUs are visible) and returns ``panel.summary()`` as ``result["gpu_panel"]``.

How it works, and why:

* **A thread in the notebook's kernel process.** While ``dtlab.run`` waits for the ranks, the
  cell is blocked in the runtime's wait loop, so the panel polls and redraws from a daemon
  thread; it runs inside a copy of the cell's ``contextvars`` context, so ipykernel sends its
  updates to the cell that started it. ``stop()`` (the ``with`` block's end, also on an
  exception or Ctrl-C) always ends the thread. A failing poll is counted, never raised: after
  ``MAX_ERRORS`` failures in a row the GPU side turns itself off and training goes on.
* **Where the numbers come from.** NVML through ``pynvml`` (the nvidia-ml-py package) when it
  imports and starts, else ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` with a
  timeout. Both count every GPU of the machine (neither reads ``CUDA_VISIBLE_DEVICES``). Without
  either, or with no GPU, the panel is off: one line says why, no thread polls GPUs.
* **Where the steps come from.** The caller names a file (the capstone's ``train()`` does);
  rank 0 appends one JSON line per step to it (``rank_train(progress_file=...)``), and
  :class:`StepProgress` tails it with the runtime's own :class:`~dtlab.runtime.output.FileTail`.
  Rank output still streams into the rank panes; only the N step lines go to the bar instead.
* **One display handle, not widgets** (as :mod:`dtlab.tuning.progress`): text and HTML updated
  by ``display_id`` are saved with the notebook and survive nbclient/nbgrader execution, where
  widget state would be lost. In a terminal: a compact line every ``line_every`` seconds, and
  one at the end.

>>> p = StepProgress()
>>> p.feed({"step": 3, "steps": 10, "loss": 4.5, "ms": 20.0, "tok_s": 51200.0})
>>> p.text()
'step 3/10 [#########---------------------] loss 4.5000 | 20 ms/step | 51.2k tok/s/rank'
"""

from __future__ import annotations

import contextvars
import html
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time

from ..runtime.output import FileTail, in_notebook_kernel

SMI_QUERY = "index,name,utilization.gpu,memory.used,memory.total"
SMI_ARGS = (f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits")
SMI_TIMEOUT = 5.0   # s; a wedged driver can make nvidia-smi block far longer
MAX_ERRORS = 5      # failed polls in a row before the GPU side gives up
TICK = 0.25         # s between redraws while steps are shown (GPUs are polled every interval)
BAR = 30


# --- reading the GPUs ---------------------------------------------------------------------------

def _number(field: str) -> float | None:
    """'87' -> 87.0; '[N/A]', '[Not Supported]' (MIG, some vGPUs) -> None."""
    try:
        return float(field)
    except ValueError:
        return None


def parse_smi(text: str) -> list[dict]:
    """Rows of ``nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
    --format=csv,noheader,nounits``; memory in MiB, as nvidia-smi gives it.

    >>> parse_smi("0, NVIDIA H100 80GB HBM3, 87, 41236, 81559\\n")[0]["util"]
    87.0
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 5:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        # a name with a comma in it: everything between the index and the last three fields
        index, name, util, used, total = fields[0], ", ".join(fields[1:-3]), *fields[-3:]
        rows.append({"gpu": int(index), "name": name, "util": _number(util),
                     "mem_used": _number(used), "mem_total": _number(total)})
    return rows


class SmiReader:
    """One ``nvidia-smi`` query per ``read()``; ``runner`` is ``subprocess.run`` (tests: a fake)."""

    source = "nvidia-smi"

    def __init__(self, exe: str = "nvidia-smi", runner=subprocess.run,
                 timeout: float = SMI_TIMEOUT):
        self.exe, self.runner, self.timeout = exe, runner, timeout

    def read(self) -> list[dict]:
        p = self.runner([self.exe, *SMI_ARGS], capture_output=True, text=True,
                        timeout=self.timeout)
        if p.returncode != 0:
            said = (p.stderr or p.stdout or "").strip().splitlines()
            raise RuntimeError(f"nvidia-smi exited {p.returncode}"
                               + (f": {said[0]}" if said else ""))
        return parse_smi(p.stdout)

    def close(self) -> None:
        pass


class NvmlReader:
    """NVML through ``pynvml``: initialised once, shut down by ``close()``."""

    source = "nvml"

    def __init__(self, nv):
        self.nv = nv
        nv.nvmlInit()
        try:
            self.handles = [nv.nvmlDeviceGetHandleByIndex(i)
                            for i in range(nv.nvmlDeviceGetCount())]
            self.names = [_text(nv.nvmlDeviceGetName(h)) for h in self.handles]
        except BaseException:
            nv.nvmlShutdown()
            raise

    def read(self) -> list[dict]:
        nv, rows = self.nv, []
        for i, h in enumerate(self.handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except nv.NVMLError:   # not supported (MIG instances): unknown, not 0
                util = None
            rows.append({"gpu": i, "name": self.names[i], "util": util,
                         "mem_used": mem.used / 2**20, "mem_total": mem.total / 2**20})
        return rows

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 -- closing: nothing left to report it to
            pass


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def find_reader(import_nvml=None, which=shutil.which, runner=subprocess.run):
    """``(reader, None)`` for this machine's GPUs, or ``(None, why the panel is off)``. NVML
    first, then nvidia-smi (tried once here, so a broken one is reported, not polled)."""
    why = []
    try:
        nv = import_nvml() if import_nvml else __import__("pynvml")
    except ImportError:
        why.append("pynvml is not installed")
    except Exception as e:  # noqa: BLE001 -- a broken install: say so, try nvidia-smi
        why.append(f"pynvml did not import ({e})")
    else:
        try:
            reader = NvmlReader(nv)
        except Exception as e:  # noqa: BLE001 -- NVMLError_LibraryNotFound, DriverNotLoaded ...
            why.append(f"NVML did not start ({e})")
        else:
            if reader.handles:
                return reader, None
            reader.close()
            why.append("NVML sees no GPU")
    exe = which("nvidia-smi")
    if not exe:
        return None, "; ".join(why + ["no nvidia-smi on PATH"])
    reader = SmiReader(exe, runner)
    try:
        rows = reader.read()
    except Exception as e:  # noqa: BLE001 -- timeout, exit status, unreadable output ...
        return None, "; ".join(why + [f"nvidia-smi failed ({e})"])
    return (reader, None) if rows else (None, "; ".join(why + ["nvidia-smi lists no GPU"]))


# --- rank 0's steps -----------------------------------------------------------------------------

def _warm(r: dict) -> str:
    return " (warm-up)" if r.get("warmup") else ""


class StepProgress:
    """Rank 0's steps as a bar: ``feed(record)`` or, with ``path``, ``read()`` what is new in
    the JSON-lines file rank 0 appends to (``{"step", "steps", "loss", "ms", "tok_s",
    "warmup"}``). ``ms`` is the median step time so far after the warm-up steps, the figure the
    summary's table ends with (:func:`dtlab.capstone.train.step_time`)."""

    def __init__(self, path: str | None = None):
        self._tail = FileTail(path) if path else None
        self._partial = ""
        self.last: dict | None = None
        self.first_loss: float | None = None

    def read(self) -> None:
        if self._tail is None:
            return
        *lines, self._partial = (self._partial + self._tail.read_new()).split("\n")
        for line in lines:
            try:
                self.feed(json.loads(line))
            except (ValueError, TypeError):  # not ours; the panel must not stop for it
                pass

    def feed(self, rec: dict) -> None:
        if self.first_loss is None:
            self.first_loss = rec.get("loss")
        self.last = rec

    def text(self) -> str:
        r = self.last
        if r is None:
            return "starting ranks (model, sharding, first step) ..."
        done = round(BAR * r["step"] / max(r["steps"], 1))
        return (f"step {r['step']}/{r['steps']} [{'#' * done}{'-' * (BAR - done)}] "
                f"loss {r['loss']:.4f} | {r['ms']:.0f} ms/step{_warm(r)} | "
                f"{r['tok_s'] / 1e3:.1f}k tok/s/rank")

    def html(self) -> str:
        r = self.last
        if r is None:
            return f"<div>{html.escape(self.text())}</div>"
        start = f"{self.first_loss:.4f} &rarr; " if r["step"] > 1 else ""
        return (f"<div><progress value='{r['step']}' max='{max(r['steps'], 1)}' "
                f"style='width:18em'></progress> step {r['step']}/{r['steps']} | "
                f"loss {start}<b>{r['loss']:.4f}</b> | {r['ms']:.0f} ms/step{_warm(r)} | "
                f"{r['tok_s'] / 1e3:.1f}k tok/s/rank</div>")


# --- the panel ----------------------------------------------------------------------------------

class GpuPanel:
    """Polls every GPU each ``interval`` seconds from a thread while the ``with`` block runs;
    draws it (and ``progress``, a :class:`StepProgress`, if given) in place. ``samples`` keeps
    ``(t, gpu, util %, MiB used)`` with ``t`` seconds since start; :meth:`summary` reduces them.

    ``reader``: anything with ``read() -> [{gpu, name, util, mem_used, mem_total}]`` and
    ``close()`` (default: :func:`find_reader`); ``gpus=False`` reads none (the bar alone).
    ``notebook``: draw a display (default: in a Jupyter kernel), else lines on ``stream``
    (default stderr). ``show_off``: say in one line that the GPU side is off and why (default:
    in a notebook).
    """

    def __init__(self, interval: float = 1.0, reader=None, progress: StepProgress | None = None,
                 gpus: bool = True, notebook: bool | None = None, stream=None,
                 show_off: bool | None = None, line_every: float = 10.0, clock=time.monotonic):
        self.interval, self.reader, self.progress, self.gpus_on = interval, reader, progress, gpus
        self.notebook = in_notebook_kernel() if notebook is None else notebook
        self.show_off = self.notebook if show_off is None else show_off
        self.stream, self.line_every, self.clock = stream, line_every, clock
        self.samples: list[tuple[float, int, float | None, float | None]] = []
        self.gpus: dict[int, dict] = {}    # latest row per GPU (name, mem_total, ...)
        self.source: str | None = None     # "nvml", "nvidia-smi"; None: the GPU side is off
        self.off: str | None = None
        self.polls = self.errors = self._failing = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None
        self._drawn = None
        self._started = self._stopped = False
        self._t0 = self._t_end = self._last_line = 0.0
        self._use(reader if gpus else None)

    def _use(self, reader) -> None:
        self.source = None if reader is None else getattr(reader, "source",
                                                          type(reader).__name__)

    # -- lifetime -------------------------------------------------------------------------------
    def __enter__(self) -> GpuPanel:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def start(self) -> GpuPanel:
        if self._started:
            return self
        self._started, self._t0 = True, self.clock()
        self._last_line = self._t0
        if not self.gpus_on:
            self.reader, self.show_off = None, False
        elif self.reader is None:
            self.reader, self.off = find_reader()
        self._use(self.reader)
        if self.notebook and (self.reader is not None or self.progress is not None
                              or self.show_off):
            self._safely(self._display)
        elif self.off and self.show_off:
            self._print(self.off_line())
        if self.reader is not None or self.progress is not None:
            run = contextvars.copy_context().run   # the cell's context: its output, its parent
            self._thread = threading.Thread(target=run, args=(self._loop,), daemon=True,
                                            name="dtlab-gpu-panel")
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread (bounded by one nvidia-smi timeout), draw the final state, release
        NVML. Idempotent; never raises for the panel's own failures."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._halt.set()
        if self._thread is not None:
            self._thread.join(SMI_TIMEOUT + 2 * self.interval + 1)
        self._t_end = self.clock()
        self._safely(self.progress.read if self.progress else None)
        self._safely(self._draw, True)
        if self.reader is not None:
            self._safely(self.reader.close)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        next_poll = self.clock()
        tick = min(self.interval, TICK) if self.progress is not None else self.interval
        while not self._halt.is_set():
            if self.reader is not None and self.clock() >= next_poll:
                self.poll()
                next_poll = self.clock() + self.interval
            self._safely(self.progress.read if self.progress else None)
            self._safely(self._draw, False)
            self._halt.wait(tick)

    def _safely(self, fn, *args) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 -- the panel never breaks training
            self.last_error = f"{type(e).__name__}: {e}"

    # -- polling --------------------------------------------------------------------------------
    def poll(self) -> None:
        """One reading of every GPU into ``samples``; a failure is counted, not raised."""
        reader = self.reader
        if reader is None:
            return
        try:
            rows = reader.read()
        except Exception as e:  # noqa: BLE001 -- timeout, driver hiccup, parse error ...
            self.errors += 1
            self._failing += 1
            self.last_error = f"{type(e).__name__}: {e}"
            if self._failing >= MAX_ERRORS:
                self.off = f"stopped after {self._failing} failed polls ({self.last_error})"
                self.reader = None
                self._safely(reader.close)
            return
        t = self.clock() - self._t0
        with self._lock:
            self._failing = 0
            self.polls += 1
            for row in rows:
                self.gpus[row["gpu"]] = row
                self.samples.append((t, row["gpu"], row["util"], row["mem_used"]))

    # -- results --------------------------------------------------------------------------------
    def summary(self) -> dict | None:
        """Per GPU: samples, mean and max utilisation %, peak MiB used, MiB total; None when
        the GPU side never ran (no GPU)."""
        if self.source is None:
            return None
        with self._lock:
            samples, gpus = list(self.samples), dict(self.gpus)
        per = []
        for g in sorted(gpus):
            utils = [u for t, i, u, m in samples if i == g and u is not None]
            mems = [m for t, i, u, m in samples if i == g and m is not None]
            per.append({"gpu": g, "name": gpus[g]["name"],
                        "samples": sum(1 for t, i, u, m in samples if i == g),
                        "util_mean": statistics.fmean(utils) if utils else None,
                        "util_max": max(utils) if utils else None,
                        "mem_peak_mib": max(mems) if mems else None,
                        "mem_total_mib": gpus[g]["mem_total"]})
        end = self._t_end if self._stopped else self.clock()
        return {"source": self.source, "interval_s": self.interval,
                "duration_s": end - self._t0, "polls": self.polls, "errors": self.errors,
                "last_error": self.last_error, "off": self.off, "gpus": per}

    def format_summary(self) -> str:
        return format_summary(self.summary()) if self.source else self.off_line()

    def off_line(self) -> str:
        return f"GPU panel off: {self.off or 'not started'}"

    # -- drawing --------------------------------------------------------------------------------
    def gpu_line(self) -> str:
        """``gpu 0 87% 40.3/79.6 GiB | gpu 1 ...``: the latest reading, one line."""
        with self._lock:
            rows = [self.gpus[g] for g in sorted(self.gpus)]
        if not rows:
            return self.off_line() if self.off else "GPU panel: waiting for the first reading"
        return " | ".join(f"gpu {r['gpu']} {_pct(r['util'])} {_gib(r['mem_used'])}/"
                          f"{_gib(r['mem_total'])} GiB" for r in rows)

    def text(self, off: bool = True) -> str:
        """The display's plain-text form; ``off=False`` leaves out the panel-off line (a
        terminal printed it once already)."""
        parts = [self.progress.text()] if self.progress is not None else []
        if self.source is not None or (off and self.show_off):
            parts.append(self.gpu_line())
        return "\n".join(parts)

    def html(self) -> str:
        out = [self.progress.html()] if self.progress is not None else []
        with self._lock:
            rows = [self.gpus[g] for g in sorted(self.gpus)]
        if rows:
            cells = "".join(
                f"<tr><td>gpu {r['gpu']}</td><td>{html.escape(r['name'])}</td>"
                f"<td><progress value='{r['util'] or 0:.0f}' max='100' style='width:8em'>"
                f"</progress> {_pct(r['util'])}</td>"
                f"<td><progress value='{r['mem_used'] or 0:.0f}' "
                f"max='{r['mem_total'] or 1:.0f}' style='width:8em'></progress> "
                f"{_gib(r['mem_used'])} / {_gib(r['mem_total'])} GiB</td></tr>" for r in rows)
            out.append(f"<table style='margin:2px 0'><tr><th>GPU</th><th>name</th>"
                       f"<th>utilisation</th><th>memory</th></tr>{cells}</table>")
        elif self.source is not None or self.show_off:
            out.append(f"<div style='color:#777'>{html.escape(self.gpu_line())}</div>")
        return "".join(out)

    def _bundle(self) -> dict:
        return {"text/plain": self.text(), "text/html": f"<div>{self.html()}</div>"}

    def _display(self) -> None:
        from IPython.display import display

        self._drawn = self._bundle()
        self._handle = display(self._drawn, raw=True, display_id=True)

    def _draw(self, final: bool) -> None:
        if self.notebook:
            bundle = self._bundle()
            if self._handle is not None and bundle != self._drawn:
                self._drawn = bundle
                self._handle.update(bundle, raw=True)
        elif self.source is not None or self.progress is not None:
            now = self.clock()
            if final or now - self._last_line >= self.line_every:
                self._last_line = now
                self._print(" | ".join(self.text(off=False).splitlines()))

    def _print(self, line: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(line + "\n")
        stream.flush()


def format_summary(s: dict) -> str:
    """:meth:`GpuPanel.summary` as a few lines: mean/max utilisation, peak memory per GPU."""
    lines = [f"GPU panel ({s['source']}, every {s['interval_s']:g} s): {s['polls']} polls over "
             f"{s['duration_s']:.1f} s" + (f", {s['errors']} failed" if s["errors"] else ""),
             f"{'gpu':>3} {'name':<24} {'util mean':>9} {'max':>5} {'peak / total GiB':>17}"]
    for g in s["gpus"]:
        lines.append(f"{g['gpu']:>3} {g['name'][:24]:<24} {_pct(g['util_mean']):>9} "
                     f"{_pct(g['util_max']):>5} {_gib(g['mem_peak_mib']):>8} / "
                     f"{_gib(g['mem_total_mib'])}")
    if s["off"]:
        lines.append(f"note: {s['off']}")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _gib(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024:.1f}"
