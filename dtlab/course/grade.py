"""Grade one submission of one assignment: its notebook in, its scores and graded notebook out.

Self-contained (no gradebook, no course folder): ``dtlab course autograde`` runs one of these per
submission, side by side (``--jobs``), or a scheduler runs them on many machines
(``--slurm-script``); merging into the gradebook is a separate step (:mod:`dtlab.course.api`)::

    r = grade("inbox/alice/00_launch/00_launch.ipynb", "00_launch", out="graded/alice/00_launch")
    r.score, r.max_score, r.scores["gather_pids_tests"]

What happens, and where (grading/README.md has the threat model):

1. The submission's locked and test cells are replaced by the course source's (a deleted one is
   put back), as nbgrader does; outputs are cleared.
2. A **kernel of the grader's own**, never given any of the learner's code, runs the test cells
   only. It holds the hidden tests and their data; it reaches the learner's functions only
   through :func:`dtlab.course.answer` and :class:`dtlab.course.Ranks`, which rebuild them from
   the submission's source text in sandboxes (:mod:`dtlab.runtime.sandbox`) and exchange plain
   data (JSON) with them. Its kernel talks over local IPC sockets, not TCP.
3. Every sandbox of the submission is in one cgroup (memory and task limits for all of it
   together; its CPU time). Each call of a learner's function has a CPU budget (``cpu_s``),
   which a busy machine does not change; the wall clock bounds a test cell only as a backstop
   (``timeout``). When the notebook is done, everything left in the cgroup is killed.
4. Scores are nbgrader's own rule (:func:`nbgrader.utils.determine_grade`): a test cell with an
   error output scores 0, else its points. What the grader's kernel writes to stderr (a library
   warning) is its own, not the learner's: it is shown as ordinary output.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from .context import Context, ENV
from .graded import CACHE_ENV, SEED_ENV
from .layout import CourseError, notebooks_dir

TIMEOUT_S = 900.0     # wall-clock backstop per test cell (the grader's own work included)
CPU_S = 60.0          # CPU seconds per call of a learner's function
STARTUP_S = 300.0     # the grader's kernel, on a machine as busy as it gets


@dataclass
class Result:
    """One graded submission: per test cell ``{"score", "max_score", "error"}``."""

    assignment: str
    student: str
    scores: dict = field(default_factory=dict)
    score: float = 0.0
    max_score: float = 0.0
    sandbox: str = ""          # how it was isolated ("bwrap, cgroup v1", or "UNSAFE: ...")
    cpu_s: float = 0.0         # CPU time of everything the submission's code ran
    wall_s: float = 0.0
    submission_sha256: str = ""
    notebook: str = ""         # the graded notebook, when written
    error: str = ""            # why it could not be graded at all (an unreadable notebook)

    @property
    def unsafe(self) -> bool:
        return self.sandbox.startswith("UNSAFE")

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)

    @classmethod
    def load(cls, path: str) -> "Result":
        with open(path) as f:
            return cls(**json.load(f))


def check_limit(value, what: str) -> float:
    """A limit in seconds: a positive finite number, else CourseError naming it."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise CourseError(f"{what} must be a positive number of seconds, got {value!r}")
    return v


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def grade(submission: str, assignment: str, *, out: str | None = None, student: str = "",
          source: str | None = None, only: set[str] | None = None, isolate: bool = True,
          cpu_s: float = CPU_S, timeout: float = TIMEOUT_S, limits=None) -> Result:
    """Grade ``submission`` (a notebook of ``assignment``); write ``out/<assignment>.ipynb`` and
    ``out/result.json`` when ``out`` is given. ``only``: grade these test cells (grade_ids) alone.
    ``isolate=False`` runs the learner's code without a sandbox (``--unsafe-no-sandbox``)."""
    import nbformat

    from ..runtime.cgroups import Cgroup
    from ..runtime.sandbox import Limits, unavailable

    cpu_s, timeout = check_limit(cpu_s, "the CPU limit"), check_limit(timeout, "the timeout")
    limits = limits or Limits()
    if isolate and (why := unavailable()):
        raise CourseError(f"no sandbox: {why}; grade elsewhere, or pass --unsafe-no-sandbox to "
                          f"grade without isolation (every report line will say so)")
    source = source or os.path.join(notebooks_dir(), assignment + ".ipynb")
    started = time.monotonic()
    result = Result(assignment, student, submission_sha256=_sha(submission))
    src = nbformat.read(source, as_version=4)
    try:
        if os.path.getsize(submission) > 64 << 20:
            raise ValueError("the notebook is larger than 64 MB")
        sub = nbformat.read(submission, as_version=4)
    except Exception as e:  # not a notebook at all: every test scores 0, and the reason is kept
        result.error = f"the submission is not a readable notebook: {type(e).__name__}: {e}"
        sub = copy.deepcopy(src)
        for cell in sub.cells:
            if _is_solution(cell):
                cell.source = ""
    nb = restore(sub, src)
    tests = [c for c in nb.cells if _is_test(c) and (only is None or _gid(c) in only)]
    work = tempfile.mkdtemp(prefix="dtlab-grade-")
    os.chmod(work, 0o700)
    cgroup = Cgroup.create(f"grade-{os.getpid()}", limits.memory_bytes, limits.tasks)
    result.sandbox = _describe(isolate, cgroup)
    try:
        _context(assignment, nb, src, work, isolate, cgroup, limits, cpu_s).save(
            os.path.join(work, "context.json"))
        if result.error:  # nothing of the learner's to run: every test scores 0, with the reason
            _not_run(tests, result.error)
        else:
            _run_tests(tests, work, timeout)
        result.cpu_s = cgroup.cpu_seconds() if cgroup else 0.0
    finally:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(work, ignore_errors=True)
    _score(nb, result)
    result.wall_s = round(time.monotonic() - started, 2)
    if out:
        os.makedirs(out, exist_ok=True)
        result.notebook = os.path.join(out, assignment + ".ipynb")
        nbformat.write(nb, result.notebook)
        result.save(os.path.join(out, "result.json"))
    return result


def _context(assignment, nb, src, work, isolate, cgroup, limits, cpu_s) -> Context:
    """What the grader's kernel is told about the submission ``nb`` of the source ``src``."""
    trusted = {_gid(c) for c in src.cells if _is_trusted(c)}
    return Context(assignment, [{"source": c.source, "solution": _is_solution(c),
                                 "grade_id": _gid(c), "trusted": _gid(c) in trusted}
                                for c in nb.cells if c.cell_type == "code"],
                   work, isolate=isolate,
                   cgroup={"version": cgroup.version, "dirs": cgroup.dirs} if cgroup else None,
                   limits=asdict(limits), cpu_s=cpu_s,
                   source=[{"source": c.source, "grade_id": _gid(c), "trusted": _is_trusted(c)}
                           for c in src.cells if c.cell_type == "code"])


HIDDEN_MARK = "[dtlab: the hidden tests start here; what they print is not in the feedback]"


def mark_hidden(test_source: str) -> str:
    r"""The test cell with a line that prints :data:`HIDDEN_MARK` where its hidden tests begin,
    at that line's indentation: the feedback shows the cell's output up to it
    (:class:`dtlab.course.execute.HiddenOutput`), so the learner's own prints on hidden inputs
    -- a table of them, mined over resubmissions -- never reach the learner.

    >>> print(mark_hidden("a = 1\n    ### BEGIN HIDDEN TESTS\n    b = 2"))
    a = 1
        ### BEGIN HIDDEN TESTS
        print('[dtlab: the hidden tests start here; what they print is not in the feedback]')
        b = 2
    """
    out = []
    for line in test_source.splitlines():
        out.append(line)
        if line.strip() == "### BEGIN HIDDEN TESTS":
            out.append(line[:len(line) - len(line.lstrip())] + f"print({HIDDEN_MARK!r})")
    return "\n".join(out)


def visible(test_source: str) -> str:
    r"""A test cell as the learner's copy has it: the hidden tests taken out (as nbgrader's
    release does, markers included).

    >>> visible("a = 1\n### BEGIN HIDDEN TESTS\nb = 2\n### END HIDDEN TESTS\nc = 3")
    'a = 1\nc = 3'
    """
    out, hidden = [], False
    for line in test_source.splitlines():
        if line.strip() == "### BEGIN HIDDEN TESTS":
            hidden = True
        elif line.strip() == "### END HIDDEN TESTS":
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out)


@dataclass(frozen=True)
class Try:
    """One answer to try against a test cell (:func:`try_answers`)."""

    solution: str                         # the solution cell's grade_id
    label: str                            # what the answer is: a realistic mistake, a shortcut
    answer: str                           # the solution cell's source, as a learner hands it in
    versions: tuple[str, ...] = ("hidden",)   # "hidden": the whole test cell; "visible": the learner's copy
    test: str | None = None               # the test cell's grade_id (default <solution>_tests)


def try_answers(assignment: str, tries: list[Try], *, source: str | None = None,
                isolate: bool = True, cpu_s: float = CPU_S, timeout: float = TIMEOUT_S,
                limits=None) -> dict[tuple[str, str], dict[str, str]]:
    """Each answer against its test cell, as the grader grades it: ``{(solution, label):
    {version: ""}}`` where the test passes, else its error. One kernel and one grading session
    for all the tries of the assignment, so hidden inputs made on the spot are made once. How to
    check that a test fails a realistic wrong answer and a shortcut, and passes the honest one
    (tests/grading does it for every exercise)::

        try_answers("02_bandwidth", [Try("slow_pairs", "mean, not median", src, ("visible", "hidden"))])
    """
    import nbformat

    from ..runtime.cgroups import Cgroup
    from ..runtime.sandbox import Limits, unavailable

    limits = limits or Limits()
    if isolate and (why := unavailable()):
        raise CourseError(f"no sandbox: {why}")
    src = nbformat.read(source or os.path.join(notebooks_dir(), assignment + ".ipynb"),
                        as_version=4)
    by_id = {_gid(c): c for c in src.cells if _gid(c)}
    for t in tries:
        for gid in (t.solution, t.test or t.solution + "_tests"):
            if gid not in by_id:
                raise CourseError(f"{assignment} has no cell {gid!r}")
    work = tempfile.mkdtemp(prefix="dtlab-try-")
    os.chmod(work, 0o700)
    cgroup = Cgroup.create(f"try-{os.getpid()}", limits.memory_bytes, limits.tasks)
    cells, runs = [], []
    try:
        for i, t in enumerate(tries):
            nb = copy.deepcopy(src)
            next(c for c in nb.cells if _gid(c) == t.solution).source = t.answer
            path = os.path.join(work, f"context-{i}.json")
            _context(assignment, nb, src, work, isolate, cgroup, limits, cpu_s).save(path)
            test = by_id[t.test or t.solution + "_tests"].source
            for version in t.versions:
                cells.append(nbformat.v4.new_code_cell(f"import os\nos.environ[{ENV!r}] = {path!r}"))
                cells.append(nbformat.v4.new_code_cell(test if version == "hidden" else visible(test)))
                runs.append(((t.solution, t.label), version))
        session = {SEED_ENV: os.environ.get(SEED_ENV) or secrets.token_hex(8),
                   CACHE_ENV: os.environ.get(CACHE_ENV) or os.path.join(work, "session")}
        _run_tests(cells, work, timeout, context=None, env=session)
    finally:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[tuple[str, str], dict[str, str]] = {}
    for (key, version), cell in zip(runs, cells[1::2]):
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        out.setdefault(key, {})[version] = (f"{errors[0].get('ename')}: {errors[0].get('evalue')}"
                                            if errors else "")
    return out


def _describe(isolate: bool, cgroup) -> str:
    limits = f"cgroup v{cgroup.version}" if cgroup else "per-process rlimits"
    if isolate:
        return f"bwrap sandbox, {limits}"
    return f"UNSAFE: no sandbox (--unsafe-no-sandbox), {limits}"


# ---- the notebook ------------------------------------------------------------------------

def _meta(cell) -> dict:
    meta = cell.get("metadata", {})
    meta = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return meta if isinstance(meta, dict) else {}


def _gid(cell) -> str | None:
    gid = _meta(cell).get("grade_id")
    return gid if isinstance(gid, str) else None  # a submission's metadata may be anything


def _is_solution(cell) -> bool:
    return bool(_meta(cell).get("solution"))


def _is_test(cell) -> bool:
    m = _meta(cell)
    return cell.cell_type == "code" and bool(m.get("grade")) and not m.get("solution")


def _is_trusted(cell) -> bool:
    """A cell the course source owns: locked, or a test; never a solution cell."""
    return bool(_gid(cell)) and bool(_meta(cell).get("locked") or _is_test(cell)) \
        and not _is_solution(cell)


def restore(sub, src):
    """The submission with every locked and test cell of the source in place (replaced where the
    learner edited it, put back where deleted, after the cell that precedes it in the source),
    outputs cleared."""
    nb = copy.deepcopy(sub)
    trusted = {_gid(c): c for c in src.cells if _is_trusted(c)}
    cells, seen = [], set()
    for cell in nb.cells:
        gid = _gid(cell)
        if gid in trusted:
            if gid in seen:
                continue  # a duplicated locked cell: keep one
            cell = copy.deepcopy(trusted[gid])
            seen.add(gid)
        elif _meta(cell).get("grade") and not _is_solution(cell):
            continue  # a cell posing as a test the source does not have: not graded
        cells.append(cell)
    order = [_gid(c) for c in src.cells]
    for i, gid in enumerate(order):
        if gid in trusted and gid not in seen:
            before = next((g for g in reversed(order[:i]) if g in {_gid(c) for c in cells}), None)
            at = next((k + 1 for k, c in enumerate(cells) if before and _gid(c) == before), 0)
            cells.insert(at, copy.deepcopy(trusted[gid]))
    nb.cells = cells
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


# ---- the grader's kernel -------------------------------------------------------------------

def _run_tests(tests: list, work: str, timeout: float,
               context: str | None = "context.json", env: dict | None = None) -> None:
    """Execute the test cells, in order, in a fresh kernel of the grader's (IPC transport);
    their outputs are written into the cells. ``context``: the file in ``work`` that tells the
    kernel about the submission (None: the cells set it themselves)."""
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError
    from nbclient.util import run_sync

    if not tests:
        return
    nb = nbformat.v4.new_notebook(cells=[copy.deepcopy(c) for c in tests])
    for cell in nb.cells:
        cell.source = mark_hidden(cell.source)
    # nbclient's own kind of manager (with a blocking one its timeouts do not fire)
    km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(work, "kernel"),
                            connection_file=os.path.join(work, "kernel.json"))
    env = {**os.environ, "DTLAB_OUTPUT": "lines", "CUDA_VISIBLE_DEVICES": "",
           "NBGRADER_EXECUTION": "autograde", **(env or {})}
    env.pop(ENV, None)
    if context:
        env[ENV] = os.path.join(work, context)
    why = (f"this test cell ran for more than {timeout:g} s, the grader's wall-clock backstop, "
           f"and was stopped (a learner's code is bounded by its CPU time, well before this)")
    client = NotebookClient(nb, km=km, timeout=int(math.ceil(timeout)), allow_errors=True,
                            interrupt_on_timeout=True, startup_timeout=int(STARTUP_S),
                            iopub_timeout=30, record_timing=False)
    try:
        client.execute(env=env, cwd=work)
    except DeadKernelError:
        pass  # the cells that did not run get their error below
    except Exception as e:  # the kernel did not start, or nbclient gave up on it
        _not_run(nb.cells, f"the grader's kernel failed: {type(e).__name__}: {e}")
    finally:
        try:
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)
        except Exception:
            pass
    _not_run(nb.cells, "not run: the grader's kernel ended before this cell")
    for cell, done in zip(tests, nb.cells):
        cell.outputs = [_timed_out(o, why) if o.get("ename") == "KeyboardInterrupt" else
                        _own_stderr(o) for o in done.outputs]


def _not_run(cells: list, why: str) -> None:
    import nbformat

    for cell in cells:
        if cell.execution_count is None and not cell.outputs:
            cell.outputs = [nbformat.v4.new_output("error", ename="NotRun", evalue=why,
                                                   traceback=[f"NotRun: {why}"])]


def _timed_out(output, why: str):
    """The interrupt nbclient sends at the timeout (nothing else interrupts the grader's kernel),
    said as what it is."""
    import nbformat

    return nbformat.v4.new_output("error", ename="CellTimeoutError", evalue=why,
                                  traceback=[f"CellTimeoutError: {why}"])


def _own_stderr(output):
    """The grader's kernel's stderr (warnings of the libraries the test uses) as stdout: nbgrader
    scores a test cell with stderr output 0, and it is not the learner's."""
    if output.get("output_type") == "stream" and output.get("name") == "stderr":
        output = copy.deepcopy(output)
        output["name"] = "stdout"
    return output


def _score(nb, result: Result) -> None:
    from nbgrader.utils import determine_grade

    for cell in nb.cells:
        if not _is_test(cell):
            continue
        score, max_score = determine_grade(cell)
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        why = f"{errors[0].get('ename')}: {str(errors[0].get('evalue'))[:500]}" if errors else ""
        result.scores[_gid(cell)] = {"score": score or 0.0, "max_score": max_score, "error": why}
    result.score = sum(s["score"] for s in result.scores.values())
    result.max_score = sum(s["max_score"] for s in result.scores.values())
    if result.error:
        for s in result.scores.values():
            s["error"] = s["error"] or result.error


def main(argv: list[str] | None = None) -> int:
    """``python -m dtlab.course.grade NOTEBOOK ASSIGNMENT OUT``: used by ``autograde --jobs``."""
    args = argv if argv is not None else sys.argv[1:]
    grade(args[0], args[1], out=args[2])
    return 0
