"""Pass 0: turn what the caller gave into named texts.

``parse`` takes one path, a list of paths, a directory (every file in it, as
``NCCL_DEBUG_FILE=dir/nccl.%h.%p`` leaves them), or the log text itself (a string with a
newline in it, e.g. captured torchrun output).

>>> [(s.name, s.explicit) for s in read_sources("h:1:1 [0] NCCL INFO NCCL version 2.28.9\\n")]
[('<text>', True)]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

PathOrText = Union[str, "os.PathLike[str]"]
Sources = Union[PathOrText, list, tuple]


@dataclass
class Source:
    name: str
    text: str
    explicit: bool  # named by the caller (must be an NCCL log) or found in a directory (may not)


def _looks_like_text(s: str) -> bool:
    return "\n" in s or " NCCL " in s


def _files_under(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(d).parts))


def read_sources(src: Sources) -> list[Source]:
    if isinstance(src, (list, tuple)):
        return [s for item in src for s in read_sources(item)]
    if isinstance(src, str) and _looks_like_text(src):
        return [Source("<text>", src, True)]
    path = Path(src)
    if path.is_dir():
        return [Source(str(p), p.read_text(errors="replace"), False) for p in _files_under(path)]
    if not path.exists():
        raise FileNotFoundError(f"no such NCCL log file or directory: {path}")
    return [Source(str(path), path.read_text(errors="replace"), True)]


def numbered_lines(sources: list[Source]):
    """(source name, 1-based line number, line) for every line of every source, in order."""
    for s in sources:
        for i, line in enumerate(s.text.splitlines(), 1):
            yield s.name, i, line
