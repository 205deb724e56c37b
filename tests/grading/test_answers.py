"""Tests of the tests: every exercise's test cell, run by the real grader
(``dtlab.course.grade.try_answers``: the grader's kernel, the learner's code in sandboxes), fails
a realistic wrong answer that its visible tests let through -- so the hidden tests are what
catch it -- and fails every known shortcut (tests/grading/answers.py). One grader's kernel per
notebook, for all of its exercises.

The honest reference solutions pass in tests/grading/test_term.py (on a busy machine).
"""

import pytest

from answers import SHORTCUTS, WRONG
from dtlab.course.grade import Try, try_answers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.sandbox]

# the first shortcut of each of 01's exercises is handed in by a student of test_term.py (kai),
# graded there; the others here
GRADED_IN_TERM = {(("01_collectives", e), 0) for e in ("check_all_gather", "ring_all_gather",
                                                       "composed_all_reduce")}
NOTEBOOKS = sorted({aid for aid, _ in WRONG})


def test_every_exercise_has_a_realistic_wrong_answer():
    assert set(SHORTCUTS) <= set(WRONG), set(SHORTCUTS) - set(WRONG)


@pytest.mark.parametrize("aid", NOTEBOOKS)
def test_wrong_answers_pass_the_visible_tests_and_fail_the_hidden_ones(aid, no_orphans):
    wrong = [Try(e, why, make(), ("visible", "hidden")) for (a, e), w in WRONG.items() if a == aid
             for why, make in w]
    shortcuts = [Try(e, why, make()) for (a, e), s in SHORTCUTS.items() if a == aid
                 for i, (why, make) in enumerate(s) if ((a, e), i) not in GRADED_IN_TERM]
    got = try_answers(aid, wrong + shortcuts)
    for t in wrong:
        said = got[(t.solution, t.label)]
        assert said["visible"] == "", f"{aid}/{t.solution}: {t.label!r} should pass the visible " \
                                      f"tests: {said['visible'][:300]}"
        assert said["hidden"], f"{aid}/{t.solution}: the realistic wrong answer {t.label!r} passed " \
                               f"the hidden tests"
    for t in shortcuts:
        said = got[(t.solution, t.label)]["hidden"]
        assert said, f"{aid}/{t.solution}: the shortcut {t.label!r} passed"
        if t.label.endswith("pasted in"):  # refused for what it is, before it runs
            assert "which this exercise takes away" in said, said[:300]
        if t.label.endswith("packed in"):
            assert "bytes of information once compressed" in said, said[:300]
        if t.label.endswith("from dtlab.course.checks"):  # the grader's own machinery: stubbed
            assert "No module named 'dtlab.course.checks'" in said, said[:300]
