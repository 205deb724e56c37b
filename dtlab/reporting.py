"""One shape for what a command reports: an object with ``to_dict()`` (plain JSON data) and
``render()`` (the text a person reads), and one function, :func:`emit`, that prints either.

Every reporting command of dtlab/cli.py ends in ``emit(report, args.json)``; a notebook shows
``report.render()`` or reads ``report.to_dict()``. A leaf: it imports nothing from dtlab.
"""

from __future__ import annotations

import json
import sys
from typing import Protocol, runtime_checkable


@runtime_checkable
class Report(Protocol):
    def to_dict(self) -> dict | list:
        """Plain data (dicts, lists, str, numbers, None): what ``--json`` prints."""

    def render(self) -> str:
        """The text a person reads: what the command prints without ``--json``."""


def emit(report: Report, as_json: bool = False, file=None) -> None:
    """Print ``report`` as JSON (``--json``) or as text, to ``file`` (default stdout)."""
    if not isinstance(report, Report):
        raise TypeError(f"{type(report).__name__} has no to_dict() and render(): it is not a "
                        f"report (dtlab.reporting.Report)")
    print(json.dumps(report.to_dict(), indent=1, default=str) if as_json else report.render(),
          file=file or sys.stdout)


class Data(dict):
    """A result that is plain data -- a dict, JSON as it is, indexable as before -- and a report:
    a subclass writes ``render()`` (``class Summary(Data): def render(self): ...``)."""

    def to_dict(self) -> dict:
        return dict(self)

    def render(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no render()")


class Rows(list):
    """A result that is a list of plain rows and a report (``render()`` from a subclass)."""

    def to_dict(self) -> list:
        return list(self)

    def render(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no render()")


class Plain:
    """Data a section already returns as plain dicts or lists, with the text its own formatter
    writes for it: a report without a class of its own (``Plain(rows, "\\n".join(map(line,
    rows)))``)."""

    def __init__(self, data, text: str):
        self.data, self.text = data, text

    def to_dict(self):
        return self.data

    def render(self) -> str:
        return self.text


class Several:
    """Reports one command makes at once (one per setting), as one: a list of their dicts, and
    their texts one after the other."""

    def __init__(self, reports, sep: str = "\n"):
        self.reports, self.sep = list(reports), sep

    def to_dict(self) -> list:
        return [r.to_dict() for r in self.reports]

    def render(self) -> str:
        return self.sep.join(r.render() for r in self.reports)
