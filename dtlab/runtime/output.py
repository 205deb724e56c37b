"""Every rank's output, live: per-rank log files -> a notebook pane or labelled terminal lines.

Ranks write straight into files (their fd 1 and 2 are redirected by the launcher), so C-level
output -- NCCL_DEBUG lines, ``os.write(1, ...)``, printf from an extension -- is caught as well as
Python prints, and a rank printing 100 MB never blocks on a pipe. The parent reads what is new
in each file on every tick of its wait loop and shows it:

* in a Jupyter kernel with ipywidgets: live panes, one per rank that printed, replaced by a
  static HTML + text copy when the command ends, so the saved notebook keeps it (``PanesSink``);
* elsewhere (terminal, nbclient/nbgrader execution): lines prefixed ``[rank N]`` (``LinesSink``).

``DTLAB_OUTPUT=panes|lines|none`` overrides the choice. What is shown is capped per rank
(``DTLAB_DISPLAY_LIMIT`` characters, default 200k); the full text is always in the results.
"""

from __future__ import annotations

import codecs
import html
import os
import sys
from typing import Callable

from .transcript import (WIDE_LINE, Transcript, arrange, no_output_line, static_html,  # noqa: F401
                         static_text)

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
    """Live per-rank panes (ipywidgets) that leave a static copy in the notebook when they close.

    Live, a pane per rank that has printed, filled as the rank writes. On ``close()`` the display
    is replaced in place (same ``display_id``) by plain HTML of the same layout plus a
    ``[rank N] line`` text fallback, and the widgets are closed: widget state is not saved with a
    notebook, so without this a reopened notebook, a submission and its feedback would show
    "Error displaying widget: model not found" instead of what the ranks printed.

    Layout (``arrange``), chosen for a learner reading a run, live and in the saved copy alike:

    * a rank that printed nothing gets no box, only a line ``ranks 1, 2: no output``;
    * one rank printing (rank 0's nccl-tests table) takes the full width;
    * two ranks with short lines sit side by side, which makes them easy to compare;
    * anything else -- a line wider than ``WIDE_LINE`` characters (a table, a traceback) or 3+
      ranks printing -- stacks the panes full-width, one per rank: columns narrower than half a
      notebook cut every line, and a row of small boxes hides most of each;
    * a line wider than its pane wraps (``white-space: pre-wrap``, breaking long words too): a
      learner sees all of an error message without scrolling sideways, and a table that fits
      keeps its columns;
    * a pane grows with its text up to a cap (32em alone, 24em side by side, 18em stacked) and
      then follows the tail (``flex-direction: column-reverse`` keeps the scroll at the bottom,
      with no script), because the last lines -- the result, the error, the bandwidth summary --
      are the ones to see; scroll up for the start.

    Nothing is displayed until a rank prints, so a cell whose ranks are silent shows nothing.
    """

    def __init__(self):
        import ipywidgets as w

        self._w = w
        self.panes: dict[int, object] = {}
        self.widget = None
        self._handle = None
        self._boxes: dict[int, object] = {}
        self._ranks: list[int] = []
        self._labels: dict[int, str] = {}
        self.transcripts: dict[int, Transcript] = {}

    def start(self, ranks: list[int], labels: dict[int, str]) -> None:
        self._ranks, self._labels = list(ranks), labels
        self.transcripts = {r: Transcript() for r in ranks}

    def write(self, rank: int, stream: str, text: str) -> None:
        t = self.transcripts.get(rank)
        if t is None or not text:
            return
        if self.widget is None:
            self._show()
        before = (bool(t.chunks), t.widest > WIDE_LINE)
        t.add(stream, text)
        pane = self.panes[rank]
        if stream == "err":
            pane.append_stderr(text)
        else:
            pane.append_stdout(text)
        if (bool(t.chunks), t.widest > WIDE_LINE) != before:
            self._arrange()

    def close(self) -> None:
        """Replace the live panes by their static copy (idempotent)."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        handle.update({"text/html": static_html(self.transcripts, self._ranks, self._labels),
                       "text/plain": static_text(self.transcripts, self._ranks, self._labels)},
                      raw=True)
        for box in self._boxes.values():  # silent ranks' boxes are not in the grid
            _close_widget(box)
        _close_widget(self.widget)

    def _show(self) -> None:
        from IPython.display import display

        w = self._w
        self._boxes = {}
        for r in self._ranks:
            out = w.Output(layout=w.Layout(display="flex", flex_flow="column-reverse",
                                           overflow="auto", border="1px solid #ccc",
                                           padding="2px 6px", max_height="32em"))
            out.add_class("dtlab-pane")
            self.panes[r] = out
            title = w.HTML(f"<b>{html.escape(self._labels.get(r, f'rank {r}'))}</b>")
            self._boxes[r] = w.VBox([title, out], layout=w.Layout(min_width="0"))
        self._grid = w.GridBox([], layout=w.Layout(grid_gap="6px"))
        self._silent = w.HTML()
        css = w.HTML(LIVE_CSS, layout=w.Layout(display="none"))  # a <style> applies unseen
        self.widget = w.VBox([css, self._grid, self._silent])
        self.widget.add_class("dtlab-panes")
        bundle = self.widget._repr_mimebundle_()
        bundle["text/plain"] = ("dtlab: live per-rank output; a static copy replaces it when "
                                "the cell ends")
        self._handle = display(bundle, raw=True, display_id=True)

    def _arrange(self) -> None:
        printed = [r for r in self._ranks if self.transcripts[r].chunks]
        cols, height = arrange(len(printed), max(self.transcripts[r].widest for r in printed))
        self._grid.layout.grid_template_columns = f"repeat({cols}, minmax(0, 1fr))"
        for r in printed:
            self.panes[r].layout.max_height = height
        self._grid.children = [self._boxes[r] for r in printed]
        silent = [r for r in self._ranks if r not in printed]
        self._silent.value = (f'<span style="color:#777">{no_output_line(silent, "yet")}</span>'
                              if silent else "")


# Live panes only: ipywidgets' HTML is inserted as is, so this <style> applies (the static copy
# uses inline styles, which survive JupyterLab's sanitizer in untrusted notebooks).
LIVE_CSS = """<style>
.dtlab-panes .dtlab-pane .jp-OutputArea, .dtlab-panes .dtlab-pane .jp-OutputArea-child,
.dtlab-panes .dtlab-pane .jp-OutputArea-output { overflow: visible; }  /* the pane scrolls */
.dtlab-panes .dtlab-pane .jp-OutputArea-output pre {
  white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; overflow: visible; }
</style>"""

def _close_widget(widget) -> None:
    """Close a widget, its children and their layout and style models: the kernel and the
    frontend then hold none of them (nor a saved notebook's widget state)."""
    for child in getattr(widget, "children", ()):
        _close_widget(child)
    parts = [getattr(widget, name, None) for name in ("layout", "style")]
    widget.close()
    for part in parts:
        if part is not None:
            part.close()


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
