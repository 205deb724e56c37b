"""Where a test cell runs: in a learner's JupyterLab, or in the grader's own kernel.

While ``dtlab course grade`` runs a notebook's test cells, its kernel has ``DTLAB_GRADING`` set
to a JSON file (made by :mod:`dtlab.course.grade`, readable by the grader only) that says what
the submission's solution cells hold and where its sandbox is. The learner's functions are
not in that kernel at all: :func:`dtlab.course.answer` and :class:`dtlab.course.Ranks` rebuild
them from the source text, in sandboxes (:mod:`dtlab.runtime.sandbox`).
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import asdict, dataclass, field

ENV = "DTLAB_GRADING"


@dataclass
class Context:
    """One submission of one assignment, as its grading kernel sees it."""

    assignment: str
    # the submission's code cells in order: {"source", "solution", "grade_id", "trusted"};
    # trusted: a locked or test cell, as the course source has it (restored by grade)
    cells: list[dict]
    work: str          # the grader's own folder for this notebook (never in a sandbox)
    isolate: bool = True            # False: --unsafe-no-sandbox
    cgroup: dict | None = None      # {"version", "dirs"}: the submission's cgroup, made by grade
    limits: dict = field(default_factory=dict)   # dtlab.runtime.sandbox.Limits fields
    cpu_s: float = 60.0             # default CPU budget of one call of a learner's function
    source: list[dict] = field(default_factory=list)  # the course source's code cells, likewise

    def save(self, path: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)

    def solution_of(self, name: str) -> tuple[str, list[str]]:
        """(the solution cell that defines ``name``, the import statements of the code cells
        above it). A learner's function is rebuilt from these alone when graded."""
        for i, cell in enumerate(self.cells):
            if cell["solution"] and _defines(cell["source"], name):
                return cell["source"], [s for c in self.cells[:i] for s in imports(c["source"])]
        raise AssertionError(f"no solution cell of this notebook defines {name}(): write it in "
                             f"the cell the exercise gives for it")


    def script_of(self, filename: str) -> str:
        """The script a solution cell writes with ``%%writefile filename`` (that line dropped)."""
        for cell in self.cells:
            first, _, rest = cell["source"].lstrip().partition("\n")
            if cell["solution"] and first.split()[:2] == ["%%writefile", filename]:
                return rest
        raise AssertionError(f"no solution cell of this notebook starts with %%writefile "
                             f"{filename}: write the script in the cell the exercise gives for it")

    def trusted_cell(self, grade_id: str) -> tuple[str, list[str]]:
        """(a locked cell of the course source, the imports of the source's cells above it)."""
        for i, cell in enumerate(self.source):
            if cell.get("grade_id") == grade_id and cell.get("trusted"):
                above = [s for c in self.source[:i] for s in imports(c["source"])]
                return cell["source"], above
        raise KeyError(f"no locked cell {grade_id!r} in {self.assignment}")


    def definitions(self, names: tuple[str, ...]) -> list[str]:
        """The course source's locked cells that define any of ``names`` (helpers a learner is
        told to use), in notebook order."""
        out = []
        for cell in self.source:
            if cell.get("trusted") and any(_defines(cell["source"], n) for n in names):
                out.append(cell["source"])
        missing = [n for n in names if not any(_defines(src, n) for src in out)]
        if missing:
            raise KeyError(f"no locked cell of {self.assignment} defines {', '.join(missing)}")
        return out


def cell(grade_id: str) -> dict:
    """The names a locked cell of this notebook defines (``program`` of 00's predict): in
    JupyterLab the kernel's own, where the cell ran; graded, from the course source's cell, run
    here (it is the course's code, not the learner's).

    >>> course.cell("predict_program")["program"]      # doctest: +SKIP
    <function program at 0x...>
    """
    ctx = current()
    if ctx is None:
        import __main__

        return vars(__main__)
    source, imports_above = ctx.trusted_cell(grade_id)
    ns: dict = {"__name__": "__notebook__"}
    for stmt in imports_above:
        exec(compile(stmt, f"<imports above {grade_id}>", "exec"), ns)
    exec(compile(_python(source), f"<{grade_id}>", "exec"), ns)
    return ns


def current() -> Context | None:
    """The grading context of this process, or None in a learner's JupyterLab."""
    path = os.environ.get(ENV)
    if not path:
        return None
    with open(path) as f:
        return Context(**json.load(f))


def _defines(src: str, name: str) -> bool:
    try:
        tree = ast.parse(_python(src))
    except SyntaxError:  # still this cell if it says so; the sandbox reports the error
        return re.search(rf"^(async\s+)?def\s+{re.escape(name)}\s*\(", src, re.M) is not None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign))
               and name in _names(n) for n in tree.body)


def _names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {node.name}


def _python(src: str) -> str:
    from .learner import _without_magics

    return _without_magics(src)


def imports(src: str) -> list[str]:
    """The top-level import statements of a cell, as source.

    >>> imports("import os\\nx = 1\\nfrom re import (sub,\\n  match)\\n%time y = 2")
    ['import os', 'from re import sub, match']
    """
    try:
        tree = ast.parse(_python(src))
    except SyntaxError:
        return []
    return [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.ImportFrom) and n.level)]
