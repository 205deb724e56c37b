"""Progress of a tuning sweep: settings done out of all, elapsed time and an ETA.

In a terminal: a header, then one line per setting as it completes. In a notebook: one display
that updates in place (a bar, the lines so far, the setting now running) -- plain text and
HTML, no widget needed, so it also survives nbconvert/nbgrader execution.

>>> import io
>>> p = Progress(2, "all_reduce 1K..4K", stream=io.StringIO(), notebook=False)
>>> p.start(0, "default"); p.done(0, "default", "ok, peak busbw 1.00 GB/s at 4K")
>>> p.stream.getvalue().splitlines()[1].startswith("[1/2] default")
True
"""

from __future__ import annotations

import html
import sys
import time
from typing import TextIO


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a display can update in place)."""
    from ..runtime.output import in_notebook_kernel

    return in_notebook_kernel()


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class Progress:
    """``start(i, label)`` before setting i runs, ``done(i, label, summary)`` after it ends."""

    def __init__(self, total: int, what: str, stream: TextIO | None = None,
                 notebook: bool | None = None):
        self.total, self.what = total, what
        self.stream = stream if stream is not None else sys.stdout
        self.notebook = in_notebook() if notebook is None else notebook
        self.t0 = time.monotonic()
        self.lines: list[str] = []
        self.running: str | None = None
        self.handle = None
        head = self.header()
        if self.notebook:
            from IPython.display import display

            self.handle = display(self._bundle(), raw=True, display_id=True)
        else:
            print(head, file=self.stream, flush=True)

    def header(self) -> str:
        return (f"dtlab.tuning: {self.total} setting(s) | {self.what} | each setting in fresh "
                f"ranks")

    def eta(self) -> str:
        done = len(self.lines)
        if not done:
            return "after the first setting"
        per = (time.monotonic() - self.t0) / done
        return _clock(per * (self.total - done)) if done < self.total else "done"

    def status(self) -> str:
        return (f"{len(self.lines)}/{self.total} settings | elapsed "
                f"{_clock(time.monotonic() - self.t0)} | ETA {self.eta()}")

    def start(self, index: int, label: str) -> None:
        self.running, self.t_setting = label, time.monotonic()
        self._update()

    def done(self, index: int, label: str, summary: str) -> None:
        took = time.monotonic() - getattr(self, "t_setting", self.t0)
        line = f"[{len(self.lines) + 1}/{self.total}] {label} | {summary} | {took:.1f} s"
        self.lines.append(line)
        self.running = None
        if self.notebook:
            self._update()
        else:
            print(f"{line} | {self.status()}", file=self.stream, flush=True)

    def close(self) -> None:
        self.running = None
        self._update()

    # --- notebook display -----------------------------------------------------------------------
    def _text(self) -> str:
        width = 30
        filled = round(width * len(self.lines) / max(self.total, 1))
        out = [self.header(), f"[{'#' * filled}{'-' * (width - filled)}] {self.status()}"]
        out += self.lines
        if self.running:
            out.append(f"running: {self.running} ...")
        return "\n".join(out)

    def _bundle(self) -> dict:
        body = html.escape("\n".join(self._text().splitlines()[2:]))
        bar = (f"<progress value='{len(self.lines)}' max='{max(self.total, 1)}' "
               f"style='width:18em'></progress> {html.escape(self.status())}")
        return {"text/plain": self._text(),
                "text/html": f"<div><b>{html.escape(self.header())}</b><br>{bar}"
                             f"<pre style='margin:2px 0'>{body}</pre></div>"}

    def _update(self) -> None:
        if self.handle is not None:
            self.handle.update(self._bundle(), raw=True)
