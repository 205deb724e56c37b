"""08_capstone: known shortcuts fail the postmortem's test cell (hidden tests included); the
source's solution passes. The machinery is test_shortcuts.py's (grade, fails, CONTEXT).

The test cell needs section 4's broken run (``report``) and makes four unseen broken runs with
random culprits and steps; here they come from tests/capstone_runs.py, made once per pytest
process and shared with the hang tests: section 4's run by :func:`section4_report`, the four by
:func:`_once` in place of ``broken_runs``, which also writes the culprit and step of the run it
hands back into the test's specs, so the test's truth is the run's.

    pytest tests/grading/test_shortcuts_08.py --durations=0
"""

import capstone_runs
import pytest

from conftest import assert_no_descendants
from test_shortcuts import CONTEXT, YES, _cells, _solution, fails, grade

from dtlab.course.broken import broken_runs as _REAL


def section4_report():
    """Section 4's run: extra_metric on 3 gloo ranks, culprit rank 1 (shared, made once)."""
    return capstone_runs.run("extra_metric")


def _once(specs, nprocs=3, into=None, **kw):
    """broken_runs, from the runs this pytest process made already (or makes now): one per bug,
    its culprit not rank 1, as fresh unlabeled copies. The specs are set to what was run (the
    test reads its truth from them after this call)."""
    from dtlab.course import unlabeled_copy

    assert nprocs == 3
    out = []
    for spec in specs:
        report = capstone_runs.unseen(spec["bug"])
        spec.update(culprit=report["culprit_rank"], at_step=report["at_step"])
        out.append(unlabeled_copy(report["evidence_dir"], into))
    return out


@pytest.fixture(scope="module", autouse=True)
def _cached_runs():
    import dtlab.course.broken as broken

    broken.broken_runs = _once
    yield
    broken.broken_runs = _REAL


CONTEXT["08_capstone"] = lambda c: (
    c["cell1"] + "\nimport shutil\nshutil.rmtree(WORK)  # the notebook's folder: unused here"
    "\nfrom test_shortcuts_08 import section4_report\nreport = section4_report()\n")


def _with(old: str, new: str) -> str:
    sol = _solution(_cells("08_capstone")["postmortem"])
    assert old in sol, old
    return sol.replace(old, new)


SHORTCUTS = {
    "dtlab's own diagnosis": '''
def postmortem(evidence_dir):
    from dtlab.hang.diagnose import diagnose
    d = diagnose(evidence_dir)
    return {"failure_class": d.failure_class, "culprit": d.culprit_ranks[-1],
            "collective": d.op, "site": None, "fix": "same_collectives"}
''',
    "the capstone's own sites": '''
def postmortem(evidence_dir):
    from dtlab.capstone.hang import _sites
    sites = _sites(evidence_dir, range(3))
    odd = next(r for r, s in sites.items() if list(sites.values()).count(s) == 1)
    return {"failure_class": "op_mismatch", "culprit": int(odd), "collective": "all_gather",
            "site": sites[odd], "fix": "same_collectives"}
''',
    "section 4's answer for every folder": '''
def postmortem(evidence_dir):
    return {"failure_class": "op_mismatch", "culprit": 1, "collective": "all_gather",
            "site": "hang.py:199", "fix": "same_collectives"}
''',
    "the planted bug from run.json": '''
def postmortem(evidence_dir):
    import json
    with open(os.path.join(evidence_dir, "run.json")) as f:
        r = json.load(f)["reproducer"]
    return {"failure_class": {"extra_metric": "op_mismatch", "skip_metric": "op_mismatch",
                              "gather_shapes": "size_mismatch", "stuck_loader": "missing_collective"}[r["kind"]],
            "culprit": r["culprit_rank"], "collective": "all_gather", "site": None, "fix": None}
''',
    # the Flight Recorder alone: right on extra_metric, blind where the culprit left no dump
    "the Flight Recorder only": None,
    # the odd rank is whoever did NOT time out like the others: ignores the gloo size abort
    "no size check": ('    if aborted:', '    if False:'),
    # the site from the first traceback frame in the job, not the innermost
    "outermost frame": ('            frames = re.findall(r"\\((\\S+?):(\\d+)\\)", main)',
                        '            frames = re.findall(r"\\((\\S+?):(\\d+)\\)", main)[::-1]'),
    # an answer key left for later processes (a .pth file every later Python process runs,
    # which could note each hidden run's bug in its folder): writing is refused in the child
    "plants a .pth file": '''
def postmortem(evidence_dir):
    import sysconfig
    with open(os.path.join(sysconfig.get_paths()["purelib"], "zz_answer_key.pth"), "w") as f:
        f.write("import os\\n")
    return {"failure_class": "op_mismatch", "culprit": 1, "collective": "all_gather",
            "site": "hang.py:199", "fix": "same_collectives"}
''',
    "an answer that only looks right": YES + '''
def postmortem(evidence_dir):
    return _YesDict(failure_class=0, culprit=0, collective=0, site=0, fix=0)
''',
}


def _answer(name):
    answer = SHORTCUTS[name]
    if name == "the Flight Recorder only":
        return _with('    aborted = [r for r in ranks', '    aborted = [] and [r for r in ranks')\
            .replace("    missing = [r for r in ranks if r not in calls] or [",
                     "    missing = [")
    if isinstance(answer, tuple):
        return _with(*answer)
    return answer


@pytest.mark.parametrize("name", list(SHORTCUTS))
def test_postmortem_shortcut_fails(name):
    fails("08_capstone", "postmortem", _answer(name))
    assert_no_descendants()


def test_postmortem_solution_passes():
    grade("08_capstone", "postmortem")
    assert_no_descendants()
