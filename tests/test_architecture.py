"""The package's structure drawing (ARCHITECTURE.md), checked: the runtime imports nothing
above it, the vocabulary imports nothing at all, and no two packages or runtime modules import
each other (lazy imports inside functions count: they are dependencies all the same)."""

import ast
import functools
import os

import pytest

import dtlab

ROOT = os.path.dirname(dtlab.__file__)


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel.removesuffix(".__init__")


@functools.cache
def _imports() -> dict[str, set[str]]:
    """{module: every dtlab module it imports, anywhere in its body} (parsed once: ~3 s)."""
    out = {}
    for folder, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            mod = _module_name(path)
            pkg = mod if f == "__init__.py" else mod.rsplit(".", 1)[0]
            deps = set()
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = pkg.split(".")
                        base = base[:len(base) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    names = [target] + [f"{target}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                deps |= {n for n in names if n.startswith("dtlab") and _exists(n)}
            out[mod] = deps - {mod}
    return out


def _exists(name: str) -> bool:
    rel = os.path.join(os.path.dirname(ROOT), *name.split("."))
    return os.path.isdir(rel) or os.path.isfile(rel + ".py")


def _area(mod: str) -> str:
    """dtlab.runtime.pool -> dtlab.runtime; dtlab.cli -> dtlab.cli"""
    return ".".join(mod.split(".")[:2])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found


@pytest.mark.slow
def test_vocab_is_a_leaf():
    assert _imports()["dtlab.vocab"] == set()


def test_paths_and_limits_are_leaves():
    deps = _imports()
    assert deps["dtlab.paths"] == set() and deps["dtlab.limits"] == set()


def test_runtime_imports_nothing_above_it():
    up = {m: sorted(d for d in deps if not (d.startswith("dtlab.runtime") or d == "dtlab.vocab"))
          for m, deps in _imports().items() if m.startswith("dtlab.runtime")}
    assert not {m: d for m, d in up.items() if d}, up


def test_no_cycle_between_packages():
    """The top level included: it wires the layers together (the post-mortem hook imports
    dtlab.hang), so nothing below may import it back."""
    graph: dict[str, set[str]] = {}
    for m, deps in _imports().items():
        graph.setdefault(_area(m), set()).update(_area(d) for d in deps if _area(d) != _area(m))
    assert _cycles(graph) == []


def test_no_cycle_between_modules():
    """In every package, as in the runtime: no module imports one that imports it back (a
    module's own package, which it is part of, is not an edge)."""
    imports = _imports()
    graph = {m: {d for d in deps if d in imports and not m.startswith(d + ".")}
             for m, deps in imports.items()}
    assert _cycles(graph) == []


def test_no_cycle_between_runtime_modules():
    graph = {m: {d for d in deps if d.startswith("dtlab.runtime.")}
             for m, deps in _imports().items() if m.startswith("dtlab.runtime.")}
    assert _cycles(graph) == []
