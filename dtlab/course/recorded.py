"""Recorded-data mode: a GPU-only observation, loaded from ``data/`` and labelled as recorded.

Without GPUs (and always under nbgrader, which grades on gloo/CPU) a cell that needs, say, an
NVLink bandwidth sweep shows the real one captured on a GPU machine instead, and says so on
screen, with the machine and the date, so nobody mistakes it for a measurement of their laptop::

    from dtlab import course
    log = course.recorded("h200x2-nccl-logs/default/vm.1071.log")
    # RECORDED, not measured here: h200x2-nccl-logs/default/vm.1071.log
    #   machine: vm, 32 CPU cores, ... | GPUs: NVIDIA H200, ... | date: 2026-11-26 02:33 | provenance: ...
    log.text          # the file's contents, exactly as captured

Every capture folder under ``data/`` has a README.md (ARCHITECTURE.md, "Contracts") with, among the rest,
one line ``machine: ...`` and one line ``date: ...``, and optionally ``GPUs: ...`` (list
bullets, markdown emphasis and a parenthesis such as ``date (UTC):`` are fine). The README nearest to the file, walking up to ``data/``, is its provenance.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .layout import REPO, CourseError

# "- machine: vm, 32 CPU cores", "**date (UTC)**: 2026-11-26 02:33", "GPUs: 2x NVIDIA H200"
_FIELD = re.compile(r"^[\s>*_`-]*(machine|gpus?|date)[*_`]*\s*(?:\([^)\n]*\))?[*_`]*\s*:"
                    r"[*_`]*\s*(.+?)\s*$", re.I | re.M)


def data_root() -> str:
    """``$DTLAB_DATA`` if set, else ``data/`` at the repository root."""
    return os.path.abspath(os.environ.get("DTLAB_DATA") or os.path.join(REPO, "data"))


@dataclass
class Recorded:
    """One recorded observation: the file's text and where, when and on what it was captured."""

    name: str  # path relative to the data root, as asked for
    path: str
    text: str
    machine: str
    date: str
    provenance: str  # the README.md that describes the capture
    gpus: str = ""

    def banner(self) -> str:
        rel = os.path.relpath(self.provenance, os.path.dirname(data_root()))
        gpus = f" | GPUs: {self.gpus}" if self.gpus else ""
        return (f"RECORDED, not measured here: {self.name}\n"
                f"  machine: {self.machine}{gpus} | date: {self.date} | provenance: {rel}")

    def _repr_markdown_(self) -> str:
        return f"**{self.banner().splitlines()[0]}**  \n{self.banner().splitlines()[1].strip()}"


def _provenance(path: str, root: str) -> str:
    here = os.path.dirname(path)
    while True:
        readme = os.path.join(here, "README.md")
        if os.path.isfile(readme):
            return readme
        if os.path.samefile(here, root) or os.path.dirname(here) == here:
            raise CourseError(
                f"no README.md describes {os.path.relpath(path, root)}: every capture folder "
                f"under {root} needs one (machine, GPUs, versions, date, command; ARCHITECTURE.md).")
        here = os.path.dirname(here)


def recorded(name: str, *, root: str | None = None, show: bool = True) -> Recorded:
    """Load the recorded observation ``data/<name>`` and (``show=True``) print that it is recorded,
    on which machine and when.

    >>> from dtlab import course
    >>> obs = course.recorded("h200x2-nccl-logs/default/vm.1071.log")   # doctest: +SKIP
    RECORDED, not measured here: h200x2-nccl-logs/default/vm.1071.log
      machine: vm, 32 CPU cores, ... | GPUs: NVIDIA H200, ... | date: 2026-11-26 02:33 | ...
    >>> "NCCL INFO" in obs.text                                          # doctest: +SKIP
    True
    """
    root = os.path.abspath(root or data_root())
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + os.sep):
        raise CourseError(f"recorded({name!r}): give a path inside {root}, relative to it.")
    if not os.path.isfile(path):
        have = sorted(os.listdir(root)) if os.path.isdir(root) else []
        raise CourseError(
            f"recorded({name!r}): no such file under {root}"
            + (f" (it holds: {', '.join(have)})." if have else " (the folder is empty or missing; "
               "set DTLAB_DATA if the captures live elsewhere)."))
    readme = _provenance(path, root)
    with open(readme, encoding="utf-8") as f:
        fields: dict[str, str] = {}
        for key, value in _FIELD.findall(f.read()):
            key = "gpus" if key.lower().startswith("gpu") else key.lower()
            fields.setdefault(key, value)  # the first mention is the capture's own
    missing = [k for k in ("machine", "date") if k not in fields]
    if missing:
        raise CourseError(
            f"{readme} does not say {' or '.join(missing)}: add a line "
            + " and a line ".join(f"'{k}: ...'" for k in missing)
            + " so a recorded observation can say where and when it was captured.")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    obs = Recorded(name=name, path=path, text=text, machine=fields["machine"],
                   date=fields["date"], provenance=readme, gpus=fields.get("gpus", ""))
    if show:
        print(obs.banner())
    return obs
