"""nbgrader settings for the dtlab course; `dtlab course ...` and plain `nbgrader ...` both use them.

`dtlab course` loads this file and points CourseDirectory.root at the generated course root
(build/course/ by default, see dtlab/course/layout.py); the nbgrader_config.py written there
loads this file too, so `cd build/course && nbgrader formgrader` sees the same settings.
"""

from dtlab.course.execute import autograde_preprocessors

c = get_config()  # noqa: F821 (defined by traitlets when it runs this file)

# --- executing submissions ---------------------------------------------------------------------
# Per-cell limit. A dtlab.run takes 1.5-3 s on 2 CPU cores; the slowest cell of 00_launch (the
# hang demo: a 5 s dtlab timeout plus stack dumps) about 7 s; graded runs (course.run_graded)
# give up after 20 s. 30 s leaves room for a loaded machine and still bounds an endless loop
# or a distributed hang in a student's cell.
c.Execute.timeout = 30
# Except: 08's postmortem test starts four broken 3-rank training jobs side by side (hidden
# inputs made on the spot), about 40 s on 2 loaded cores. Named by grade_id; a cell of a
# student's that took that name would get the same bound, no more.
c.GuardedExecute.cell_timeouts = {"postmortem_tests": 150}
# On timeout: SIGINT to the kernel (dtlab.run then stops every rank), a CellTimeoutError output
# in that cell, and grading goes on with the next cell.
c.Execute.interrupt_on_timeout = True
# After the interrupt, how long the kernel may take to come back (dtlab.run needs about 1.5 s to
# stop its ranks). A kernel that stays silent longer is killed by GuardedExecute, which grades
# the remaining cells as not run instead of losing the whole submission.
c.Execute.iopub_timeout = 15
# GuardedExecute in place of nbgrader's Execute: survives a dead or unresponsive kernel, and
# starts the kernel with DTLAB_OUTPUT=lines and no visible GPUs (gloo/CPU for every grader).
c.Autograde.autograde_preprocessors = autograde_preprocessors()

# --- what a submission cannot change -------------------------------------------------------------
# A test cell the student deleted is put back from the gradebook and graded; edited test cells
# are always restored from the source (checksums), whatever this says.
c.OverwriteCells.add_missing_cells = True
