"""What a submission's own code does that no answer needs: reading the interpreter's frames and
code, rewriting the grader's modules, reaching other processes or code that runs later (threads,
exit handlers, .pth files). Flags for the instructor, beside the autograded score.

A test cell runs in the learner's kernel, after the learner's cells. :func:`dtlab.course.isolated`
keeps the expected answers out of the learner's function, but a learner cell that first rewrites
``course.isolated`` (or ``course.plain``, or ``refused``) and then reads the test's variables
through ``sys._getframe`` defeats any check made in that kernel. Nothing in the kernel can stop
that; reading the submission can see it::

    >>> from dtlab.course.review import flags
    >>> flags("import sys\\ncourse.isolated = lambda f, **k: f\\nx = sys._getframe(1).f_locals")
    ['line 2: rebinds course.isolated (the grader)', 'line 3: reads interpreter frames (_getframe)', 'line 3: reads interpreter frames (f_locals)']

``dtlab course autograde`` prints each flagged submission's flags after its score ("review:"),
and :class:`dtlab.course.Graded` carries them; the score of a flagged submission is what the
tests said, for a person to confirm. The patterns are about the interpreter and the grader, not
about answers: no exercise's solution uses them.
"""

from __future__ import annotations

import ast

# attribute or function names that reach the caller's frames, code or the interpreter's lists
_FRAMES = {"_getframe": "reads interpreter frames", "currentframe": "reads interpreter frames",
           "f_locals": "reads interpreter frames", "f_globals": "reads interpreter frames",
           "f_back": "reads interpreter frames", "tb_frame": "reads interpreter frames",
           "gi_frame": "reads interpreter frames", "_current_frames": "reads interpreter frames",
           "settrace": "traces the interpreter", "setprofile": "traces the interpreter",
           "addaudithook": "hooks the interpreter", "co_consts": "reads compiled code",
           "__code__": "reads compiled code", "get_referrers": "walks the garbage collector",
           "get_objects": "walks the garbage collector", "reload": "re-imports a module"}
_GRADER = ("course", "dtlab", "checks", "isolate", "guard", "graded")
# what reaches past the call being graded: other processes (the grader's own runs), code that
# runs later or elsewhere (a thread left behind, exit handlers, .pth files that every later
# Python process executes)
_REACH = {"Thread": "starts a thread that outlives the call", "start_new_thread":
          "starts a thread that outlives the call", "getsitepackages":
          "locates site-packages (where .pth files run in every later process)",
          "getusersitepackages": "locates site-packages (where .pth files run in every later "
          "process)", "get_paths": "locates the interpreter's install paths"}
_STRINGS = {"/proc": "reads other processes (/proc)", ".pth": "names a .pth file (code every "
            "later Python process runs)", "site-packages": "names site-packages",
            "purelib": "names the interpreter's install paths"}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def flags(source: str) -> list[str]:
    """Flags for one cell's source ('line N: what'); [] for code that does none of it, or that
    does not parse (IPython magics and the like)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr in _FRAMES:
            out.append((line, f"{_FRAMES[node.attr]} ({node.attr})"))
        elif isinstance(node, (ast.Attribute, ast.Name)) and \
                (node.attr if isinstance(node, ast.Attribute) else node.id) in _REACH:
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            out.append((line, f"{_REACH[name]} ({name})"))
        elif isinstance(node, ast.Attribute) and node.attr == "register" and \
                _root(node) == "atexit":
            out.append((line, "runs code at interpreter exit (atexit)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for text, what in _STRINGS.items():
                if text in node.value:
                    out.append((line, what))
        elif isinstance(node, ast.Name) and node.id in ("_getframe", "currentframe"):
            out.append((line, f"reads interpreter frames ({node.id})"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    root = _root(t)
                    if root in _GRADER:
                        out.append((line, f"rebinds {_dotted(t) or root} (the grader)"))
                    elif isinstance(t, ast.Subscript) and _dotted(t.value) == "sys.modules":
                        out.append((line, "replaces a module in sys.modules"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("setattr", "delattr") and node.args \
                and _root(node.args[0]) in _GRADER:
            out.append((line, f"rebinds an attribute of {_dotted(node.args[0])} (the grader)"))
    return [f"line {n}: {what}" for n, what in sorted(set(out))]


def notebook_flags(path: str) -> list[str]:
    """Flags for every code cell of a notebook: 'cell ID line N: what'. The course's own cells
    raise none (tests/grading/test_review.py), so every flag is the learner's."""
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # not a notebook: nbgrader says so; there is nothing to review
        return []
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"#{i}"
        out += [f"cell {name} {f}" for f in flags(cell.source)]
    return out
