"""What graded test cells use so that an exercise grades the skill, not a way around it.

Five kinds of help, each small:

* :func:`plain` -- a learner's answer copied as plain data (exact builtin types), so that it
  cannot be an object whose ``==`` says yes to anything::

      got = course.plain(classify(folder))

* :func:`refused` -- while a learner's function runs under a test, the library's own answer
  (``dtlab.bench.busbw``, ``dtlab.hang.diagnose``, ...) and starting programs or processes
  (``subprocess``, ``os.system``, ``dtlab ...`` on the command line, ``multiprocessing``, ``pty``,
  ``ctypes``) raise instead of answering::

      with course.refused("dtlab.bench.busbw", "dtlab.bench.formulas"):
          got = bus_bandwidth("all_reduce", 1 << 30, 4000.0, 8)

  A function is refused by swapping its code object, so a name bound before the test
  (``from dtlab.bench import busbw``) is refused too; a module name refuses every function and
  method defined in it, ``"pkg.*"`` every one in a package; ``"?name"`` is refused if it exists.
* rank-side wrappers, run through :func:`dtlab.course.run_graded`: :func:`counted` returns the
  learner's value with the number of collectives the default process group ran meanwhile, and
  :func:`with_secret_pid` makes ``os.getpid()`` return a number no other process can see, so
  only a collective can tell the other ranks; both refuse the ranks' key-value store
  (:func:`store_methods`) meanwhile;
* inside the ranks, :class:`refusing` wraps a learner's collective so that torch's own
  collectives (:func:`torch_collectives`: the ``dist.*`` calls, decorated or bound elsewhere,
  and the process group's compiled methods beneath them) raise only while it runs, and checks
  that it called the ones it must build on;
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


class NotPlain(TypeError, AssertionError):
    """An answer that is not plain data: a TypeError, and an AssertionError so that a test cell
    fails on it as on any wrong answer."""


def plain(value: Any, what: str = "your answer") -> Any:
    """A copy of ``value`` made only of plain builtins (None, bool, int, float, str, list, dict
    with str keys; a tuple becomes a list), or :class:`NotPlain` (a ``TypeError``).

    Types are checked exactly (``type(x) is list``, not ``isinstance``), so an answer cannot be
    an object whose ``==`` says yes to everything, a ``str``/``list``/``float`` subclass included:

    >>> from dtlab.course import plain
    >>> plain(((1, 2.5), {"a": [None, True]}))
    [[1, 2.5], {'a': [None, True]}]
    >>> class Yes(str):
    ...     def __eq__(self, other): return True
    >>> plain(Yes("x"))  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    dtlab.course.checks.NotPlain: your answer must be plain data (...): got ...Yes
    """
    t = type(value)  # `is`, not `==` / `in`: a metaclass could make its classes equal to any
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
    chain = [obj]  # a decorated function (functools.wraps): refuse what it wraps too, so a
    while inspect.isfunction(getattr(chain[-1], "__wrapped__", None)):  # name bound elsewhere
        chain.append(chain[-1].__wrapped__)  # (torch.distributed.all_gather) is refused as well
    return chain


def _builtin_method(target: str) -> tuple[Any, str | None] | None:
    """'pkg.mod.Class.method' where the method is compiled (a pybind11 method such as
    ``torch.distributed.ProcessGroup.allgather``) -> (Class, 'method'); its code cannot be
    swapped, the class attribute can. (Class, None) for '?...' when the class lacks it. The same
    for a compiled function of an extension module ('torch._C._distributed_c10d.name')."""
    parts = target.lstrip("?").split(".")
    for cut in range(len(parts) - 2, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:-1]:
            obj = getattr(obj, name, None)
        if type(obj).__name__ == "_OpNamespace":  # torch.ops.c10d.allreduce_: ops resolve on
            try:                                  # first use into the namespace's attributes
                getattr(obj, parts[-1])
            except AttributeError:
                return (obj, None) if target.startswith("?") else None
            return obj, parts[-1]
        if (inspect.isclass(obj) or inspect.ismodule(obj)) and parts[-1] in vars(obj):
            attr = vars(obj)[parts[-1]]
            if inspect.ismodule(obj) and not inspect.isbuiltin(attr):
                return None  # a module's Python function, class or submodule: _functions
            if not inspect.isfunction(getattr(attr, "__func__", attr)) and callable(attr):
                return obj, parts[-1]
        elif inspect.isclass(obj) and target.startswith("?") and not hasattr(obj, parts[-1]):
            return obj, None
        return None
    return None


# Starting any program: subprocess.Popen (run, check_output, os.popen) goes through
# _execute_child; the os functions below are the other doors (os.spawn* uses fork/exec).
_OS_DOORS = ("system", "fork", "forkpty", "execv", "execve", "posix_spawn", "posix_spawnp")


def _program_doors() -> tuple[list[Callable], list[tuple[Any, str]]]:
    """What starts a program or another process, beyond the os functions: (Python functions,
    whose code is swapped; (module, name) of compiled ones, whose name is). ctypes is refused
    whole (a C library's ``system()`` is a program too), and no exercise needs it."""
    import _ctypes
    import _posixsubprocess
    import ctypes
    import multiprocessing.process
    import pty

    functions = [subprocess.Popen._execute_child,
                 multiprocessing.process.BaseProcess.start,  # every context, Pool, executors
                 pty.spawn, pty.fork,
                 ctypes.CDLL.__init__, ctypes.CDLL.__getattr__, ctypes.CDLL.__getitem__]
    names = [(_posixsubprocess, "fork_exec"),  # subprocess and multiprocessing's spawn
             (_ctypes, "dlopen"), (_ctypes, "dlsym"), (ctypes, "_dlopen")]
    import posix
    for module in (os, posix):
        names += [(module, n) for n in _OS_DOORS if hasattr(module, n)]
    return functions, names


@contextlib.contextmanager
def refused(*targets: str, programs: bool = True) -> Iterator[None]:
    """Inside the block, every function named by ``targets`` and (``programs=True``) starting any
    program or process (subprocess, os, multiprocessing, pty, ctypes) raises ``AssertionError``
    saying it is refused. Everything is put back when the block ends.

    >>> from dtlab import course
    >>> import dtlab.bench
    >>> with course.refused("dtlab.bench.formulas.busbw"):
    ...     dtlab.bench.busbw("all_reduce", 1 << 30, 1e-3, 2)
    Traceback (most recent call last):
    AssertionError: refused while your answer is graded: work it out in your own code
    """
    swapped: list[tuple[Callable, Any]] = []
    patched: list[tuple[Any, str, Any]] = []
    try:
        apply_refusals(targets, programs, swapped, patched)
        yield
    finally:
        for f, code in reversed(swapped):
            f.__code__ = code
        for owner, name, value in reversed(patched):
            setattr(owner, name, value)


def apply_refusals(targets: tuple[str, ...], programs: bool = True,
                   swapped: list | None = None, patched: list | None = None) -> None:
    """What :func:`refused` does on entering its block. The originals go into ``swapped``
    ((function, code)) and ``patched`` ((owner, name, value)) for :func:`refused` to put back;
    without them nothing can (:mod:`dtlab.course.guard` refuses for the rest of a process)."""
    swapped = [] if swapped is None else swapped
    patched = [] if patched is None else patched
    methods = [m for t in targets if (m := _builtin_method(t)) and m[1]]
    functions = [f for t in targets if not _builtin_method(t) for f in _functions(t)]
    doors: list[tuple[Any, str]] = []
    if programs:
        more, doors = _program_doors()
        functions += more
    for owner, name in methods:
        patched.append((owner, name, vars(owner)[name]))
        setattr(owner, name, _refuse)
    for f in functions:
        if f.__code__.co_freevars:  # a closure: its code cannot be swapped; its name can
            module = inspect.getmodule(f)
            if getattr(module, f.__name__, None) is f:
                patched.append((module, f.__name__, f))
                setattr(module, f.__name__, _refuse)
        else:
            swapped.append((f, f.__code__))
            f.__code__ = _refuse.__code__
    for module, name in doors:
        patched.append((module, name, getattr(module, name)))
        setattr(module, name, _refuse)


# The ranks' key-value store (dist.TCPStore / PrefixStore / ..., the default group's included:
# every Store method is defined on the base class) and torch's collectives built on it: a
# message board beside the collectives.
_STORE_CALLS = ("set", "compare_set", "get", "add", "check", "delete_key", "num_keys", "wait",
                "append", "multi_get", "multi_set", "queue_push", "queue_pop", "queue_len",
                "list_keys", "barrier", "clone")


def store_methods() -> tuple[str, ...]:
    """:func:`refused` targets for the methods of every ``torch.distributed.Store``, and of the
    store-based collectives (``_StoreCollectives``), where this torch has them."""
    importlib.import_module("torch.distributed")  # loads torch._C._distributed_c10d

    c10d = "torch._C._distributed_c10d"
    out = [f"?{c10d}.Store.{n}" for n in _STORE_CALLS]
    try:
        from torch._C._distributed_c10d import _ControlCollectives
    except ImportError:
        return tuple(out)
    out.append(f"?{c10d}._StoreCollectives.__init__")  # it talks to the store from C++
    return (*out, *(f"?{c10d}._ControlCollectives.{n}" for n in vars(_ControlCollectives)
                    if not n.startswith("_") and callable(getattr(_ControlCollectives, n))))


def counted(fn: Callable, *args, **kwargs) -> tuple[Any, int | None]:
    """Rank side: ``(fn(*args, **kwargs), collectives the default group ran during the call)``;
    None for the count where the process group does not keep one. The ranks' store
    (:func:`store_methods`) is refused meanwhile: what goes between ranks goes by collectives.

    >>> from dtlab import course
    >>> res = course.run_graded(course.counted, gather_pids, nprocs=2)   # doctest: +SKIP
    >>> [n for _, n in res.values]                                      # doctest: +SKIP
    [1, 1]
    """
    import torch.distributed as dist

    group = dist.group.WORLD
    seq = getattr(group, "_get_sequence_number_for_group", None)
    before = seq() if seq else None
    with refused(*store_methods(), programs=False):
        value = fn(*args, **kwargs)
    return value, (seq() - before if seq else None)


# torch.distributed's own collectives, by the name a learner would call, with the ProcessGroup
# methods underneath (reachable through dist.group.WORLD); '?' where a torch version lacks one.
_DIST_CALLS = {
    "all_gather": ["all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_object",
                   "all_gather_coalesced", "_all_gather_base"],
    "all_reduce": ["all_reduce", "all_reduce_coalesced"],
    "reduce_scatter": ["reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
                       "_reduce_scatter_base"],
    "broadcast": ["broadcast", "broadcast_object_list"],
    "reduce": ["reduce"],
    "all_to_all": ["all_to_all", "all_to_all_single"],
    "gather": ["gather", "gather_object"],
    "scatter": ["scatter", "scatter_object_list"],
}
_GROUP_CALLS = {
    "all_gather": ["allgather", "allgather_coalesced", "_allgather_base", "all_gather_single",
                   "all_gather_single_coalesced", "allgather_into_tensor_coalesced"],
    "all_reduce": ["allreduce", "allreduce_coalesced"],
    "reduce_scatter": ["reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single",
                       "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"],
    "broadcast": ["broadcast"], "reduce": ["reduce"],
    "all_to_all": ["alltoall", "alltoall_base", "all_to_all_single"],
    "gather": ["gather"], "scatter": ["scatter"],
}
# ... and the dispatcher's ops beneath both, callable from Python as torch.ops.<namespace>.<op>
_DISPATCHER_CALLS = {
    "all_gather": ["c10d.allgather_", "c10d._allgather_base_", "c10d.allgather_coalesced_",
                   "c10d.allgather_into_tensor_coalesced_",
                   "_c10d_functional.all_gather_into_tensor",
                   "_c10d_functional.all_gather_into_tensor_out",
                   "_c10d_functional.all_gather_into_tensor_coalesced"],
    "all_reduce": ["c10d.allreduce_", "c10d.allreduce_coalesced_", "_c10d_functional.all_reduce",
                   "_c10d_functional.all_reduce_", "_c10d_functional.all_reduce_coalesced",
                   "_c10d_functional.all_reduce_coalesced_"],
    "reduce_scatter": ["c10d.reduce_scatter_", "c10d._reduce_scatter_base_",
                       "c10d.reduce_scatter_tensor_coalesced_",
                       "_c10d_functional.reduce_scatter_tensor",
                       "_c10d_functional.reduce_scatter_tensor_out",
                       "_c10d_functional.reduce_scatter_tensor_coalesced"],
    "broadcast": ["c10d.broadcast_", "_c10d_functional.broadcast", "_c10d_functional.broadcast_"],
    "reduce": ["c10d.reduce_"],
    "all_to_all": ["c10d.alltoall_", "c10d.alltoall_base_", "_c10d_functional.all_to_all_single"],
    "gather": ["c10d.gather_"], "scatter": ["c10d.scatter_"],
}


def torch_collectives(*ops: str) -> tuple[str, ...]:
    """:func:`refused` targets for torch.distributed's own ``ops`` (every collective when none is
    named; point-to-point ``send``/``recv`` never): the ``dist.*`` calls, their functional
    versions, the process group's methods beneath them, and the dispatcher's ops
    (``torch.ops.c10d.allgather_``, ``torch.ops._c10d_functional.*``).

    >>> from dtlab.course.checks import torch_collectives
    >>> "?torch.distributed.distributed_c10d.all_gather_into_tensor" in torch_collectives("all_gather")
    True
    """
    out = []
    for op in ops or tuple(_DIST_CALLS):
        out += [f"?torch.distributed.distributed_c10d.{n}" for n in _DIST_CALLS[op]]
        for owner in ("torch._C._distributed_c10d.ProcessGroup", "torch._C._distributed_c10d.Backend"):
            out += [f"?{owner}.{n}" for n in _GROUP_CALLS[op]]
        out += [f"?torch.ops.{n}" for n in _DISPATCHER_CALLS[op]]
    if not ops or "all_gather" in ops or "all_reduce" in ops or "reduce_scatter" in ops:
        out.append("?torch.distributed._functional_collectives")
    return tuple(out)


class refusing:
    """Rank side: ``fn`` wrapped so that every call runs inside :func:`refused` (``targets``),
    and fails unless it called each torch collective named in ``uses`` at least once.

    What the wrapper refuses is refused only while the learner's function runs, so a validator
    that calls it (``dtlab.collectives.validate(op, impl=refusing(fn, ...))``) keeps its own
    collectives::

        from dtlab.course.checks import refusing, torch_collectives
        impl = refusing(ring_all_gather, "dtlab.collectives.*", *torch_collectives())
        all_reduce = refusing(composed, *torch_collectives("all_reduce"),
                              uses=("reduce_scatter", "all_gather"))
    """

    def __init__(self, fn: Callable, *targets: str, uses: tuple[str, ...] = ()):
        self.fn, self.targets, self.uses = fn, targets, tuple(uses)
        self.__name__ = getattr(fn, "__name__", "refusing")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        calls = {op: 0 for op in self.uses}
        given = [*args, *kwargs.values()]
        before = [(a, type(a), list(a) if type(a) is list else None) for a in given]
        with _counting(calls), refused(*self.targets):
            value = self.fn(*args, **kwargs)
        for a, kind, items in before:  # the answer is what it wrote into the tensors it was given:
            if type(a) is not kind or items is not None and (  # not other objects in their place
                    len(a) != len(items) or any(x is not y for x, y in zip(a, items))):
                raise AssertionError(f"{self.__name__} must write its result into the tensors it "
                                     f"is given, in place, not put other objects in their place")
        missing = [op for op, n in calls.items() if not n]
        if missing:
            raise AssertionError(f"{self.__name__} did not call {' or '.join(missing)}: "
                                 f"this exercise builds on it")
        return value


@contextlib.contextmanager
def _counting(calls: dict[str, int]) -> Iterator[None]:
    """Count, per op in ``calls``, the process-group calls made inside the block (every
    ``dist.*`` collective ends in one of them)."""
    if not calls:
        yield
        return
    import torch.distributed as dist

    owner, saved = dist.ProcessGroup, []

    def counter(op, original):
        def call(self, *args, **kwargs):
            calls[op] += 1
            return original(self, *args, **kwargs)
        return call

    try:
        for op in calls:
            for name in _GROUP_CALLS[op]:
                if name in vars(owner):
                    saved.append((name, vars(owner)[name]))
                    setattr(owner, name, counter(op, vars(owner)[name]))
        yield
    finally:
        for name, original in reversed(saved):
            setattr(owner, name, original)


def with_secret_pid(fn: Callable, pids: list[int]) -> Any:
    """Rank side: call ``fn()`` while ``os.getpid()`` returns ``pids[rank]``, a number that no
    process table holds; the other ranks can learn it only from this rank, through a collective
    (the ranks' store is refused meanwhile, as in :func:`counted`).
    """
    import torch.distributed as dist

    real = os.getpid
    os.getpid = lambda: pids[dist.get_rank()]
    try:
        with refused(*store_methods(), programs=False):
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
