"""nbgrader settings for the dtlab course; `dtlab course ...` and plain `nbgrader ...` both use them.

`dtlab course` loads this file and points CourseDirectory.root at the generated course root
(build/course/ by default, see dtlab/course/layout.py); the nbgrader_config.py written there
loads this file too, so `cd build/course && nbgrader formgrader` sees the same settings.

Grading itself (running the test cells, in isolation) is not nbgrader's: `dtlab course grade`
does it per submission (dtlab/course/grade.py, grading/README.md). nbgrader records the grades:
its autograde runs with Execute replaced by Replay, which puts in the outputs `dtlab course
grade` produced, so the gradebook, formgrader and feedback work as in any nbgrader course.
"""

from dtlab.course.execute import autograde_preprocessors, feedback_preprocessors, sanitize_preprocessors

c = get_config()  # noqa: F821 (defined by traitlets when it runs this file)

c.Autograde.sanitize_preprocessors = sanitize_preprocessors()
c.Autograde.autograde_preprocessors = autograde_preprocessors()

# --- what a submission cannot change -------------------------------------------------------------
# A test cell the student deleted is put back from the gradebook and graded; edited test cells
# are always restored from the source (checksums), whatever this says.
c.OverwriteCells.add_missing_cells = True

# --- what feedback shows ---------------------------------------------------------------------------
# The autograded notebook holds every hidden test's source (nbgrader restores it to run it);
# feedback is what a student reads, and a hidden input read there is no longer hidden (a second
# red team answered three exercises by lookup from it). Feedback clears the hidden blocks, as the
# released notebook does, and shows a test's error as its type and message only: a traceback
# prints the hidden lines around the one that failed.
c.GenerateFeedback.preprocessors = feedback_preprocessors()
