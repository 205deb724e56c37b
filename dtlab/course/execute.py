"""``GuardedExecute``: nbgrader's Execute preprocessor, made to survive what student code does.

nbgrader 0.9 executes a submission with nbclient. Per cell, ``Execute.timeout`` bounds the
wait; with ``interrupt_on_timeout`` the kernel gets SIGINT, the cell gets a ``CellTimeoutError``
output and execution goes on (``dtlab.run`` answers SIGINT by stopping every rank, so a
distributed hang ends there too). Two cases still abort the whole submission upstream, and
nbgrader then deletes the autograded notebook and records no scores:

* the kernel dies (``os._exit`` in a cell, a segfault, the OOM killer): ``DeadKernelError``;
* the kernel ignores the interrupt (a C loop, a cell that ignores SIGINT) and sends nothing for
  ``iopub_timeout`` seconds: ``CellTimeoutError`` raised out of nbclient.

Here both end the run at that cell instead: the cell gets an error output that says what
happened, the kernel is killed if it is still alive, and every later code cell gets a "not
run" error output. A grade cell with an error output scores 0 (nbgrader's
``utils.determine_grade``), so work done before the crash keeps its points, work after it
scores nothing, and no test cell can pass by not running. The kernel starts with
``kernel_env`` set (labelled rank output; no GPUs, so grading runs on gloo everywhere).

Enabled in grading/nbgrader_config.py::

    c.Autograde.autograde_preprocessors = autograde_preprocessors()
"""

from __future__ import annotations

import contextlib
import os

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Dict, default


@contextlib.contextmanager
def environ(env: dict[str, str], also_restore: tuple[str, ...] = ()):
    """Set ``env`` in os.environ for a with block; afterwards restore those variables and
    ``also_restore`` as they were, whatever happened in the block."""
    # nbgrader.utils.setenv restores nothing when the body raises; this one always does.
    saved = {k: os.environ.get(k) for k in (*env, *also_restore)}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _error(ename: str, message: str):
    return new_output("error", ename=ename, evalue=message,
                      traceback=[f"\x1b[0;31m{ename}\x1b[0m: {message}"])


def _first_line(cell) -> str:
    # notebooks show no cell numbers: name the cell by how it begins
    line = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
    return f"the one beginning {line[:60]!r}"


class GuardedExecute(Execute):
    """Execute that grades a crashed or unresponsive kernel as failed instead of aborting."""

    _halted = ""  # why the remaining cells are not run; "" while the kernel is usable

    kernel_env = Dict(
        {"DTLAB_OUTPUT": "lines", "CUDA_VISIBLE_DEVICES": ""},
        help="Environment of the grading kernel (and so of the ranks it starts): rank output as "
             "[rank N] lines rather than widgets; no visible GPUs, so graded cells run on "
             "gloo/CPU on every grader and GPU-only observations come from data/.",
    ).tag(config=True)

    cell_timeouts = Dict(
        {},
        help="Per-cell limits in seconds, by nbgrader grade_id, for the few graded cells that "
             "must start several training jobs (08's postmortem test runs four broken jobs); "
             "every other cell gets `timeout`.",
    ).tag(config=True)

    @default("timeout_func")
    def _per_cell_timeout(self):
        def limit(cell):
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            return self.cell_timeouts.get(grade_id, self.timeout)
        return limit

    @default("error_on_timeout")
    def _timeout_message(self):
        return _timeout_error(self.timeout)

    async def _async_handle_timeout(self, timeout, cell=None):
        self.error_on_timeout = _timeout_error(timeout)   # this cell's limit, in the message
        return await super()._async_handle_timeout(timeout, cell)

    def preprocess(self, nb, resources=None, km=None):
        self._halted = ""
        with environ(self.kernel_env):
            return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if self._halted:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error("NotRun", self._halted)]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.log.warning("Kernel died in cell %d; later cells are graded as not run", index)
            cell.outputs.append(_error(
                "DeadKernelError", "the kernel died while running this cell (os._exit? a crash? "
                "out of memory?); the cells after it were not run."))
            self._halted = f"not run: the kernel died in an earlier cell ({_first_line(cell)})."
        except CellTimeoutError:
            self.log.warning("Kernel ignored the interrupt in cell %d; killing it", index)
            cell.outputs.append(_error(
                "CellTimeoutError", f"this cell ran for more than {self._get_timeout(cell)} s and "
                f"did not stop when interrupted, so the kernel was killed; the cells after it "
                f"were not run."))
            self._halted = f"not run: the kernel was killed in an earlier cell ({_first_line(cell)})."
            self._kill_kernel()
        return cell, resources

    def _kill_kernel(self) -> None:
        from nbclient.util import run_sync

        if self.km is not None and run_sync(self.km.is_alive)():
            run_sync(self.km.shutdown_kernel)(now=True)


def _timeout_error(seconds) -> dict:
    msg = (f"this cell ran for more than {seconds} s, the grader's limit for it, and was "
           f"interrupted (an endless loop? ranks waiting for each other?). The cells after it "
           f"were still run.")
    return {"ename": "CellTimeoutError", "evalue": msg,
            "traceback": [f"\x1b[0;31mCellTimeoutError\x1b[0m: {msg}"]}


def _swap_execute(preprocessors: list) -> list:
    if Execute not in preprocessors:
        raise RuntimeError("nbgrader's pipeline has no Execute step to replace; dtlab.course.execute "
                           f"was written for nbgrader 0.9 (got {preprocessors}).")
    return [GuardedExecute if p is Execute else p for p in preprocessors]


def autograde_preprocessors() -> list:
    """nbgrader's autograde pipeline, in its order, with Execute replaced by GuardedExecute."""
    from nbgrader.converters import Autograde

    return _swap_execute(list(Autograde.class_traits()["autograde_preprocessors"].default()))


def validate_preprocessors() -> list:
    """nbgrader's validate pipeline (CheckCellMetadata, ClearOutput, Execute), guarded likewise."""
    from nbgrader.validator import Validator

    return _swap_execute(list(Validator.class_traits()["preprocessors"].default()))
