"""The world a learner's code runs in while an exercise is graded: dtlab and Python without the
modules that would answer the exercise. Refusal by absence, not by hooks::

    w = world(("dtlab.bench", "dtlab.hang.diagnose.verdict"))
    w.binds        # for the sandbox: this copy of dtlab over the real one, stubs over absent packages
    w.pythonpath   # for a process without a sandbox (a learner's own check in JupyterLab)

``without`` names modules: a dtlab module or package (``dtlab.bench``), or any other installed
one (``torch``). In the world, each is a stub whose import raises ``ModuleNotFoundError`` (its
``name`` is the module's): its source and compiled files are not there to read, copy or load
by path. The rest of dtlab is a copy of the real package's ``.py`` files (no ``__pycache__``,
which would hold the absent modules' code), so a learner may still use what the exercise does
not answer with (07's classify may read evidence with ``dtlab.hang.diagnose.load``).
``dtlab.course.checks`` -- the test cells' machinery, reference computations among it -- is
absent from every world (``GRADERS_ONLY``), whatever ``without`` says.

In a sandbox (:mod:`dtlab.runtime.sandbox`) the copy is bound over the real package's folder and
each stub over the real module, so the original is nowhere in the sandbox's view. Without one
(JupyterLab, ``--unsafe-no-sandbox``) the world comes first on ``PYTHONPATH``: the absent modules
are absent to ordinary imports, which is what a learner's own run of the tests needs to learn
early that the graded run will not have them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass

import dtlab

DTLAB_DIR = os.path.dirname(os.path.abspath(dtlab.__file__))

# the test cells' own machinery: it runs in the grader's kernel, never in a learner's world
GRADERS_ONLY = ("dtlab.course.checks",)

_STUB = '''raise ModuleNotFoundError(
    "No module named {name!r}: it is not available while this exercise is graded "
    "(the exercise is to work it out yourself)", name={name!r})
'''


@dataclass(frozen=True)
class World:
    without: tuple[str, ...]
    root: str  # holds dtlab/ and the stubs of absent top-level packages
    binds: tuple[tuple[str, str], ...]  # (world path, real path): read-only, in this order

    @property
    def pythonpath(self) -> str:
        return self.root

    def keeping(self, modules: list[str]) -> list[str]:
        """``modules`` less those whose package this world takes away."""
        gone = {n.split(".")[0] for n in self.without}
        return [m for m in modules if m.split(".")[0] not in gone]


def _cache_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), f"dtlab-worlds-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _tree_digest() -> str:
    """What the real dtlab package holds now (names, sizes, times): a world is rebuilt when it
    changes."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(DTLAB_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            st = os.stat(os.path.join(root, f))
            h.update(f"{os.path.relpath(os.path.join(root, f), DTLAB_DIR)}:{st.st_size}:"
                     f"{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _check(name: str) -> None:
    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        raise ValueError(f"without: {name!r} is not a module name (e.g. 'dtlab.bench')")
    if parts[0] == "dtlab":
        rel = os.path.join(DTLAB_DIR, *parts[1:])
        if not (os.path.isfile(rel + ".py") or os.path.isdir(rel)):
            raise ValueError(f"without: no module {name!r} in dtlab")
    elif len(parts) > 1:  # a stub file over one module of a package leaves its __pycache__ there
        raise ValueError(f"without: {name!r}: outside dtlab only whole top-level packages can be "
                         f"absent (e.g. 'torch')")


def world(without: tuple[str, ...] | list[str] = (), cache: str | None = None) -> World:
    """The world without ``without`` (made once per set of modules and state of dtlab)."""
    without = tuple(sorted(set(without)))
    for name in without:
        _check(name)
    digest = _tree_digest()
    key = hashlib.sha256(f"{digest}|{','.join(without)}".encode()).hexdigest()[:16]
    root = os.path.join(cache or _cache_dir(), f"world-{digest}-{key}")
    if not os.path.isdir(root):
        _prune(os.path.dirname(root), digest)
        tmp = tempfile.mkdtemp(prefix="building-", dir=os.path.dirname(root))
        try:
            _build(tmp, without)
            os.rename(tmp, root)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isdir(root):  # another process built it first, else a real error
                raise
    else:
        os.utime(root)  # in use: not pruned
    return World(without, root, tuple(_binds(root, without)))


def _prune(cache: str, digest: str, idle_s: float = 3600.0) -> None:
    """Remove the worlds of an earlier state of dtlab (each edit of the package makes new ones)
    that nobody has asked for in ``idle_s`` (:func:`world` touches the one it hands out)."""
    import time

    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if name.startswith("building-") or (name.startswith("world-")
                                            and not name.startswith(f"world-{digest}-")):
            try:
                if time.time() - os.stat(path).st_mtime > idle_s:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass


def _build(root: str, without: tuple[str, ...]) -> None:
    absent_dtlab = {tuple(n.split(".")[1:]) for n in (*without, *GRADERS_ONLY)
                    if n.split(".")[0] == "dtlab"}
    dst_pkg = os.path.join(root, "dtlab")
    for here, dirs, files in os.walk(DTLAB_DIR):
        rel = os.path.relpath(here, DTLAB_DIR)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        os.makedirs(os.path.join(dst_pkg, *parts), exist_ok=True)
        if parts in absent_dtlab or any(parts[:i] in absent_dtlab for i in range(len(parts))):
            dirs[:] = []  # an absent package: only a stub __init__.py, nothing below it
            _stub(os.path.join(dst_pkg, *parts, "__init__.py"), "dtlab." + ".".join(parts))
            continue
        for f in files:
            mod = (*parts, f[:-3]) if f.endswith(".py") else None
            if mod is not None and mod in absent_dtlab:
                _stub(os.path.join(dst_pkg, *parts, f), "dtlab." + ".".join(mod))
            else:
                shutil.copy2(os.path.join(here, f), os.path.join(dst_pkg, *parts, f))
    for name in without:
        if name.split(".")[0] != "dtlab":
            _stub(os.path.join(root, name, "__init__.py"), name)


def _stub(path: str, name: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(_STUB.format(name=name))


def _binds(root: str, without: tuple[str, ...]) -> list[tuple[str, str]]:
    binds = [(os.path.join(root, "dtlab"), DTLAB_DIR)]
    for name in without:
        if name.split(".")[0] == "dtlab":
            continue
        real = _location(name)
        if real is not None:  # else not installed here: absent already
            binds.append((os.path.join(root, name), real))
    return binds


def _location(name: str) -> str | None:
    """The folder of an installed top-level package (found, not imported)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]
