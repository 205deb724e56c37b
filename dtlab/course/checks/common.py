"""What every notebook's checks share: a check bound to the learner's function, and its hidden
form, whose feedback names a case by its number only::

    check = Check(mine, hangs.classified)
    check(folder, "op_mismatch", "recorded op_mismatch")    # judge(mine, folder, ..., what)
    check = check.hidden()                                  # from here: "hidden case 1", ...
"""

from __future__ import annotations

from typing import Callable


class Check:
    """``check(*case, what)`` is ``judge(mine, *case, what)``; once :meth:`hidden`, ``what``
    (the cell's description of the case, for whoever reads the cell) is replaced by the case's
    number in what the check says, passed or failed."""

    def __init__(self, mine: Callable, judge: Callable, label: str | None = None):
        self.mine, self.judge, self.label = mine, judge, label
        self.count = 0

    def __call__(self, *case_and_what):
        *case, what = case_and_what
        if self.label is not None:
            self.count += 1
            what = f"{self.label} {self.count}"
        return self.judge(self.mine, *case, what)

    def hidden(self, label: str = "hidden case") -> "Check":
        """The same check, its cases named ``"<label> 1"``, ``"<label> 2"``, ..."""
        return Check(self.mine, self.judge, label)
