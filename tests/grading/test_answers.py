"""Tests of the tests: every exercise's test cell, run by the real grader
(``dtlab.course.grade.try_answers``: the grader's kernel, the learner's code in sandboxes), fails
a realistic wrong answer that its visible tests let through -- so the hidden tests are what
catch it -- and fails every known shortcut (tests/grading/answers.py).

The honest reference solutions pass in tests/grading/test_term.py (on a busy machine).
"""

import pytest

from answers import SHORTCUTS, WRONG
from dtlab.course.grade import try_answers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.sandbox]

# 01's shortcuts are handed in by a student of test_term.py (kai), graded there
GRADED_IN_TERM = {("01_collectives", e) for e in ("check_all_gather", "ring_all_gather",
                                                  "composed_all_reduce")}


@pytest.mark.parametrize("key", list(WRONG), ids=lambda k: f"{k[0]}/{k[1]}")
def test_wrong_answers_pass_the_visible_tests_and_fail_the_hidden_ones(key, no_orphans):
    wrong = {why: make() for why, make in WRONG[key]}
    shortcuts = {} if key in GRADED_IN_TERM else {why: make() for why, make in SHORTCUTS.get(key, [])}
    # one kernel, one grading session: hidden inputs made on the spot (08's runs) are made once
    got = try_answers(*key, {**wrong, **shortcuts}, versions=("visible", "hidden"))
    for why in wrong:
        assert got["visible"][why] == "", f"{key}: {why!r} should pass the visible tests: " \
                                          f"{got['visible'][why][:300]}"
        assert got["hidden"][why], f"{key}: the realistic wrong answer {why!r} passed the hidden tests"
    for why in shortcuts:
        assert got["hidden"][why], f"{key}: the shortcut {why!r} passed"
