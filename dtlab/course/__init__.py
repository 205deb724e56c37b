"""The course as an nbgrader course: instructor operations, and helpers graded cells call.

Instructor (same as ``dtlab course release|validate|autograde|feedback|report``)::

    from dtlab import course
    course.release(out="release")        # student notebooks, solutions and hidden tests stripped
    course.validate()                    # source passes every test, release fails them
    course.autograde("inbox")            # inbox/<student>/<assignment>/<assignment>.ipynb
    course.report(csv="grades.csv")      # pandas DataFrame of scores

In a notebook::

    course.run_graded(fn, nprocs=2)      # dtlab.run on gloo under nbgrader, quiet, bounded
    course.recorded("h200x2-nccl-tests/nt_all_reduce.txt")   # real GPU data, labelled as such
    with course.refused("dtlab.bench.busbw"): ...               # the library may not answer
    with course.isolated(fn, refuse=("dtlab.bench.*",)) as mine: mine(...)   # ... in a fresh process

Importing this package is cheap (no nbgrader, no pandas) so notebooks can use it freely.
"""

from .checks import NotPlain, counted, plain, refused, secret_pids, unlabeled_copy, with_secret_pid
from .api import Graded, Released, Validation, autograde, feedback, release, report, validate
from .isolate import Isolated, isolated
from .graded import backend, grading, run_graded
from .layout import CourseError, assignment_ids, course_root
from .recorded import Recorded, recorded

__all__ = ["release", "validate", "autograde", "feedback", "report", "Released", "Validation",
           "Graded", "CourseError", "assignment_ids", "course_root", "run_graded", "backend",
           "grading", "recorded", "Recorded", "refused", "counted", "with_secret_pid",
           "secret_pids", "unlabeled_copy", "plain", "NotPlain", "isolated", "Isolated"]
