"""Shipping a call to fresh processes: functions travel by value (cloudpickle).

A function defined in a notebook cell lives in ``__main__`` of the kernel, which a fresh rank
process cannot import, so it has to travel by value -- cloudpickle does that for functions,
lambdas and closures. Functions from importable modules travel by reference, so the rank gets
the parent's ``sys.path`` and working directory. Notebook cells have no file on disk: their
source lines travel too (``linecache``), so a rank's traceback shows the code, not just a line
number.
"""

from __future__ import annotations

import io
import linecache
import os
import sys
import types
from collections import ChainMap
from typing import Any

import cloudpickle

from .errors import LaunchError


def _reduce_code_keeping_filename(code: types.CodeType):
    """cloudpickle >= 3.1 renames shipped code to ``<dynamic-code>``; keep the real file name so
    a rank's tracebacks and py-spy stacks still say which file and line is running."""
    ctor, args = cloudpickle.cloudpickle._code_reduce(code)
    fname = code.co_filename
    return ctor, tuple(fname if isinstance(a, str) and a == "<dynamic-code>" else a for a in args)


class ShippingPickler(cloudpickle.Pickler):
    """cloudpickle with real file names in shipped code objects."""

    if hasattr(cloudpickle.cloudpickle, "_code_reduce"):
        dispatch_table = ChainMap({types.CodeType: _reduce_code_keeping_filename},
                                  cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    ShippingPickler(buf).dump(obj)
    return buf.getvalue()


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    kind = type(obj).__name__
    return f"{name} ({kind})" if name else f"a {kind}"


def dumps_checked(obj: Any, what: str) -> bytes:
    """cloudpickle ``obj`` or raise LaunchError naming ``what`` and why."""
    try:
        return dumps(obj)
    except Exception as e:  # pickling raises TypeError, PicklingError, AttributeError, ...
        raise LaunchError(
            f"{what} cannot be sent to the ranks: {type(e).__name__}: {e}. Ranks are separate "
            f"processes, so everything fn uses must be picklable; create this object inside fn "
            f"instead (locks, open files, sockets, CUDA streams and live process groups never "
            f"travel).") from None


def pack_call(fn, args: tuple, kwargs: dict) -> bytes:
    """Pickle ``(fn, args, kwargs)``; on failure name the piece that cannot travel."""
    if not callable(fn):
        raise LaunchError(f"fn must be callable; got {_describe(fn)}.")
    try:
        return dumps((fn, args, kwargs))
    except Exception:
        pass
    _check_fn(fn)
    for i, a in enumerate(args):
        dumps_checked(a, f"positional argument {i} ({_describe(a)})")
    for k, v in kwargs.items():
        dumps_checked(v, f"keyword argument {k!r} ({_describe(v)})")
    # each piece pickles alone but not together (rare: e.g. a recursion limit)
    return dumps_checked((fn, args, kwargs), "the call (fn, args, kwargs)")


def _check_fn(fn) -> None:
    """Name the variable a function captures that cannot travel (the usual culprit)."""
    import inspect

    try:
        dumps(fn)
        return
    except Exception:
        pass
    try:
        cv = inspect.getclosurevars(fn)
        captured = {**cv.nonlocals, **cv.globals}
    except (TypeError, ValueError):
        captured = {}
    for name, val in captured.items():
        if isinstance(val, types.ModuleType):
            continue
        dumps_checked(val, f"fn {_describe(fn)} uses variable {name!r} ({_describe(val)}), which")
    dumps_checked(fn, f"fn {_describe(fn)}")


def _code_files(obj: Any, seen: set | None = None) -> set[str]:
    seen = set() if seen is None else seen
    files: set[str] = set()
    code = getattr(obj, "__code__", None)
    if isinstance(obj, types.CodeType):
        code = obj
    if code is None or id(code) in seen:
        return files
    seen.add(id(code))
    files.add(code.co_filename)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            files |= _code_files(c, seen)
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            files |= _code_files(cell.cell_contents, seen)
        except ValueError:  # empty cell
            pass
    return files


def source_lines_for(*objs: Any) -> dict[str, tuple]:
    """linecache entries of code that has no file on disk (notebook cells)."""
    out = {}
    for obj in objs:
        for fname in _code_files(obj):
            if fname in linecache.cache and not os.path.exists(fname):
                out[fname] = linecache.cache[fname]
    return out


def parent_context(*objs: Any) -> dict:
    """What a rank needs from the parent to unpickle and run ``objs``."""
    return {
        "sys_path": [p if p else os.getcwd() for p in sys.path],
        "cwd": os.getcwd(),
        "linecache": source_lines_for(*objs),
    }
