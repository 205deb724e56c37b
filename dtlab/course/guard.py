"""Inside :mod:`dtlab.course.isolate`'s child: refuse the library for good, and watch with an
audit hook (PEP 578) for the ways around a refusal.

:func:`arm` is called once, in a process that exists only to run a learner's function::

    copied = arm(fn, ("dtlab.bench.*",))   # None, or the refused thing fn carries a copy of

After it, the refused functions' code is gone from the process (swapped, originals dropped), and
the hook refuses what :mod:`dtlab.course.isolate` lists. The hook keeps no state a learner can
change: its sets are frozen and reachable only through the hook, which nothing names.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import types
from typing import Any, Callable

from . import checks

# audit events that start a program or a process (subprocess, multiprocessing and pty all end in
# one of these)
_STARTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                     "os.fork", "os.forkpty", "os.startfile", "pty.spawn"})
# C functions that start programs, by the names ctypes would look them up by
_C_STARTS = ("system", "popen", "fork", "vfork", "clone", "exec", "posix_spawn", "ptrace",
             "process_vm_")
# ... and what would reach the hook. (Building code objects stays allowed: the standard library
# does it as it imports -- types.coroutine -- and so does every import of a compiled module.)
_DENIED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents",
                     "sys._current_frames"})


def _fingerprinter(is_a=isinstance, code_type=types.CodeType):
    """(codes, fingerprint), bound to the builtins of the moment they are made: the hook keeps
    these functions, so that rebinding a module's or builtins' names later changes nothing."""

    def codes(code):
        yield code
        for c in code.co_consts:
            if is_a(c, code_type):
                yield from codes(c)

    def fingerprint(code):
        """What a copy of ``code`` keeps whatever it is named: its bytecode, constants (nested
        code by their fingerprints) and the global names it uses -- not variables' names or
        lines."""
        return code.co_code, tuple(fingerprint(c) if is_a(c, code_type)
                                   else (type(c).__name__, repr(c)) for c in code.co_consts), \
            code.co_names

    return codes, fingerprint


_codes, fingerprint = _fingerprinter()
_SUBSTANCE = 64  # bytes of bytecode below which a function is too generic to call a copy


def _modules(targets: tuple[str, ...], functions: list[Callable]) -> set[types.ModuleType]:
    """The modules a refusal covers: each target that is a module (every module of a ``pkg.*``),
    and the module of each refused function."""
    out = {sys.modules[f.__module__] for f in functions if f.__module__ in sys.modules}
    for t in targets:
        name = t.lstrip("?").removesuffix(".*")
        if name in sys.modules:
            out.add(sys.modules[name])
            if t.endswith(".*"):
                out |= {m for n, m in list(sys.modules.items()) if n.startswith(name + ".") and m}
    return out


def _reachable(fn: Any, limit: int = 2000):
    """Code objects and values the learner's function can reach by value: its code, defaults,
    closure, the globals its code names, and those of functions and classes among them."""
    seen: set[int] = set()
    todo = [fn]
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, types.ModuleType):
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            todo += list(_codes(code))
            names = {n for c in _codes(code) for n in c.co_names}
            todo += [obj.__globals__[n] for n in names if n in obj.__globals__]
            todo += [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
            todo += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
        elif isinstance(obj, type):
            todo += [v for v in vars(obj).values()]
        elif isinstance(obj, (staticmethod, classmethod)):
            todo.append(obj.__func__)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo += list(obj)
        elif isinstance(obj, dict):
            todo += list(obj.values())


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _split(targets: tuple[str, ...]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """``pkg.*`` targets split into the modules of the package already imported here (refused
    as usual) and those that are not, as (name, source file): those are refused by never being
    imported (the hook), which spares a fresh process importing what they import (torch)."""
    now, unloaded = [], []
    for t in targets:
        if not t.endswith(".*"):
            now.append(t)
            continue
        name = t.lstrip("?")[:-2]
        try:
            package = importlib.import_module(name)
        except ModuleNotFoundError:
            if t.startswith("?"):
                continue
            raise
        now.append(name)
        for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
            spec = importlib.util.find_spec(info.name) if info.name not in sys.modules else None
            if spec is None or not (spec.origin or "").endswith(".py"):
                now.append(info.name)
            else:
                unloaded.append((info.name, spec.origin))
    return tuple(now), unloaded


def arm(fn: Callable, targets: tuple[str, ...], read_only: bool = False) -> str | None:
    """Refuse ``targets`` and starting programs for good (with ``read_only``, writing any file
    too), arm the hook, and say whether ``fn`` carries a copy of something refused (its name) or
    not (None)."""
    if read_only:
        sys.dont_write_bytecode = True   # imports from here on write no .pyc either
    targets, unloaded = _split(targets)
    functions = [f for t in targets if not checks._builtin_method(t) for f in checks._functions(t)]
    modules = _modules(targets, functions)
    # a function's own code (its nested code is inside its fingerprint), and only one with some
    # substance: a one-line property or a generator expression is written alike everywhere
    prints = {fingerprint(f.__code__): f"{f.__module__}.{f.__qualname__}" for f in functions
              if len(f.__code__.co_code) >= _SUBSTANCE}
    for name, path in unloaded:  # compiled, not run: the same code objects, no imports
        with open(path, encoding="utf-8") as f:
            module = compile(f.read(), path, "exec")
        prints.update({fingerprint(c): f"{name}.{c.co_name}" for c in _codes(module)
                       if c is not module and len(c.co_code) >= _SUBSTANCE})
    patterns = {v.pattern: f"{m.__name__}.{k}" for m in modules for k, v in vars(m).items()
                if type(v) is re.Pattern}
    own = {id(f.__code__) for f in functions}  # the library's functions themselves (imported by
    copied = None                               # name, refused where they are) are no copies
    for obj in _reachable(fn):
        if isinstance(obj, types.CodeType) and id(obj) not in own:
            copied = prints.get(fingerprint(obj))
        elif isinstance(obj, re.Pattern) and obj.pattern in patterns:
            copied = f"the pattern {patterns[obj.pattern]}"
        if copied:
            break
    checks.apply_refusals(targets, programs=False)  # for good: nothing keeps the originals
    import _posixsubprocess
    import ctypes  # noqa: F401  (its import opens the process itself: before the hook, not after)

    _posixsubprocess.fork_exec = checks._refuse  # the one door without an audit event
    paths = [f for m in modules for f in (getattr(m, "__file__", None),
                                            getattr(m, "__cached__", None)) if f]
    paths += [f for _, path in unloaded for f in (path, importlib.util.cache_from_source(path))]
    from .recorded import data_root

    try:
        data = data_root()
    except Exception:  # no recorded data installed: nothing to protect there
        data = None
    for top, _, names in os.walk(data) if data else ():
        paths += [os.path.join(top, n) for n in names]
    _install(frozenset(prints), frozenset(_identity(p) for p in paths) - {None},
             frozenset(m.__name__ for m in modules) | {n for n, _ in unloaded} | {"_posixsubprocess"},
             read_only)
    return copied


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# a file written, made, moved or removed (with read_only); "open" is checked by its mode/flags
_WRITES = frozenset({"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                     "os.truncate", "os.chmod", "os.chown", "os.utime", "os.chflags",
                     "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
                     "shutil.move", "shutil.rmtree", "shutil.make_archive", "shutil.unpack_archive"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install(prints: frozenset, files: frozenset, names: frozenset,
             read_only: bool = False) -> None:
    """Add the hook. Everything it uses is bound here, as closure cells, not looked up in a
    module or in builtins, which the learner's code could rebind: only the garbage collector's
    lists reach the hook (refused too) and nothing names it. A file is known by its device and
    inode, so a link or another spelling of its path is the same file."""
    starts, denied = _STARTS, _DENIED | (_WRITES if read_only else frozenset())
    write_flags = _WRITE_FLAGS if read_only else 0
    stat, fspath, is_a, code_type = os.stat, os.fspath, isinstance, types.CodeType
    refusal, deny, codes, fp = checks.REFUSAL, PermissionError, _codes, fingerprint
    c_starts, bytecode = _C_STARTS, frozenset(p[0] for p in prints)
    libraries = tuple(sorted({os.path.join(os.path.realpath(p), "") for p in sys.path
                              if p.endswith(("site-packages", "dist-packages"))}))

    def hook(event: str, args: tuple) -> None:
        if event in starts or event in denied:
            raise deny(f"{refusal} ({event})")
        if event == "ctypes.dlopen":  # a library installed with Python (torch loads its own
            name = args[0]            # lazily), not the C library or the process itself
            if not (is_a(name, str) and name.startswith(libraries)):
                raise deny(f"{refusal} (loading {name!r} through ctypes)")
        elif event == "ctypes.dlsym" and is_a(args[1], str) and args[1].startswith(c_starts):
            raise deny(f"{refusal} (looking up {args[1]} through ctypes)")
        if event == "open" and write_flags and (
                (is_a(args[1], str) and any(c in args[1] for c in "wax+"))
                or (is_a(args[2], int) and args[2] & write_flags)):
            raise deny(f"{refusal} (writing {args[0]!r}: this function only reads)")
        if event == "open" and not is_a(args[0], int):
            try:
                st = stat(fspath(args[0]))
            except (OSError, TypeError, ValueError):
                return  # a file not there yet: nothing it could name
            if (st.st_dev, st.st_ino) in files:
                raise deny(f"{refusal} (opening {args[0]!r})")
        elif event == "import" and args[0] in names:
            raise deny(f"{refusal} (importing {args[0]} afresh)")
        elif event == "exec" and is_a(args[0], code_type):
            for c in codes(args[0]):  # bytecode first: a set lookup; fingerprints are slower
                if c.co_code in bytecode and fp(c) in prints:
                    raise deny(f"{refusal} (running a copy of refused code)")

    sys.addaudithook(hook)
