"""``py-spy dump --native``: the C/C++ frames under a rank's Python, grouped by library.

A thread of a rank blocked in a collective reads, innermost first, as a walk down the layers:
the C library (a futex, a poll), the collective library, torch's C++ (``c10d::Work::wait``), the
Python binding, then the Python frames. :func:`read` keeps every frame and which layer it belongs
to; :func:`render` prints one line per run of frames from one layer.

>>> dump = read('''Process 7: python3 train.py
... Python v3.12.3 (/usr/bin/python3.12)
...
... Thread 7 (active): "MainThread"
...     0x7ff69921485b (libcuda.so.580.159.04)
...     cuCtxSynchronize_v2 (libcuda.so.580.159.04)
...     cudaDeviceSynchronize (libcudart.so.13)
...     synchronize (torch/cuda/__init__.py:1162)
... ''')
>>> [(r["group"], [f["func"] for f in r["frames"]]) for r in dump["threads"][0]["runs"]]
[('CUDA driver', ['0x7ff69921485b', 'cuCtxSynchronize_v2']), ('CUDA runtime', ['cudaDeviceSynchronize']), ('Python', ['synchronize'])]
"""

from __future__ import annotations

import os
import re

_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<command>.*)$")
_PYTHON = re.compile(r"^Python v(?P<version>\S+)(?: \((?P<path>.*)\))?\s*$")
# 'Thread 753 (active): "MainThread"' (states seen: active, idle; an id in hex is read too)
_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>[^)]*)\)'
                     r'(?:: "(?P<name>.*)")?\s*$')
# '    name (where)' with where = "file.py:42", "libfoo.so.1" or "src.cc:10": the last
# parenthesised group (C++ names hold parentheses of their own)
_FRAME = re.compile(r"^\s{2,}(?P<func>\S.*) \((?P<where>[^()]+)\)\s*$")
_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")
_NATIVE_SOURCE = (".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hpp", ".S")
_SO = re.compile(r"^(?P<lib>.+?)\.so(?:\.[\w.]*)?$")

# layer of a shared library, by its name without version (first match wins)
_LAYERS = (
    (re.compile(r"^libnccl"), "NCCL"),
    (re.compile(r"^libcudart"), "CUDA runtime"),
    (re.compile(r"^libcuda$"), "CUDA driver"),
    (re.compile(r"^libgloo"), "gloo"),
    (re.compile(r"^lib(torch|c10|shm)"), "torch"),
    (re.compile(r"^(libpython|python)\d"), "CPython"),
    (re.compile(r"^(libc|libpthread|libstdc\+\+|libgcc_s|libm|ld-linux.*)$"), "C/C++ runtime"),
)


def library(where: str) -> str | None:
    """``/x/libcuda.so.580.159.04`` -> ``libcuda``; None when ``where`` is no shared library
    (an executable, or a source file from debug information)."""
    base = os.path.basename(where)
    m = _SO.match(base)
    if m:
        return m["lib"]
    return base if re.match(r"^python\d[\d.]*$", base) else None


def layer(func: str, lib: str | None) -> str:
    """The layer a native frame belongs to. gloo is compiled into ``libtorch_cpu.so``: its
    frames are told apart by their ``gloo::`` names, not by the library."""
    if func.startswith("gloo::"):
        return "gloo"
    if lib is None:
        return "unknown library"
    return next((name for pattern, name in _LAYERS if pattern.match(lib)), lib)


def _frame(func: str, where: str) -> dict:
    m = _LINE.match(where)
    is_python = (m is not None and not m["file"].endswith(_NATIVE_SOURCE)) or where.endswith(".py")
    if is_python:
        return {"kind": "python", "func": func, "file": m["file"] if m else where,
                "line": int(m["line"]) if m else None, "library": None, "group": "Python"}
    lib = library(where) if m is None else None
    return {"kind": "native", "func": func, "file": m["file"] if m else where,
            "line": int(m["line"]) if m else None, "library": lib,
            "named": not re.match(r"^0x[0-9a-fA-F]+$", func), "group": layer(func, lib)}


def runs(frames: list[dict]) -> list[dict]:
    """Consecutive frames of one layer and one library, innermost first:
    ``{"group", "library", "frames": [frame, ...]}``."""
    out: list[dict] = []
    for fr in frames:
        if out and (out[-1]["group"], out[-1]["library"]) == (fr["group"], fr["library"]):
            out[-1]["frames"].append(fr)
        else:
            out.append({"group": fr["group"], "library": fr["library"], "frames": [fr]})
    return out


def read(text: str) -> dict:
    """A ``py-spy dump --native`` (or plain ``py-spy dump``) as plain data: ``pid``,
    ``command``, ``python``, ``threads`` (each ``tid``, ``state``, ``name``, ``frames``
    innermost first, ``runs``: :func:`runs`), and ``unparsed``: every non-empty line this reader
    did not understand, kept rather than guessed at. No ``Process`` line: no threads, and the
    text (say, a refusal to attach) is in ``unparsed``."""
    out: dict = {"pid": None, "command": None, "python": None, "threads": [], "unparsed": []}
    cur = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if (m := _PROCESS.match(line)) and out["pid"] is None:
            out["pid"], out["command"] = int(m["pid"]), m["command"]
        elif (m := _PYTHON.match(line)) and out["pid"] is not None and out["python"] is None:
            out["python"] = m["version"]
        elif (m := _THREAD.match(line)) and out["pid"] is not None:
            tid = int(m["tid"], 16) if m["tid"].startswith("0x") else int(m["tid"])
            cur = {"tid": tid, "state": m["state"], "name": m["name"], "frames": []}
            out["threads"].append(cur)
        elif (m := _FRAME.match(line)) and cur is not None:
            cur["frames"].append(_frame(m["func"], m["where"]))
        else:
            out["unparsed"].append(line)
    for t in out["threads"]:
        t["runs"] = runs(t["frames"])
    return out


def short(name: str, width: int = 72) -> str:
    """A C++ name without its template arguments and parameter lists (``f<...>(...)`` ->
    ``f<…>(…)``), cut to ``width``: pybind11's wrappers run to 2000 characters."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            if depth == 0:
                out.append(ch + "…")
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    s = "".join(out)
    return s if len(s) <= width else s[:width - 1] + "…"


def _tail(path: str) -> str:
    """The file and its folder: ``__init__.py`` alone names nothing."""
    return "/".join(path.split("/")[-2:])


def render(dump: dict, threads: list[dict] | None = None, python_frames: int = 3) -> str:
    """Each thread, innermost first, one line per run of one layer: the layer, its functions
    (unnamed addresses counted), the library. ``threads`` (:func:`dtlab.runtime.stacks.os_threads`
    of the same process) adds the threads py-spy did not show: it shows only those that run
    Python."""
    if not dump["threads"]:
        return "no py-spy dump: " + (" ".join(dump["unparsed"])[:200] or "(empty)")
    lines = [f"process {dump['pid']}: {len(dump['threads'])} thread(s) that run Python, "
             f"innermost frame first"]
    for t in dump["threads"]:
        lines.append(f'  thread {t["tid"]} "{t["name"] or "?"}" ({t["state"]})')
        for r in t["runs"]:
            if r["group"] == "Python":
                names = [f"{f['func']} ({_tail(f['file'])}:{f['line']})" for f in r["frames"]]
                if len(names) > python_frames:
                    names = names[:python_frames] + [f"{len(names) - python_frames} more"]
            else:
                names = [short(f["func"]) for f in r["frames"] if f.get("named", True)]
                unnamed = len(r["frames"]) - len(names)
                names += [f"{unnamed} unnamed"] if unnamed else []
            lib = f"  [{r['library']}]" if r["library"] else ""
            lines.append(f"    {r['group']:<14} {', '.join(names)}{lib}")
    if threads:
        shown = {t["tid"] for t in dump["threads"]}
        hidden = [t for t in threads if t["tid"] not in shown]
        lines.append(f"  the kernel lists {len(threads)} thread(s); py-spy did not show "
                     f"{len(hidden)}:" if hidden else f"  the kernel lists the same {len(threads)}")
        for t in hidden:
            # wchan is "0" for a running thread, and where the kernel hides it
            wchan = f', asleep in {t["wchan"]}' if t["wchan"] not in ("", "0") else ""
            lines.append(f'    thread {t["tid"]} "{t["name"]}" state {t["state"]}{wchan}')
    if dump["unparsed"]:
        lines.append(f"  ({len(dump['unparsed'])} line(s) not understood, kept in 'unparsed')")
    return "\n".join(lines)
