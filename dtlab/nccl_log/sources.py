"""Pass 0: turn what the caller gave into named sources of lines.

``parse`` takes one path, a list of paths, a directory (every file in it, as
``NCCL_DEBUG_FILE=dir/nccl.%h.%p`` leaves them), or the log text itself (a string with a
newline in it, e.g. captured torchrun output).

Files are read line by line, never whole, and a line longer than :data:`MAX_LINE` is skipped
(counted in ``Source.overlong``, shown in the report): NCCL's own lines are a few hundred bytes
(``src/debug.cc`` formats each into a 1-2 KB buffer), so a longer one is someone else's -- a
progress bar redrawn with ``\\r``, a dumped tensor -- and reading it whole cost several times its
size in memory. Only a regular file of at most :data:`MAX_FILE` bytes is read (a FIFO would
block, a device never end, 3 GB take minutes: :mod:`dtlab.paths`); one named explicitly that is
not is refused, one found in a folder skipped.

>>> [(s.name, s.explicit) for s in read_sources("h:1:1 [0] NCCL INFO NCCL version 2.28.9\\n")]
[('<text>', True)]
>>> [line for _, _, line in numbered_lines([Source("<text>", True, text="a\\r\\nb\\n" + "x" * 9)],
...                                        max_line=4)]
['a', 'b']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Union

from ..paths import check_readable, unreadable

PathOrText = Union[str, "os.PathLike[str]"]
Sources = Union[PathOrText, list, tuple]

MAX_LINE = 64 * 1024  # characters (bytes, in files) of one line: 30x NCCL's longest
# bytes of one named file: NCCL_DEBUG_SUBSYS=COLL on a long job writes hundreds of MB per rank;
# streamed at a few MB/s, 1 GiB is minutes of work, and more is not a log to read whole
MAX_FILE = 1 << 30
HINT = "give the log files NCCL_DEBUG_FILE wrote, or a folder of them"


class NotAnNcclLog(ValueError):
    """A file (or text) with no NCCL line in it at all, or one that cannot be read as one."""


@dataclass
class Source:
    name: str
    explicit: bool  # named by the caller (must be an NCCL log) or found in a directory (may not)
    path: str | None = None  # read lazily, line by line ...
    text: str | None = None  # ... or the text itself
    overlong: int = 0  # lines longer than MAX_LINE, skipped (counted while numbered_lines runs)


def _looks_like_text(s: str) -> bool:
    return "\n" in s or " NCCL " in s


def _files_under(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(d).parts))


def read_sources(src: Sources) -> list[Source]:
    """Name the sources; nothing is read yet (:func:`numbered_lines` reads)."""
    if isinstance(src, (list, tuple)):
        return [s for item in src for s in read_sources(item)]
    if isinstance(src, str) and _looks_like_text(src):
        return [Source("<text>", True, text=src)]
    path = Path(src)
    if path.is_dir():  # a file found there that cannot be read is skipped, its name saying why
        return [Source(f"{p} (not read: {why})", False, text="") if (why := unreadable(p, MAX_FILE))
                else Source(str(p), False, path=str(p)) for p in _files_under(path)]
    check_readable(path, HINT, limit=MAX_FILE, error=NotAnNcclLog)
    return [Source(str(path), True, path=str(path))]


def _text_pieces(text: str, limit: int) -> Iterator[str | None]:
    """``text`` cut after each newline; None for a piece longer than ``limit``."""
    pos, end_all = 0, len(text)
    while pos < end_all:
        end = text.find("\n", pos)
        end = end_all if end < 0 else end + 1
        yield text[pos:end] if end - pos <= limit else None
        pos = end


def _file_pieces(path: str, limit: int) -> Iterator[str | None]:
    """The file cut after each newline, at most ``limit`` bytes held at a time; None for a
    longer piece, whose rest is read past in small bites."""
    with open(path, "rb") as f:
        while True:
            piece = f.readline(limit)
            if not piece:
                return
            if len(piece) < limit or piece.endswith(b"\n"):
                yield piece.decode("utf-8", errors="replace")
                continue
            del piece  # overlong: let it go before reading past the rest
            while (rest := f.readline(8192)) and not rest.endswith(b"\n"):
                pass
            yield None


def numbered_lines(sources: list[Source], max_line: int = MAX_LINE):
    """(source name, 1-based line number, line) for every line of every source, in order;
    lines longer than ``max_line`` are skipped and counted in ``source.overlong``."""
    limit = max_line + 1  # room for the newline
    for s in sources:
        pieces = _text_pieces(s.text, limit) if s.text is not None else _file_pieces(s.path, limit)
        n = 0
        for piece in pieces:
            if piece is None:
                n += 1
                s.overlong += 1
                continue
            # str.splitlines' idea of a line (\r, \x0b, \x1c ... too), as before streaming
            for line in piece.splitlines():
                n += 1
                yield s.name, n, line
