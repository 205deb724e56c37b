"""Every rank's output, live: per-rank log files -> a notebook pane or labelled terminal lines.

Ranks write straight into files (their fd 1 and 2 are redirected by the launcher), so C-level
output -- NCCL_DEBUG lines, ``os.write(1, ...)``, printf from an extension -- is caught as well as
Python prints, and a rank printing 100 MB never blocks on a pipe. The parent reads what is new
in each file on every tick of its wait loop and shows it:

* in a Jupyter kernel with ipywidgets: one pane per rank (``PanesSink``);
* elsewhere (terminal, nbclient/nbgrader execution): lines prefixed ``[rank N]`` (``LinesSink``).

``DTLAB_OUTPUT=panes|lines|none`` overrides the choice. What is shown is capped per rank
(``DTLAB_DISPLAY_LIMIT`` characters, default 200k); the full text is always in the results.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Callable

DEFAULT_DISPLAY_LIMIT = 200_000
READ_CHUNK = 1 << 20  # per file per tick, so one chatty rank cannot starve the wait loop


class FileTail:
    """Incremental reader of a file another process is appending to."""

    def __init__(self, path: str, start: int = 0):
        self.path = path
        self.pos = start
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_new(self, limit: int | None = READ_CHUNK, until: int | None = None) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                n = -1 if limit is None else limit
                if until is not None:
                    n = max(0, until - self.pos) if n < 0 else max(0, min(n, until - self.pos))
                data = f.read(n) if n != 0 else b""
        except FileNotFoundError:
            return ""
        self.pos += len(data)
        return self._decoder.decode(data)

    def skip_to_end(self) -> None:
        try:
            self.pos = os.path.getsize(self.path)
        except FileNotFoundError:
            pass


def read_range(path: str, start: int = 0, end: int | None = None) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(-1 if end is None else max(0, end - start))
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", "replace")


# --- sinks -------------------------------------------------------------------------------------

class LinesSink:
    """``[rank N] text`` lines on the parent's stdout (rank stdout) and stderr (rank stderr)."""

    def __init__(self, out=None, err=None):
        self._out = out
        self._err = err
        self._partial: dict[tuple[int, str], str] = {}

    def start(self, ranks: list[int], labels: dict[int, str]) -> None:
        self._labels = labels

    def write(self, rank: int, stream: str, text: str) -> None:
        key = (rank, stream)
        buf = self._partial.get(key, "") + text
        *lines, rest = buf.split("\n")
        self._partial[key] = rest
        if lines:
            self._emit(rank, stream, lines)

    def _emit(self, rank: int, stream: str, lines: list[str]) -> None:
        dest = (self._err or sys.stderr) if stream == "err" else (self._out or sys.stdout)
        prefix = f"[{self._labels.get(rank, f'rank {rank}')}] "
        dest.write("".join(prefix + ln + "\n" for ln in lines))
        dest.flush()

    def close(self) -> None:
        for (rank, stream), rest in sorted(self._partial.items()):
            if rest:
                self._emit(rank, stream, [rest])
        self._partial.clear()


class PanesSink:
    """One ipywidgets Output pane per rank, side by side (up to 4 a row)."""

    def __init__(self):
        import ipywidgets as w

        self._w = w
        self.panes: dict[int, object] = {}

    def start(self, ranks: list[int], labels: dict[int, str]) -> None:
        from IPython.display import display

        w = self._w
        boxes = []
        for r in ranks:
            out = w.Output(layout=w.Layout(max_height="320px", overflow="auto",
                                           border="1px solid #ccc", padding="2px 6px"))
            self.panes[r] = out
            boxes.append(w.VBox([w.HTML(f"<b>{labels.get(r, f'rank {r}')}</b>"), out],
                                layout=w.Layout(width="100%")))
        cols = min(len(boxes), 4)
        self.widget = w.GridBox(boxes, layout=w.Layout(
            grid_template_columns=f"repeat({cols}, minmax(0, 1fr))", grid_gap="6px"))
        display(self.widget)

    def write(self, rank: int, stream: str, text: str) -> None:
        pane = self.panes.get(rank)
        if pane is None:
            return
        if stream == "err":
            pane.append_stderr(text)
        else:
            pane.append_stdout(text)

    def close(self) -> None:
        pass


class NullSink:
    def start(self, ranks, labels):
        pass

    def write(self, rank, stream, text):
        pass

    def close(self):
        pass


def in_notebook_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets and in-place displays work)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def choose_sink(mode: str | None = None):
    """The sink for this process: ``panes`` in a notebook kernel, ``lines`` elsewhere."""
    mode = mode or os.environ.get("DTLAB_OUTPUT", "auto")
    if mode == "none":
        return NullSink()
    if mode == "auto":
        grading = bool(os.environ.get("NBGRADER_EXECUTION"))
        mode = "panes" if in_notebook_kernel() and not grading else "lines"
    if mode == "panes":
        try:
            return PanesSink()
        except ImportError:
            pass
    return LinesSink()


class OutputPump:
    """Moves new output of every rank's stdout/stderr files into a sink, with a display cap."""

    def __init__(self, files: dict[int, tuple[str, str]], sink, labels: dict[int, str] | None = None,
                 starts: dict[int, tuple[int, int]] | None = None,
                 display_limit: int | None = None):
        self.sink = sink
        self.limit = display_limit if display_limit is not None else int(
            os.environ.get("DTLAB_DISPLAY_LIMIT", DEFAULT_DISPLAY_LIMIT))
        starts = starts or {}
        self.tails: dict[tuple[int, str], FileTail] = {}
        for r, (out, err) in files.items():
            so, se = starts.get(r, (0, 0))
            self.tails[(r, "out")] = FileTail(out, so)
            self.tails[(r, "err")] = FileTail(err, se)
        self.shown: dict[int, int] = dict.fromkeys(files, 0)
        self._capped: set[int] = set()
        sink.start(sorted(files), labels or {})

    def pump(self, until: dict[int, tuple[int, int]] | None = None,
             on_text: Callable[[int, str, str], None] | None = None) -> None:
        """Show what is new; ``until`` bounds each file (end offsets of the current command)."""
        for (r, stream), tail in self.tails.items():
            end = None
            if until and r in until:
                end = until[r][0 if stream == "out" else 1]
            if r in self._capped:
                if end is None:
                    tail.skip_to_end()
                else:
                    tail.pos = max(tail.pos, end)
                continue
            text = tail.read_new(until=end)
            if not text:
                continue
            if on_text:
                on_text(r, stream, text)
            room = self.limit - self.shown[r]
            if len(text) > room:
                self.sink.write(r, stream, text[:max(room, 0)])
                self.sink.write(r, "err", f"\n[dtlab: display limit of {self.limit} characters "
                                          f"reached for rank {r}; the full output is in the "
                                          f"results (.stdout / .stderr)]\n")
                self._capped.add(r)
                self.shown[r] = self.limit
            else:
                self.sink.write(r, stream, text)
                self.shown[r] += len(text)

    def close(self) -> None:
        self.sink.close()
