"""The saved copy of what each rank showed: when a notebook's live panes close, they are
replaced by plain HTML (inline styles, no script, no widget) and ``[rank N]`` text, so a saved
notebook, a submission and its feedback keep every rank's output (:mod:`.output`'s PanesSink).

Layout rules (shared by the live panes and the copy): two ranks with short lines side by side;
one rank that printed, wide lines, or three or more ranks stacked full-width; a rank that printed
nothing gets no box, only one line that names it.
"""

from __future__ import annotations

import html
import re

WIDE_LINE = 72       # characters: about half of a JupyterLab notebook's width in code font
STATIC_KEEP = 20_000  # characters per rank in the saved copy (a quarter from the start, the rest
#                      from the end): the saved notebook stays small; results keep everything
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a terminal control sequence (colour, cursor)


class Transcript:
    """What one rank showed, in order: (stream, text) chunks and its widest line so far."""

    def __init__(self):
        self.chunks: list[tuple[str, str]] = []
        self.widest = 0
        self._line = 0  # length of the unfinished last line

    def add(self, stream: str, text: str) -> None:
        self.chunks.append((stream, text))
        first, *rest = text.split("\n")
        self._line += len(first)
        self.widest = max(self.widest, self._line, *map(len, rest))
        if rest:
            self._line = len(rest[-1])

    def kept(self, keep: int = STATIC_KEEP) -> list[tuple[str, str]]:
        """Chunks merged by stream; past ``keep`` characters the middle is cut out, with a note
        (stream ``"note"``) where: the saved notebook stays small, the results keep everything."""
        merged: list[list[str]] = []
        for stream, text in self.chunks:
            if merged and merged[-1][0] == stream:
                merged[-1][1] += text
            else:
                merged.append([stream, text])
        flat = "".join(t for _, t in merged)
        if len(flat) <= keep:
            return [(s, t) for s, t in merged]
        head, tail = keep // 4, len(flat) - (keep - keep // 4)
        head = _after_newline(flat, head)  # cut at line ends where one is near
        tail = _after_newline(flat, tail)
        out, pos = [], 0
        for stream, text in merged:
            a, b = pos, pos + len(text)
            pos = b
            if a < head:
                out.append((stream, text[:head - a]))
            if b > tail:
                if a <= tail:
                    out.append(("note", f"[dtlab: {tail - head:,} characters not kept in the "
                                        f"saved notebook; all of them are in the results "
                                        f"(.stdout / .stderr)]\n"))
                out.append((stream, text[max(tail - a, 0):]))
        return out


def _after_newline(text: str, i: int, near: int = 400) -> int:
    j = text.find("\n", i, i + near)
    return i if j < 0 else j + 1


def static_html(transcripts: dict[int, Transcript], ranks: list[int],
                labels: dict[int, str]) -> str:
    """The saved copy: the panes' layout in plain HTML with inline styles (no script, no widget)."""
    printed = [r for r in ranks if transcripts[r].chunks]
    silent = [r for r in ranks if r not in printed]
    parts = []
    if printed:
        cols, height = arrange(len(printed), max(transcripts[r].widest for r in printed))
        parts.append(f'<div class="dtlab-output" data-columns="{cols}" style="display:grid; '
                     f'grid-template-columns:repeat({cols}, minmax(0, 1fr)); gap:6px">')
        for r in printed:
            body = "".join(_span(stream, text) for stream, text in transcripts[r].kept())
            parts.append(
                f'<div class="dtlab-rank" data-rank="{r}" style="min-width:0">'
                f'<div style="font-weight:bold; line-height:28px">'  # as tall as the live title
                f'{html.escape(labels.get(r, f"rank {r}"))}</div>'
                f'<div style="display:flex; flex-direction:column-reverse; max-height:{height}; '
                f'overflow:auto; border:1px solid #ccc; padding:2px 6px">'
                f'<pre style="white-space:pre-wrap; overflow-wrap:anywhere; overflow:visible; margin:0">'
                f'{body}</pre></div></div>')
        parts.append("</div>")
    if silent:
        parts.append(f'<div class="dtlab-silent" style="color:#777">{no_output_line(silent)}'
                     f'</div>')
    return "".join(parts)


def _span(stream: str, text: str) -> str:
    text = html.escape(ANSI.sub("", text))
    if stream == "err":
        return f'<span style="background-color:rgba(255, 0, 0, 0.08)">{text}</span>'
    if stream == "note":
        return f'<span style="color:#777; font-style:italic">{text}</span>'
    return text


def static_text(transcripts: dict[int, Transcript], ranks: list[int],
                labels: dict[int, str]) -> str:
    """The saved copy as ``[rank N] line`` text, for viewers without HTML (and for grep)."""
    lines, silent = [], []
    for r in ranks:
        kept = transcripts[r].kept()
        if not kept:
            silent.append(r)
            continue
        prefix = f"[{labels.get(r, f'rank {r}')}] "
        text = ANSI.sub("", "".join(t for _, t in kept))
        lines += [prefix + ln for ln in text.rstrip("\n").split("\n")]
    if silent:
        lines.append(no_output_line(silent))
    return "\n".join(lines)


def arrange(printed: int, widest: int) -> tuple[int, str]:
    """(columns, max height of each pane) for ``printed`` ranks with output, widest line given.

    >>> arrange(2, 40), arrange(2, 130), arrange(1, 130), arrange(4, 20)
    ((2, '24em'), (1, '18em'), (1, '32em'), (1, '18em'))
    """
    if printed == 2 and widest <= WIDE_LINE:
        return 2, "24em"
    return 1, ("32em" if printed <= 1 else "18em")


def no_output_line(ranks: list[int], yet: str = "") -> str:
    """The one line that stands for ranks that printed nothing.

    >>> no_output_line([1, 2]), no_output_line([3], "yet")
    ('ranks 1, 2: no output', 'rank 3: no output yet')
    """
    which = "ranks " if len(ranks) > 1 else "rank "
    return which + ", ".join(map(str, ranks)) + ": no output" + (f" {yet}" if yet else "")
