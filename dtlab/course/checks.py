"""What graded test cells use so that an exercise grades the skill, not a way around it.

Three kinds of help, each small:

* :func:`refused` -- while a learner's function runs under a test, the library's own answer
  (``dtlab.bench.busbw``, ``dtlab.hang.diagnose``, ...) and starting programs (``subprocess``,
  ``os.system``, ``dtlab ...`` on the command line) raise instead of answering::

      with course.refused("dtlab.bench.busbw", "dtlab.bench.formulas"):
          got = bus_bandwidth("all_reduce", 1 << 30, 4000.0, 8)

  A function is refused by swapping its code object, so a name bound before the test
  (``from dtlab.bench import busbw``) is refused too; a module name refuses every function and
  method defined in it, ``"pkg.*"`` every one in a package; ``"?name"`` is refused if it exists.
* rank-side wrappers, run through :func:`dtlab.course.run_graded`: :func:`counted` returns the
  learner's value with the number of collectives the default process group ran meanwhile, and
  :func:`with_secret_pid` makes ``os.getpid()`` return a number no other process can see, so
  only a collective can tell the other ranks;
* :func:`unlabeled_copy` -- an evidence folder copied under a neutral name, without what names
  its answer (``diagnosis.json``, a README, the reproducer's note in ``run.json``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import pkgutil
import secrets
import shutil
import subprocess
from typing import Any, Callable, Iterator

REFUSAL = "refused while your answer is graded: work it out in your own code"


def _refuse(*args, **kwargs):
    raise AssertionError("refused while your answer is graded: work it out in your own code")


def _functions(target: str) -> list[Callable]:
    """'pkg.mod', 'pkg.mod.func', 'pkg.mod.Class(.method)' or 'pkg.*' (a package and every module
    in it) -> the plain functions it names."""
    optional = target.startswith("?")  # "?pkg.mod": refuse it if it exists
    every = target.endswith(".*")
    parts = target.lstrip("?").removesuffix(".*").split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # the module exists but an import inside it failed
                raise
            continue
        for name in parts[cut:]:
            try:
                obj = inspect.getattr_static(obj, name)
            except AttributeError:
                if optional:
                    return []
                raise
            obj = getattr(obj, "__func__", obj)  # staticmethod / classmethod
        break
    else:
        raise ValueError(f"refused({target!r}): no such module")
    if inspect.ismodule(obj):
        modules = [obj]
        if every and hasattr(obj, "__path__"):  # "pkg.*": the package and all its modules
            modules += [importlib.import_module(m.name)
                        for m in pkgutil.walk_packages(obj.__path__, obj.__name__ + ".")]
        out = []
        for module in modules:
            for v in vars(module).values():
                if getattr(v, "__module__", None) != module.__name__:
                    continue  # imported from elsewhere
                if inspect.isfunction(v):
                    out.append(v)
                elif inspect.isclass(v):
                    out += [f for f in vars(v).values() if inspect.isfunction(f)]
        return out
    if inspect.isclass(obj):
        return [f for f in vars(obj).values() if inspect.isfunction(f)]
    if not inspect.isfunction(obj):
        raise ValueError(f"refused({target!r}): {obj!r} is not a Python function")
    return [obj]


# Starting any program: subprocess.Popen (run, check_output, os.popen) goes through
# _execute_child; the os functions below are the other doors (os.spawn* uses fork/exec).
_OS_DOORS = ("system", "fork", "forkpty", "execv", "execve", "posix_spawn", "posix_spawnp")


@contextlib.contextmanager
def refused(*targets: str, programs: bool = True) -> Iterator[None]:
    """Inside the block, every function named by ``targets`` and (``programs=True``) starting any
    program raises ``AssertionError`` saying it is refused.

    >>> from dtlab import course
    >>> import dtlab.bench
    >>> with course.refused("dtlab.bench.formulas.busbw"):
    ...     dtlab.bench.busbw("all_reduce", 1 << 30, 1e-3, 2)
    Traceback (most recent call last):
    AssertionError: refused while your answer is graded: work it out in your own code
    """
    swapped: list[tuple[Callable, Any]] = []
    patched: list[tuple[Any, str, Any]] = []
    functions = [f for t in targets for f in _functions(t)]
    if programs:
        functions.append(subprocess.Popen._execute_child)
    try:
        for f in functions:
            if f.__code__.co_freevars:  # a closure: its code cannot be swapped; its name can
                module = inspect.getmodule(f)
                if getattr(module, f.__name__, None) is f:
                    patched.append((module, f.__name__, f))
                    setattr(module, f.__name__, _refuse)
            else:
                swapped.append((f, f.__code__))
                f.__code__ = _refuse.__code__
        if programs:
            import posix
            for module in (os, posix):
                for name in _OS_DOORS:
                    if hasattr(module, name):
                        patched.append((module, name, getattr(module, name)))
                        setattr(module, name, _refuse)
        yield
    finally:
        for f, code in reversed(swapped):
            f.__code__ = code
        for owner, name, value in reversed(patched):
            setattr(owner, name, value)


def counted(fn: Callable, *args, **kwargs) -> tuple[Any, int | None]:
    """Rank side: ``(fn(*args, **kwargs), collectives the default group ran during the call)``;
    None for the count where the process group does not keep one.

    >>> from dtlab import course
    >>> res = course.run_graded(course.counted, gather_pids, nprocs=2)   # doctest: +SKIP
    >>> [n for _, n in res.values]                                      # doctest: +SKIP
    [1, 1]
    """
    import torch.distributed as dist

    group = dist.group.WORLD
    seq = getattr(group, "_get_sequence_number_for_group", None)
    before = seq() if seq else None
    value = fn(*args, **kwargs)
    return value, (seq() - before if seq else None)


def with_secret_pid(fn: Callable, pids: list[int]) -> Any:
    """Rank side: call ``fn()`` while ``os.getpid()`` returns ``pids[rank]``, a number that no
    process table holds; the other ranks can learn it only from this rank, through a collective.
    """
    import torch.distributed as dist

    real = os.getpid
    os.getpid = lambda: pids[dist.get_rank()]
    try:
        return fn()
    finally:
        os.getpid = real


def secret_pids(n: int) -> list[int]:
    """``n`` distinct numbers above any Linux pid (pid_max is at most 2**22)."""
    out: list[int] = []
    while len(out) < n:
        p = (1 << 23) + secrets.randbelow(1 << 30)
        if p not in out:
            out.append(p)
    return out


def unlabeled_copy(src: str, into: str) -> str:
    """Copy the evidence folder ``src`` to a neutrally named folder in ``into`` and return it,
    without what names the answer: ``diagnosis.json``, README files, and the ``reproducer``
    note of ``run.json`` (which bug was planted, with an output path that names it)."""
    dst = os.path.join(into, "case-" + secrets.token_hex(4))
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("diagnosis.json", "README*"))
    run = os.path.join(dst, "run.json")
    if os.path.isfile(run):
        with open(run) as f:
            meta = json.load(f)
        meta.pop("reproducer", None)
        with open(run, "w") as f:
            json.dump(meta, f)
    return dst
