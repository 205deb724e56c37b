"""Every graded exercise grades the skill: known shortcuts fail its tests, hidden ones included.

Each case puts an answer in place of the solution cell and executes the exercise's test cell
(visible and hidden tests) directly, in this process: the notebook's context cells first, then
the answer, then the test cell, as nbgrader would. A shortcut must make the test cell raise; the
source's own solution must pass. Rank launches of functions that are not the learner's (the
failing jobs of root_cause, predict's `program`) are run once and reused across cases.
"""

from __future__ import annotations

import os
import textwrap

import nbformat
import pytest

from conftest import assert_no_descendants
from dtlab.course.graded import run_graded as real_run_graded

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cells(notebook: str) -> dict[str, str]:
    nb = nbformat.read(os.path.join(ROOT, "notebooks", notebook + ".ipynb"), as_version=4)
    out = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        out[meta.get("grade_id") or f"cell{i}"] = cell.source
    return out


def _solution(source: str) -> str:
    return "\n".join(ln for ln in source.splitlines()
                     if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


# What each exercise's test cell needs from earlier cells (imports, locked cells, helpers).
IMPORTS_00 = "import os\nimport torch\nimport torch.distributed as dist\nimport dtlab\n"
CONTEXT = {
    "00_launch": lambda c: IMPORTS_00 + c["predict_program"],
    "06_nccl": lambda c: "import re\nimport pandas as pd\nfrom dtlab import course, nccl_log\n",
    "07_hangs": lambda c: c["cell1"],
}

_launches: dict = {}


def _cached_run_graded(fn, *args, nprocs=2, **kwargs):
    """run_graded for the test's own rank functions: one real launch per (function, nprocs)."""
    from dtlab import RankError

    key = (fn.__name__, nprocs)
    if key not in _launches:
        try:
            _launches[key] = ("ok", real_run_graded(fn, *args, nprocs=nprocs, **kwargs))
        except RankError as err:
            _launches[key] = ("raise", err)
    how, what = _launches[key]
    if how == "raise":
        raise what
    return what


def grade(notebook: str, exercise: str, answer: str | None = None, reuse_launches=False) -> None:
    """Run `exercise`'s test cell after `answer` (default: the source's solution); raises if a
    test fails."""
    cells = _cells(notebook)
    code = answer if answer is not None else _solution(cells[exercise])
    ns = {"__name__": "__graded__"}  # not importable: cloudpickle ships its functions by value
    exec(compile(CONTEXT[notebook](cells), f"<{notebook} context>", "exec"), ns)
    exec(compile(textwrap.dedent(code), f"<{exercise} answer>", "exec"), ns)
    test = cells[exercise + "_tests"]
    from dtlab import course

    real = course.run_graded
    if reuse_launches:
        course.run_graded = _cached_run_graded
    try:
        exec(compile(test, f"<{exercise}_tests>", "exec"), ns)
    finally:
        course.run_graded = real
        for v in list(ns.values()):  # a failed test cell leaves its learner's process open, as
            if isinstance(v, course.Isolated):  # a kernel would until the name is rebound
                v.close()


def fails(notebook, exercise, answer, **kw):
    """The test cell fails on an assert (a wrong answer, or a refusal, in this process or in a
    rank), not on a broken case."""
    from dtlab import RankError
    from dtlab.course.checks import REFUSAL

    try:
        grade(notebook, exercise, answer, **kw)
    except AssertionError:
        return
    except RankError as err:  # a rank failed: on a refusal, not on a broken case
        assert any(REFUSAL in text for text in err.failures.values()), err
        return
    pytest.fail(f"{notebook} {exercise}: the shortcut passed the test cell")


# ---- 00_launch ----------------------------------------------------------------------------

GATHER_PIDS_SHORTCUTS = {
    # the process table: the ranks are the parent's children, started in rank order
    "process table": '''
def gather_pids():
    import psutil
    return sorted(p.pid for p in psutil.Process(os.getppid()).children())
''',
    # the process table again, in rank order from each rank's environment, after a token barrier
    "process table + barrier": '''
def gather_pids():
    dist.barrier()
    ranks = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                env = open(f"/proc/{name}/environ", "rb").read().split(b"\\0")
            except OSError:
                continue
            if f"MASTER_PORT={os.environ['MASTER_PORT']}".encode() in env:
                rank = [e for e in env if e.startswith(b"RANK=")]
                if rank:
                    ranks[int(rank[0][5:])] = int(name)
    return [ranks[r] for r in sorted(ranks)]
''',
    # the ranks' key-value store: a message board beside the collectives
    "the default store": '''
def gather_pids():
    import torch.distributed.distributed_c10d as c10d
    store, r, n = c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
    store.set(f"pid{r}", str(os.getpid()))
    dist.barrier()   # something for the collective counter
    return [int(store.get(f"pid{i}")) for i in range(n)]
''',
    "torch's store-based all_gather": '''
def gather_pids():
    import datetime
    import torch.distributed.distributed_c10d as c10d
    from torch._C._distributed_c10d import _StoreCollectives
    board = _StoreCollectives(c10d._get_default_store(), dist.get_rank(), dist.get_world_size())
    dist.barrier()
    got = board.all_gather("pids", str(os.getpid()).encode(), datetime.timedelta(seconds=30))
    return [int(p) for p in got]
''',
}


@pytest.mark.parametrize("name", GATHER_PIDS_SHORTCUTS)
def test_gather_pids_shortcut_fails(name):
    fails("00_launch", "gather_pids", GATHER_PIDS_SHORTCUTS[name])
    assert_no_descendants()


def test_gather_pids_solution_passes():  # through all_gather, with the ranks' store refused
    grade("00_launch", "gather_pids")
    assert_no_descendants()


PREDICT_SHORTCUTS = {
    "runs the program": "def predict(world_size):\n    return dtlab.run(program, nprocs=world_size, backend='gloo').values\n",
    "the 2-rank answer for every size": "def predict(world_size):\n    return [[2.0, 1.0]] * world_size\n",
    "runs the program on torch's threaded process group": '''
def predict(world_size):
    import threading, torch.distributed as dist
    from torch.testing._internal.distributed import multi_threaded_pg as mt
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    mt._install_threaded_pg()
    store = dist.HashStore()
    out = [None] * world_size
    def rank(r):
        dist.init_process_group("threaded", rank=r, world_size=world_size, store=store)
        out[r] = program()
        dist.barrier(); dist.destroy_process_group()
    ts = [threading.Thread(target=rank, args=(r,)) for r in range(world_size)]
    [t.start() for t in ts]; [t.join() for t in ts]
    mt._uninstall_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(False)
    return out
''',
}


@pytest.mark.parametrize("name", PREDICT_SHORTCUTS)
def test_predict_shortcut_fails(name):
    fails("00_launch", "predict", PREDICT_SHORTCUTS[name], reuse_launches=True)
    assert_no_descendants()


ROOT_CAUSE_SHORTCUTS = {
    "shortest traceback": "def root_cause(failures):\n    return min(failures, key=lambda r: len(failures[r]))\n",
    "the traceback without all_reduce": '''
def root_cause(failures):
    return next((r for r, t in failures.items() if "all_reduce" not in t), min(failures))
''',
    "the first one given": "def root_cause(failures):\n    return next(iter(failures))\n",
    "not a RuntimeError": '''
def root_cause(failures):
    return next((r for r, t in sorted(failures.items())
                 if not t.strip().splitlines()[-1].startswith("RuntimeError")), min(failures))
''',
    "dtlab's own verdict": '''
def root_cause(failures):
    from dtlab.hang.diagnose import signals
    sigs = {r: signals.tracebacks(t.splitlines(), r, "x") for r, t in failures.items()}
    return next(r for r in sorted(sigs) if any(signals.is_primary(s) for s in sigs[r]))
''',
}


@pytest.mark.parametrize("name", ROOT_CAUSE_SHORTCUTS)
def test_root_cause_shortcut_fails(name):
    fails("00_launch", "root_cause", ROOT_CAUSE_SHORTCUTS[name], reuse_launches=True)


@pytest.mark.parametrize("exercise", ["predict", "root_cause"])
def test_00_solution_passes(exercise):
    grade("00_launch", exercise, reuse_launches=True)
    assert_no_descendants()


# ---- 06_nccl ------------------------------------------------------------------------------

SHORTCUTS_06 = {
    ("transport_channels", "dtlab's parser"): '''
def transport_and_channels(log_text):
    me = nccl_log.parse(log_text).world.members
    view = me[min(me)]
    return {"transport": [t.kind for t in view.transports if t.conn_index in (0, None)][0],
            "channels": int(view.n_channels)}
''',
    ("transport_channels", "dtlab nccl-log in a subprocess"): '''
def transport_and_channels(log_text):
    import json, subprocess, sys, tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(log_text)
    out = json.loads(subprocess.run([sys.executable, "-m", "dtlab", "nccl-log", f.name, "--json"],
                                    capture_output=True, text=True).stdout)
    return {"transport": out["transport"], "channels": out["channels"]}
''',
    ("transport_channels", "the graph search's nChannels"): '''
def transport_and_channels(log_text):
    return {"transport": "P2P/CUMEM",
            "channels": int(re.search(r"nChannels (\\d+)", log_text).group(1))}
''',
    ("transport_channels", "the default run's answer"): '''
def transport_and_channels(log_text):
    return {"transport": "P2P/CUMEM", "channels": 24}
''',
    ("bus_bandwidth", "dtlab.bench.busbw"): '''
import dtlab.bench
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return dtlab.bench.busbw(op, size_bytes, time_us * 1e-6, nranks)
''',
    ("bus_bandwidth", "busbw bound before the test"): '''
from dtlab.bench.formulas import busbw as _busbw
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return _busbw(op, size_bytes, time_us * 1e-6, nranks)
''',
    ("bus_bandwidth", "algbw (right on 2 ranks only)"): '''
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return size_bytes / (time_us * 1e-6) / 1e9
''',
    ("bus_bandwidth", "the all-reduce factor for every op"): '''
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return size_bytes / (time_us * 1e-6) / 1e9 * 2 * (nranks - 1) / nranks
''',
    ("recommend", "tuning.best"): '''
import dtlab.tuning as tuning
def recommend(df, size, min_margin_pct=2.0):
    row = tuning.best(df, size).iloc[0]
    return row["setting"], float(row["margin_pct"])
''',
    ("recommend", "fastest row against the default's own time"): '''
def recommend(df, size, min_margin_pct=2.0):
    rows = df[(df["size"] == size) & (df["status"] == "ok") & (df["wrong"] == 0)]
    base = rows.loc[rows["setting"] == "default", "time_us"].iloc[0]
    best = rows.loc[rows["time_us"].idxmin()]
    margin = (base / best["time_us"] - 1) * 100
    return (best["setting"], float(margin)) if margin > min_margin_pct else ("default", 0.0)
''',
}


@pytest.mark.parametrize("exercise,name", list(SHORTCUTS_06), ids=lambda x: x)
def test_06_shortcut_fails(exercise, name):
    fails("06_nccl", exercise, SHORTCUTS_06[exercise, name])


@pytest.mark.parametrize("exercise", ["transport_channels", "bus_bandwidth", "recommend"])
def test_06_solution_passes(exercise):
    grade("06_nccl", exercise)


# ---- 07_hangs -----------------------------------------------------------------------------

SHORTCUTS_07 = {
    ("classify", "dtlab diagnose in a subprocess"): '''
def classify(evidence_dir):
    import json, subprocess, sys
    out = subprocess.run([sys.executable, "-m", "dtlab", "diagnose", evidence_dir, "--json"],
                         capture_output=True, text=True).stdout
    return json.loads(out)["failure_class"]
''',
    ("classify", "os.system"): '''
def classify(evidence_dir):
    import json, os, sys, tempfile
    out = tempfile.mktemp()
    os.system(f"{sys.executable} -m dtlab diagnose {evidence_dir} --json > {out}")
    return json.load(open(out))["failure_class"]
''',
    ("classify", "the C library's system() through ctypes"): '''
def classify(evidence_dir):
    import ctypes, json, sys, tempfile
    out = tempfile.mktemp()
    ctypes.CDLL(None).system(f"{sys.executable} -m dtlab diagnose {evidence_dir} --json > {out} 2>/dev/null".encode())
    return json.load(open(out))["failure_class"]
''',
    ("classify", "diagnose() in a spawned multiprocessing pool"): '''
def classify(evidence_dir):
    import multiprocessing
    from dtlab.hang.diagnose import diagnose   # pickled by name: the child imports a fresh one
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(diagnose, (evidence_dir,)).failure_class
''',
    ("classify", "diagnose()"): '''
def classify(evidence_dir):
    from dtlab.hang import diagnose
    return diagnose(evidence_dir).failure_class
''',
    ("classify", "the folder's name and labels"): '''
def classify(evidence_dir):
    import json, os
    from dtlab.hang import CLASSES
    for c in CLASSES:
        if c in evidence_dir:
            return c
    for name in ("diagnosis.json", "run.json"):
        p = os.path.join(evidence_dir, name)
        if os.path.exists(p):
            d = json.load(open(p))
            if "failure_class" in d:
                return d["failure_class"]
            kind = d.get("reproducer", {}).get("kind")
            if kind:
                from dtlab.hang import KINDS
                return KINDS[kind].failure_class
    return "rank_died"
''',
    ("diagnosis", "the data README's answer"): '''
def diagnosis(evidence_dir):
    return {"failure_class": "dtype_mismatch", "collective_seq": 3, "watchdog_seq": 5,
            "culprit_ranks": [1], "culprit_site": "kinds.py:115"}
''',
    ("diagnosis", "dtlab's verdict"): '''
def diagnosis(evidence_dir):
    from dtlab.hang import diagnose
    d = diagnose(evidence_dir)
    return {"failure_class": d.failure_class, "collective_seq": 3, "watchdog_seq": 5,
            "culprit_ranks": [1], "culprit_site": "kinds.py:115"}
''',
    ("diagnosis", "the culprit is always rank 1"): None,  # the solution with culprit [1] hard-coded
}


def _always_rank_1() -> str:
    sol = _solution(_cells("07_hangs")["diagnosis"])
    return sol.replace('"culprit_ranks": culprits,', '"culprit_ranks": [1],').replace(
        "site(at[culprits[0]])", "site(at[1])")


@pytest.mark.parametrize("exercise,name", list(SHORTCUTS_07), ids=lambda x: x)
def test_07_shortcut_fails(exercise, name):
    answer = SHORTCUTS_07[exercise, name] or _always_rank_1()
    fails("07_hangs", exercise, answer)
    assert_no_descendants()


@pytest.mark.parametrize("exercise", ["classify", "diagnosis"])
def test_07_solution_passes(exercise):
    grade("07_hangs", exercise)


# ---- 01_collectives -----------------------------------------------------------------------

IMPORTS_01 = ("import inspect\nimport torch\nimport torch.distributed as dist\nimport dtlab\n"
              "from dtlab import collectives, course\n")


def _context_01(c):
    """The imports, and the broken all-gathers of section 2 that check_all_gather's test reuses."""
    broken = next(s for s in c.values() if s.startswith("def all_gather_echo("))
    return IMPORTS_01 + broken.split("\n\nfor impl in")[0] + "\n"


CONTEXT["01_collectives"] = _context_01

SHORTCUTS_01 = {
    ("ring_all_gather", "dist.all_gather inside"): '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    dist.all_gather(tensor_list, tensor, group=group)
''',
    ("ring_all_gather", "the process group's allgather"): '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    dist.group.WORLD.allgather([tensor_list], [tensor]).wait()
''',
    ("ring_all_gather", "all_gather_into_tensor bound before the test"): '''
from torch.distributed.distributed_c10d import all_gather_into_tensor as _agt
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    flat = torch.empty(len(tensor_list) * tensor.numel(), dtype=tensor.dtype)
    _agt(flat, tensor.reshape(-1))
    for t, p in zip(tensor_list, flat.chunk(len(tensor_list))):
        t.copy_(p.view_as(t))
''',
    ("ring_all_gather", "the library's ring all-reduce on a zero-padded buffer"): '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    r, n = dist.get_rank(), dist.get_world_size()
    buf = torch.zeros(n * tensor.numel(), dtype=tensor.dtype)
    buf.view(n, -1)[r] = tensor.reshape(-1)
    collectives.ring_all_reduce(buf)
    for t, p in zip(tensor_list, buf.chunk(n)):
        t.copy_(p.view_as(t))
''',
    ("ring_all_gather", "one exchange with the neighbour (right on 2 ranks only)"): '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    r, n = dist.get_rank(), dist.get_world_size()
    tensor_list[r].copy_(tensor)
    ops = [dist.P2POp(dist.isend, tensor.contiguous(), (r + 1) % n),
           dist.P2POp(dist.irecv, tensor_list[(r - 1) % n], (r - 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
''',
    ("check_all_gather", "collectives.validate"): '''
def check_all_gather(impl):
    return collectives.validate("all_gather", impl, nprocs=dist.get_world_size()).ok
''',
    ("check_all_gather", "each rank judges only itself"): '''
def check_all_gather(impl):
    r, n = dist.get_rank(), dist.get_world_size()
    out = [torch.zeros(3) for _ in range(n)]
    impl(out, torch.arange(3.0) + 10 * r)
    return all(torch.equal(o, torch.arange(3.0) + 10 * q) for q, o in enumerate(out))
''',
    ("check_all_gather", "one call against torch's all_gather"): '''
def check_all_gather(impl):
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.arange(3.0) + 10 * r
    mine, ref = [torch.zeros(3) for _ in range(n)], [torch.zeros(3) for _ in range(n)]
    impl(mine, x)
    dist.all_gather(ref, x)
    ok = torch.tensor([int(all(torch.equal(a, b) for a, b in zip(mine, ref)))])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item())
''',
    ("composed_all_reduce", "dist.all_reduce inside"): '''
def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    dist.all_reduce(tensor, op=op, group=group)
''',
    ("composed_all_reduce", "all_gather everything, reduce locally"): '''
def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor)
    s = torch.stack(out)
    red = {dist.ReduceOp.SUM: s.sum(0), dist.ReduceOp.MAX: s.max(0).values,
           dist.ReduceOp.MIN: s.min(0).values, dist.ReduceOp.PRODUCT: s.prod(0)}
    tensor.copy_(red[op])
''',
    ("composed_all_reduce", "no padding (right when n divides the size)"): '''
def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    n = dist.get_world_size()
    flat = tensor.reshape(-1).clone()
    mine = torch.empty(flat.numel() // n, dtype=tensor.dtype)
    dist.reduce_scatter_tensor(mine, flat[: mine.numel() * n], op=op)
    dist.all_gather_into_tensor(flat[: mine.numel() * n], mine)
    tensor.copy_(flat.view_as(tensor))
''',
}


@pytest.mark.parametrize("exercise,name", list(SHORTCUTS_01), ids=lambda x: x)
def test_01_shortcut_fails(exercise, name):
    fails("01_collectives", exercise, SHORTCUTS_01[exercise, name])
    assert_no_descendants()


@pytest.mark.parametrize("exercise", ["check_all_gather", "ring_all_gather", "composed_all_reduce"])
def test_01_solution_passes(exercise):
    grade("01_collectives", exercise)
    assert_no_descendants()


# ---- every exercise: an answer that only looks right (course.plain) -----------------------

# Objects whose == says yes to anything (builtin subclasses included), and a number that reads
# the constant it is compared with off the caller's bytecode: course.plain refuses them all.
YES = '''
class _Yes:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = object.__hash__
    def __repr__(self): return "?"
class _YesList(_Yes, list): pass
class _YesDict(_Yes, dict): pass
class _YesTuple(_Yes, tuple): pass
class _YesStr(_Yes, str): pass
class _YesFloat(_Yes, float): pass
'''
GUESS = '''
import sys, dis
class _Guess:
    def __init__(self, **kw): self.kw = kw
    def __round__(self, nd=None): return 0.0
    def __format__(self, spec): return "?"
    def __float__(self):
        fr = sys._getframe(1)
        L = fr.f_locals
        if "factors" in L and callable(L.get("f")) and L.get("n") == self.kw.get("nranks"):
            return L["algbw"] * L["f"](L["n"])
        if "r" in L and "col" in L and f"{L['col']}_busbw" in L["r"]:
            return float(L["r"][f"{L['col']}_busbw"])
        ins = list(dis.get_instructions(fr.f_code))
        i = max(k for k, x in enumerate(ins) if x.offset <= fr.f_lasti)
        while i > 0 and ins[i].argval != "isclose": i -= 1
        return next(float(x.argval) for x in ins[i:] if x.opname == "LOAD_CONST"
                    and isinstance(x.argval, float))
'''
YES_TENSOR = '''
class _YesTensor(torch.Tensor):  # compares equal to anything, on the way to the comparison too
    def __ne__(self, other): return torch.zeros(0, dtype=torch.bool)
    def __eq__(self, other): return torch.ones(0, dtype=torch.bool)
    def cpu(self): return self
    def reshape(self, *a): return self
    def double(self): return self
'''
LOOKS_RIGHT = {
    ("00_launch", "gather_pids"): YES + '''
def gather_pids():
    dist.barrier()
    return _YesList([os.getpid()] * dist.get_world_size())
''',
    ("00_launch", "predict"): YES + "def predict(world_size):\n    return _YesList()\n",
    ("00_launch", "root_cause"): YES + "def root_cause(failures):\n    return _Yes()\n",
    ("06_nccl", "transport_channels"): YES + '''
def transport_and_channels(log_text):
    return _YesDict(transport="?", channels=0)
''',
    ("06_nccl", "bus_bandwidth"): YES + '''
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return _YesFloat(0.0)
''',
    ("06_nccl", "bus_bandwidth", "a number that reads the assert"): GUESS + '''
def bus_bandwidth(op, size_bytes, time_us, nranks):
    return _Guess(op=op, nranks=nranks)
''',
    ("06_nccl", "recommend"): YES + GUESS + '''
def recommend(df, size, min_margin_pct=2.0):
    return _YesTuple((_YesStr("?"), _Guess()))
''',
    ("07_hangs", "classify"): YES + "def classify(evidence_dir):\n    return _YesStr('?')\n",
    ("07_hangs", "diagnosis"): YES + '''
def diagnosis(evidence_dir):
    return {k: _Yes() for k in ("failure_class", "collective_seq", "watchdog_seq",
                                "culprit_ranks", "culprit_site")}
''',
    ("01_collectives", "check_all_gather"): YES + "def check_all_gather(impl):\n    return _Yes()\n",
    ("01_collectives", "ring_all_gather"): YES_TENSOR + '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    for i, t in enumerate(tensor_list):  # other objects in the slots it was given
        tensor_list[i] = t.as_subclass(_YesTensor)
''',
    ("01_collectives", "composed_all_reduce"): YES_TENSOR + '''
def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    n = dist.get_world_size()
    x, y = torch.zeros(n), torch.zeros(1)
    dist.reduce_scatter_tensor(y, x)
    dist.all_gather_into_tensor(x, y)
    tensor.__class__ = _YesTensor  # the tensor it was given, now equal to anything
''',
}


@pytest.mark.parametrize("case", list(LOOKS_RIGHT), ids=lambda c: "/".join(c))
def test_answer_that_only_looks_right_fails(case):
    notebook, exercise = case[:2]
    fails(notebook, exercise, LOOKS_RIGHT[case],
          reuse_launches=notebook == "00_launch" and exercise != "gather_pids")
    assert_no_descendants()


def test_01_ring_all_gather_through_the_dispatcher_fails():
    """torch.ops.c10d.allgather_ is torch's all_gather one level down: refused like dist.*."""
    fails("01_collectives", "ring_all_gather", '''
def ring_all_gather(tensor_list, tensor, group=None, async_op=False):
    ops = getattr(__import__("torch"), "ops")  # (torch.ops itself does not pickle)
    pg = (group or dist.group.WORLD).boxed()
    ops.c10d.allgather_([tensor_list], [tensor], pg, True, -1)[1].wait()
''', reuse_launches=False)
