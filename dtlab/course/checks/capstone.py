"""08's checks: what a postmortem of a broken capstone run must say (read off the capstone's own
bugs, fixes and planted lines), the same once the run's code has moved, and what a check asserts
of the learner's answer.

Which runs are made (bugs, culprits, steps, the draws of them) is the test cell's."""

from __future__ import annotations

from ...capstone import hang as capstone_hang
from ..answer import folder as as_folder
from ..broken import moved_copy

KEYS = {"failure_class", "culprit", "collective", "site", "fix"}


def expected(bug: str, folder: str, culprit: int) -> dict:
    """What a postmortem of `bug` must say: the planted line where the bug plants one; where
    skip_metric's culprit went on to (it plants none) is read off its stack."""
    site = (capstone_hang._sites(folder, [culprit])[str(culprit)] if bug == "skip_metric"
            else capstone_hang.bug_site(bug))
    others_in = "all_reduce" if bug == "skip_metric" else "all_gather"
    return {"failure_class": capstone_hang.BUGS[bug].expect_class, "culprit": culprit,
            "collective": others_in, "site": site, "fix": capstone_hang.FIXES[bug]}


def moved(folder: str, truth: dict, into: str, shift: int) -> tuple[str, dict]:
    """``folder`` as if the job's code had moved ``shift`` lines down into trainer.py and been
    tidied (:func:`dtlab.course.broken.moved_copy`), and what its postmortem must say then."""
    file, line = truth["site"].split(":")
    return moved_copy(folder, into, shift), dict(
        truth, site=f"trainer.py:{int(line) + shift}" if file == "hang.py" else truth["site"])


def postmortem_checked(mine, folder: str, truth: dict, what: str) -> None:
    """``postmortem`` of a read-only copy of ``folder`` says ``truth``."""
    got = mine(as_folder(folder))  # it gets a read-only copy; its answer comes back
    assert isinstance(got, dict) and set(got) == KEYS, f"postmortem() must return a dict with the keys {sorted(KEYS)}"
    wrong = {k: got[k] for k in KEYS if got[k] != truth[k]}
    assert not wrong, f"{what}: wrong {wrong}"
    print(f"ok: {what}")
