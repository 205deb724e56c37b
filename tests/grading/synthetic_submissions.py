"""Synthetic student submissions of 00_launch, built from the release and the source notebook.

Each student starts from the student version (what a learner downloads) and fills solution
cells with the source's solutions (marker lines dropped, as a student would never have them),
then does what that student does: nothing, a wrong answer, an edited or deleted test cell, an
endless loop, a distributed hang, a crashed kernel. Nothing here is committed: the notebooks
are written under a pytest tmp folder, in nbgrader's submitted/ layout.
"""

from __future__ import annotations

import os

import nbformat

ASSIGNMENT = "00_launch"
POINTS = {"gather_pids_tests": 3, "predict_tests": 3, "root_cause_tests": 2}

# predict() that forgets the broadcast: each rank keeps its own t[0] (a classic misreading)
WRONG_PREDICT = '''def predict(world_size):
    top = world_size - 1
    return [[float(top + r), float(top * top)] for r in range(world_size)]
'''

# appended to a correct solution cell: ranks that both wait to receive, under a huge timeout
DISTRIBUTED_HANG = '''

def wait_for_each_other():
    t = torch.ones(1)
    dist.recv(t, src=1 - dist.get_rank())  # both ranks receive, nobody sends


dtlab.run(wait_for_each_other, nprocs=2, timeout=3600)
'''

# waits for a condition that never comes (sleeping, so it leaves the CPU to the rest of the
# suite; test_course_execute.py covers a busy loop)
ENDLESS_LOOP = ("import time\n\nwhile not os.path.exists('never.flag'):  # never comes\n"
                "    time.sleep(0.1)\n\n")

KERNEL_CRASH = "import os\n\nos._exit(1)  # takes the kernel down\n"

# appended to a correct root_cause: a look at the test's frame (a rewrite of the grader would go
# with it): scores as the answer does, and is flagged for review
PEEK = "\n\nimport sys\n\n_seen = sys._getframe(0).f_locals  # what can I see from here?\n"

# Expected scores per test cell, and why. Graded in this (alphabetical) order: the stuck and
# crashing one first, so its cell timeouts overlap with other work, and three students are
# graded after its kernel died.
EXPECTED = {
    # a distributed hang after a correct gather_pids (the cell times out; the function exists,
    # its tests pass), an endless loop before predict is defined (times out; predict is missing),
    # then a root_cause cell that kills the kernel (it and every later cell: not run, 0)
    "ava": {"gather_pids_tests": 3, "predict_tests": 0, "root_cause_tests": 0},
    # partly correct, and tampered: predict is wrong and its test replaced by a print (restored:
    # 0); root_cause is right (2; flagged: it peeks at frames) and its test cell deleted (put
    # back from the gradebook)
    "cleo": {"gather_pids_tests": 3, "predict_tests": 0, "root_cause_tests": 2},
    "dora": {"gather_pids_tests": 3, "predict_tests": 3, "root_cause_tests": 2},  # all correct
    "eli": {"gather_pids_tests": 0, "predict_tests": 0, "root_cause_tests": 0},  # release as is
}


def solutions(source_path: str) -> dict[str, str]:
    """grade_id -> the source's solution cell, without the BEGIN/END SOLUTION lines."""
    nb = nbformat.read(source_path, as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = [ln for ln in cell.source.splitlines()
                     if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
            out[meta["grade_id"]] = "\n".join(lines)
    return out


def _cell(nb, grade_id: str):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(grade_id)


def solved(release_path: str, source_path: str):
    """The student version with every solution cell answered as in the source: what a student
    who gets everything right hands in (any notebook; bench/autograde.py uses it too)."""
    nb = nbformat.read(release_path, as_version=4)
    for gid, answer in solutions(source_path).items():
        _cell(nb, gid).source = answer
    return nb


def student_notebook(student: str, release_path: str, source_path: str):
    if student == "eli":
        return nbformat.read(release_path, as_version=4)
    nb = solved(release_path, source_path)
    sol = solutions(source_path)
    if student == "cleo":
        _cell(nb, "predict").source = WRONG_PREDICT
        _cell(nb, "predict_tests").source = 'print("all tests pass")'
        nb.cells.remove(_cell(nb, "root_cause_tests"))
        _cell(nb, "root_cause").source = sol["root_cause"] + PEEK
    elif student == "ava":
        _cell(nb, "gather_pids").source = sol["gather_pids"] + DISTRIBUTED_HANG
        _cell(nb, "predict").source = ENDLESS_LOOP + sol["predict"]
        _cell(nb, "root_cause").source = KERNEL_CRASH
    elif student != "dora":
        raise ValueError(f"no synthetic student {student!r}; have {sorted(EXPECTED)}")
    return nb


# a file that is not a notebook at all (a broken upload): nbgrader cannot grade it
CORRUPT = "zed"


def write_submissions(folder: str, release_path: str, source_path: str,
                      students=tuple(EXPECTED), corrupt: bool = True) -> str:
    """folder/<student>/00_launch/00_launch.ipynb for each student (and the corrupt one);
    returns folder."""
    for student in students:
        path = os.path.join(folder, student, ASSIGNMENT, ASSIGNMENT + ".ipynb")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        nbformat.write(student_notebook(student, release_path, source_path), path)
    if corrupt:
        path = os.path.join(folder, CORRUPT, ASSIGNMENT, ASSIGNMENT + ".ipynb")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write('{"cells": [')
    return folder
