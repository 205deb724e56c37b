"""Is a submitted answer the learner's own, or the library's code handed back?

An exercise that dtlab itself answers is graded in a world without those modules
(:mod:`dtlab.course.world`), so a solution cannot *call* them. It can still *carry* them: a
learner has the library installed, and can paste its source into the solution cell, or an
encoded archive of it that the cell unpacks and loads. The grader reads the solution cell's text
before it runs anything (this module runs in the grader's process, never in the learner's) and
refuses three things, each with a reason the feedback shows:

* **more information than an answer holds**: more than ``INFO_BYTES`` bytes once the cell is
  compressed (zlib, level 9). Whatever the encoding -- text, a number, names, a list of small
  integers -- a packed library cannot be smaller than what it packs, while an answer, however
  long-winded, compresses well (the course's longest reference solution: 4,154 characters,
  1,633 bytes compressed; a packed copy of one of the modules an exercise takes away: tens of
  kilobytes);
* **a payload**: more than ``PAYLOAD_CHARS`` characters of literals (strings, numbers) and
  comments. An answer computes its result; it has no use for kilobytes of data or code in text
  or in a number (the course's reference solutions carry at most 1,554);
* **the absent modules' code**: token k-grams of the cell (``K`` tokens, local names
  normalised, attribute names, keywords and literals' kinds kept) winnowed as in MOSS (Schleimer,
  Wilkerson and Aiken, *Winnowing: local algorithms for document fingerprinting*, SIGMOD 2003),
  looked up in the same k-grams of the modules the exercise takes away. A cell with at least
  ``MIN_SHARED`` fingerprints from there that make up ``SHARE`` of its own, or with
  ``MANY_SHARED`` of them however much else it holds, is the library's code, renamed or not.
  (Measured on the course's reference solutions, written by the library's own author: at most
  34 % and 28 fingerprints shared; a pasted module: 100 %.)

A mechanical rewrite that changes every token run is undone first: each check runs on the cell
as written and again on the cell with calls to its own pass-through functions removed
(``_i(x)`` -> ``x`` for a ``def _i(x): return x`` or ``_i = lambda x: x``; ninth red team: a
script that wrapped every name and constant of a pasted module in one left 0 of 196
fingerprints shared), and the library's files are fingerprinted as written and as
:func:`ast.unparse` writes them, so that the two spellings meet.

Rewriting the library's algorithm in one's own words is not caught, and is not meant to be: that
is doing the exercise with a good reference open. What is caught is handing in code that was not
written. ``tests/grading`` checks both directions: every reference solution passes, every
pasted or packed copy of an absent module is refused.

>>> borrowed("def f(x):\\n    return x + 1\\n", ("dtlab.bench",)) is None
True
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import keyword
import os
import tokenize

INFO_BYTES = 4096     # bytes one solution cell may hold once compressed (zlib -9)
PAYLOAD_CHARS = 3000  # characters of literals (strings, numbers) and comments one cell may hold
K = 12                # tokens per k-gram
WINDOW = 6            # winnowing window (a shared run of K + WINDOW - 1 tokens is always seen)
SHARE = 0.5           # fraction of the cell's fingerprints found in the absent modules
MIN_SHARED = 8        # and at least this many of them
MANY_SHARED = 50      # or this many, whatever the fraction (a copy padded with code of one's own)

_KEEP = set(keyword.kwlist) | set(dir(builtins))


def _tokens(source: str) -> list[str] | None:
    """The cell as a stream of normalised tokens (None: not Python that tokenizes)."""
    out, after_dot = [], False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME:
                out.append(tok.string if after_dot or tok.string in _KEEP else "V")
            elif tok.type == tokenize.NUMBER:
                out.append("N")
            elif tok.type == tokenize.STRING or tok.type in _FSTRING:
                out.append("S")
            elif tok.type == tokenize.OP:
                out.append(tok.string)
            after_dot = tok.type == tokenize.OP and tok.string == "."
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return out


_FSTRING = {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
            if hasattr(tokenize, n)}


def _hashes(tokens: list[str]) -> list[int]:
    return [int.from_bytes(hashlib.blake2b("\x1f".join(tokens[i:i + K]).encode(),
                                           digest_size=8).digest(), "big")
            for i in range(len(tokens) - K + 1)]


def _unreadable(source: str) -> str:
    """Why ``source`` does not tokenize to the end, or empty."""
    try:
        for _ in tokenize.generate_tokens(io.StringIO(source).readline):
            pass
    except (tokenize.TokenError, IndentationError, SyntaxError) as e:
        return " ".join(str(e).split())[:120] or type(e).__name__
    return ""


def fingerprints(source: str) -> set[int]:
    """The winnowed fingerprints of ``source``: the smallest k-gram hash of every window."""
    hs = _hashes(_tokens(source) or [])
    if len(hs) <= WINDOW:
        return set(hs)
    return {min(hs[i:i + WINDOW]) for i in range(len(hs) - WINDOW + 1)}


def information(source: str) -> int:
    """Bytes of ``source`` once compressed: a bound from above on what it carries."""
    import zlib

    return len(zlib.compress(source.encode("utf-8", "surrogatepass"), 9))


def payload(source: str) -> int:
    """Characters of literals (strings, f-strings, numbers) and comments in ``source``."""
    n = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT, tokenize.NUMBER) or tok.type in _FSTRING:
                n += len(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return 0
    return n


def module_files(modules) -> list[str]:
    """The installed ``.py`` files of dtlab modules or packages (others: none)."""
    import dtlab

    top = os.path.dirname(os.path.abspath(dtlab.__file__))
    out = []
    for name in modules:
        if name != "dtlab" and not name.startswith("dtlab."):
            continue
        rel = os.path.join(top, *name.split(".")[1:])
        if os.path.isdir(rel):
            for here, dirs, files in os.walk(rel):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                out += [os.path.join(here, f) for f in sorted(files) if f.endswith(".py")]
        elif os.path.isfile(rel + ".py"):
            out.append(rel + ".py")
    return out


_LIB: dict[str, set[int]] = {}


def _library(path: str) -> set[int]:
    """Every k-gram hash of one library file (all of them: a copy may start anywhere), as
    written and as ``ast.unparse`` writes it (what :func:`unwrapped` compares)."""
    if path not in _LIB:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        _LIB[path] = set(_hashes(_tokens(text) or []))
        try:
            _LIB[path] |= set(_hashes(_tokens(ast.unparse(ast.parse(text))) or []))
        except (SyntaxError, ValueError):
            pass
    return _LIB[path]


def unwrapped(source: str) -> str | None:
    """``source`` without calls to its own pass-through functions, as ``ast.unparse`` writes
    it; None when it has none (or does not parse).

    >>> unwrapped("def _i(x):\\n    return x\\ny = _i(len)(_i('ab'))\\n")
    "def _i(x):\\n    return x\\ny = len('ab')"
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    same = set()
    for node in ast.walk(tree):
        fn = node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if fn and fn.args.args and len(fn.body) == 1 and isinstance(fn.body[0], ast.Return) \
                and isinstance(fn.body[0].value, ast.Name) and fn.body[0].value.id == fn.args.args[0].arg:
            same.add(fn.name)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Lambda) \
                and node.value.args.args and isinstance(node.value.body, ast.Name) \
                and node.value.body.id == node.value.args.args[0].arg:
            same.add(node.targets[0].id)
    if not same:
        return None

    class Unwrap(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id in same and len(node.args) == 1 \
                    and not node.keywords and not isinstance(node.args[0], ast.Starred):
                return node.args[0]
            return node

    return ast.unparse(Unwrap().visit(tree))


def borrowed(source: str, without) -> str | None:
    """Why the solution cell ``source`` is not the learner's own work, or None. What is checked
    is the code that runs (magics left out as the learner's process leaves them out); a cell the
    checks cannot read is refused, not waved through."""
    from .learner import _without_magics

    source = _without_magics(source)
    unread = _unreadable(source)
    if unread:
        try:
            compile(source, "<solution cell>", "exec")
        except (SyntaxError, ValueError):
            return None  # it cannot run either: building it says why (a SyntaxError), no marks
        return (f"your solution cell is not Python that reads to the end ({unread}), so it "
                f"cannot be checked as your own work: fix it and run it again")
    held = information(source)
    if held > INFO_BYTES:
        return (f"your solution cell holds {held:,} bytes of information once compressed (at "
                f"most {INFO_BYTES:,}): an answer computes its result, it does not bring code or "
                f"data along, in whatever encoding")
    carried = payload(source)
    if carried > PAYLOAD_CHARS:
        return (f"your solution cell carries {carried:,} characters of literals and comments (at "
                f"most {PAYLOAD_CHARS:,}): an answer computes its result, it does not bring code "
                f"or data along in text or numbers")
    files = module_files(without)
    if not files:
        return None
    lib = set().union(*(_library(p) for p in files))
    for text in (source, unwrapped(source)):
        mine = fingerprints(text) if text else set()
        shared = mine & lib
        if len(shared) >= MANY_SHARED or (len(shared) >= MIN_SHARED
                                          and len(shared) >= SHARE * len(mine)):
            top = os.path.dirname(os.path.dirname(files[0]))
            most = sorted(files, key=lambda p: -len(_library(p) & shared))
            where = [os.path.relpath(p, top) for p in most if _library(p) & shared]
            return (f"your solution cell is the code of {', '.join(where[:3])} "
                    f"({len(shared)} of its {len(mine)} fingerprints are there), which this "
                    f"exercise takes away: write it yourself")
    return None
