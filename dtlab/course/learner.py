"""The learner's side of a graded call: rebuild the learner's function, answer calls in plain data.

It runs as a script, ``python -I .../dtlab/course/learner.py``, in a process that holds no test
data (in a sandbox when graded, :mod:`dtlab.course.answer`), and imports only the standard
library, so it starts even in a world without torch or dtlab (:mod:`dtlab.course.world`). The
grader imports the same file for the wire format, so both ends read one definition.

Wire, both ways over the process's stdin/stdout: frames of an 8-byte big-endian length and a
UTF-8 JSON document. What the learner's code prints goes to stderr.

    grader -> {"name": "slow_pairs", "imports": [stmt, ...], "solution": src, "path": [...]}
              {"name": "slow_pairs", "pickled": base64}     a function with no notebook cell
    learner -> {"ok": null} | {"raise": [type, text]}       the function exists (or why not)
    grader -> {"args": [...], "kwargs": {...}}              one call, arguments encoded
    learner -> {"ok": value} | {"raise": [type, text]}      the answer: plain data only

Arguments are JSON with a few tagged types (:func:`encode`): tuples, dicts with keys other than
str, pandas DataFrames and numpy arrays; the answer must be plain data (:func:`plain`): None, bool, int, float, str,
lists (tuples become lists) and dicts with str keys, checked by exact type, so no answer is an
object whose ``==`` says yes to anything.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import traceback

MAX_FRAME = 64 << 20  # bytes: an answer or a call bigger than this is refused, not read


class NotPlain(TypeError, AssertionError):
    """An answer that is not plain data (a TypeError, and an AssertionError so that a test cell
    fails on it as on any wrong answer)."""


def plain(value, what: str = "your answer"):
    """A copy of ``value`` made only of plain builtins, or :class:`NotPlain`.

    >>> plain(((1, 2.5), {"a": [None, True]}))
    [[1, 2.5], {'a': [None, True]}]
    >>> class Yes(str):
    ...     def __eq__(self, other): return True
    >>> plain(Yes("x"))  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    NotPlain: your answer must be plain data (...): got ...Yes
    """
    t = type(value)  # `is`, not `==`: a metaclass could make its classes equal to anything
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    if t is list or t is tuple:
        return [plain(v, what) for v in value]
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise NotPlain(f"{what} must be plain data: a dict's keys are str, got "
                               f"{type(k).__module__}.{type(k).__qualname__}")
            out[k] = plain(v, what)
        return out
    raise NotPlain(f"{what} must be plain data (None, bool, int, float, str, list, tuple, dict "
                   f"with str keys): got {t.__module__}.{t.__qualname__}")


# ---- arguments: JSON with tags --------------------------------------------------------------

def encode(value):
    """An argument as JSON-able data: plain values as they are, tuples, pandas DataFrames and
    numpy arrays tagged (a dict whose one key starts with ``$`` is tagged too, so it stays a dict).
    """
    t = type(value)
    if value is None or t in (bool, int, float, str):
        return value
    if t is list:
        return [encode(v) for v in value]
    if t is tuple:
        return {"$tuple": [encode(v) for v in value]}
    if t is dict:
        if not all(type(k) is str for k in value):  # {rank: text}: keys kept as they are
            return {"$items": [[encode(k), encode(v)] for k, v in value.items()]}
        out = {k: encode(v) for k, v in value.items()}
        return {"$dict": out} if len(out) == 1 and next(iter(out)).startswith("$") else out
    if t.__module__.startswith("pandas") and t.__name__ == "DataFrame":
        return {"$dataframe": {"columns": [str(c) for c in value.columns],
                               "dtypes": [str(d) for d in value.dtypes],
                               "rows": [[encode(_item(v)) for v in row]
                                        for row in value.itertuples(index=False)]}}
    if t.__module__ == "numpy" and t.__name__ == "ndarray":
        return {"$ndarray": {"dtype": str(value.dtype), "data": encode(value.tolist())}}
    if t.__module__ == "numpy":  # a numpy scalar
        return encode(value.item())
    raise TypeError(f"{t.__module__}.{t.__qualname__} does not cross to the learner's process")


def _key(k):
    return tuple(k) if type(k) is list else k


def _item(v):
    return v.item() if type(v).__module__ == "numpy" and hasattr(v, "item") else v


def decode(data):
    if type(data) is list:
        return [decode(v) for v in data]
    if type(data) is not dict:
        return data
    if len(data) == 1:
        (tag, inner), = data.items()
        if tag == "$tuple":
            return tuple(decode(v) for v in inner)
        if tag == "$dict":
            return {k: decode(v) for k, v in inner.items()}
        if tag == "$items":
            return {_key(decode(k)): decode(v) for k, v in inner}
        if tag == "$dataframe":
            import pandas as pd

            df = pd.DataFrame([[decode(v) for v in row] for row in inner["rows"]],
                              columns=inner["columns"])
            return df.astype(dict(zip(inner["columns"], inner["dtypes"])))
        if tag == "$ndarray":
            import numpy as np

            return np.array(decode(inner["data"]), dtype=inner["dtype"])
    return {k: decode(v) for k, v in data.items()}


# ---- frames ---------------------------------------------------------------------------------

def pack(doc) -> bytes:
    body = json.dumps(doc, allow_nan=True).encode()
    return struct.pack("!Q", len(body)) + body


def unpack_length(head: bytes) -> int:
    (n,) = struct.unpack("!Q", head)
    if n > MAX_FRAME:
        raise ValueError(f"a frame of {n} bytes (more than {MAX_FRAME})")
    return n


def _read_exactly(f, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(f):
    head = _read_exactly(f, 8)
    if head is None:
        return None
    body = _read_exactly(f, unpack_length(head))
    return None if body is None else json.loads(body)


# ---- the learner's process -------------------------------------------------------------------

def _die_with_parent() -> None:
    """In JupyterLab (no sandbox to end it) the process ends when the kernel does."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _without_magics(src: str) -> str:
    """IPython magics and shell escapes (``%timeit``, ``!ls``, a ``%%time`` first line) are not
    Python: they are left out of what is graded."""
    lines = src.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        lines = lines[1:]
    return "\n".join("pass  # " + ln if ln.lstrip().startswith(("%", "!")) else ln
                     for ln in lines)


def _names_used(src: str) -> set[str] | None:
    """Every name the source mentions (None if it does not parse: then all imports run)."""
    import ast

    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _bound(stmt: str) -> set[str]:
    import ast

    node = ast.parse(stmt).body[0]
    return {(a.asname or a.name).split(".")[0] for a in node.names}


def _run_imports(statements: list[str], ns: dict, used: set[str] | None = None) -> list[str]:
    """The notebook's imports that bind a name the solution uses, one statement at a time. One
    that fails (a module this exercise's world does not have, or any other reason) is skipped:
    its names stay undefined, and the modules it named are returned, for the message a
    NameError will get."""
    skipped = []
    for stmt in statements:
        if used is not None and not _bound(stmt) & used:
            continue
        try:
            exec(compile(stmt, "<the notebook's imports>", "exec"), ns)
        except Exception as e:
            skipped.append(getattr(e, "name", None) or stmt)
    return skipped


def _build(first: dict):
    name = first["name"]
    sys.path[:0] = first.get("path", [])  # without a sandbox: the world's dtlab comes first
    if "pickled" in first:
        import cloudpickle

        return cloudpickle.loads(base64.b64decode(first["pickled"])), []
    ns = {"__name__": "__notebook__", "__builtins__": __builtins__}
    src = _without_magics(first["solution"])
    cells = [_without_magics(c) for c in first.get("cells", [])]  # the course's helpers
    used = _names_used("\n".join([src, *cells]))
    skipped = _run_imports(first.get("imports", []), ns, used)
    if "values" in first:  # in JupyterLab: the kernel's helpers, by value
        import cloudpickle

        ns.update(cloudpickle.loads(base64.b64decode(first["values"])))
    for i, cell in enumerate(cells):
        exec(compile(cell, f"<the notebook's cell {i + 1}>", "exec"), ns)
    import linecache

    linecache.cache["<your solution cell>"] = (len(src), None, src.splitlines(True),
                                               "<your solution cell>")
    exec(compile(src, "<your solution cell>", "exec"), ns)
    if not callable(ns.get(name)):
        raise NameError(f"your solution cell does not define {name}()")
    return ns[name], skipped


def _failure(e: BaseException, skipped: list[str]) -> list[str]:
    te = traceback.TracebackException.from_exception(e)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if f.filename != __file__])
    text = "".join(te.format()).strip()
    if isinstance(e, NameError) and skipped:
        text += (f"\n(not available while this exercise is graded: {', '.join(sorted(set(skipped)))})")
    return [type(e).__name__, text]


def main() -> None:
    _die_with_parent()
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # the learner's prints go to stderr, which the grader shows
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    reader = os.fdopen(rfd, "rb")

    def send(doc) -> None:
        view = memoryview(pack(doc))
        while view:
            view = view[os.write(wfd, view):]

    skipped: list[str] = []
    try:
        fn, skipped = _build(read_frame(reader))
    except BaseException as e:  # a solution that does not compile, or raises while defined
        send({"raise": _failure(e, skipped)})
        return
    send({"ok": None})
    while (call := read_frame(reader)) is not None:
        try:
            value = fn(*decode(call["args"]), **decode(call["kwargs"]))
            send({"ok": plain(value)})
        except BaseException as e:
            send({"raise": ["NotPlain" if isinstance(e, NotPlain) else type(e).__name__,
                            str(e) if isinstance(e, NotPlain) else _failure(e, skipped)[1]]})


if __name__ == "__main__":
    main()
