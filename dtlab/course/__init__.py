"""The course as an nbgrader course: instructor operations, and what graded cells call.

Instructor (same as ``dtlab course release|validate|autograde|grade|merge|feedback|report``)::

    from dtlab import course
    course.release(out="release")        # student notebooks, solutions and hidden tests stripped
    course.validate()                    # graded: source passes every test, release none
    course.autograde("inbox", jobs=2)    # inbox/<student>/<assignment>/<assignment>.ipynb
    course.report(csv="grades.csv")      # pandas DataFrame of scores

In a test cell (the same code in a learner's JupyterLab and under the grader)::

    mine = course.answer("slow_pairs", without=("dtlab.bench",))   # the learner's function,
    mine(matrix, 0.75)                                             # in a process of its own
    out = course.Ranks(3, offer={"send", "recv"}).run(harness.gathers, "ring_all_gather", calls)
    out.values, out.traffic              # what each rank returned; every message between them
    course.recorded("h200x2-nccl-tests/nt_all_reduce.txt")   # real GPU data, labelled as such
    course.run_graded(program, nprocs=2)                     # the test's own job, on gloo
    run = course.script("train_ddp.py", nprocs=2, args=[...])  # a learner's whole script

Importing this package is cheap (no nbgrader, no pandas, no torch) so notebooks can use it freely.
"""

import sys

# jsonschema's optional RFC 3987 checker (rfc3987_syntax, which JupyterLab's jupyter_events pulls
# in) compiles 39 Lark grammars when jsonschema is imported: 2.2 s of CPU in every process that
# imports nbformat (0.35 s without), paid by the grader once per notebook. Notebook schemas use no
# "iri" format; in this process jsonschema goes without that one check.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)

from .answer import Answer, Folder, answer, folder  # noqa: E402
from .api import Graded, Released, Validation, autograde, feedback, merge, release, report, validate
from .broken import unlabeled_copy
from .context import cell
from .graded import backend, grading, rng, run_graded
from .layout import CourseError, assignment_ids, course_root
from .learner import NotPlain, plain
from .recorded import Recorded, recorded
from .script import ScriptRun, script

__all__ = ["release", "validate", "autograde", "merge", "feedback", "report", "Released",
           "Validation", "Graded", "CourseError", "assignment_ids", "course_root", "run_graded",
           "backend", "grading", "rng", "recorded", "Recorded", "unlabeled_copy", "plain", "NotPlain",
           "answer", "Answer", "folder", "Folder", "cell", "Ranks", "script", "ScriptRun"]


def __getattr__(name):  # the rank machinery imports the runtime: only when a test asks for it
    if name == "Ranks":
        from .ranks import Ranks
        return Ranks
    raise AttributeError(f"module 'dtlab.course' has no attribute {name!r}")
