# The third red team's way through 07 classify ("partly", 6/6): the planted lines of
# dtlab/hang/kinds.py, read off the installed library, as a table from the line a rank stands at
# to the class; for folders without such a line, keyword rules of its own (a dtype named, an op
# named, a rank's exit code, a run that finished). tests/grading/answers.py runs it through the
# real grader: the hidden recorded folders name another file, other lines and other functions
# now, and hidden synthetic traces where the keywords mislead (a size mismatch in a bf16 job, a
# missing reduce_scatter among all_gathers) need the traces read.
import glob
import inspect
import os
import re

import dtlab.hang.kinds as kinds

CLASS = {"size_mismatch": "size_mismatch", "dtype_mismatch": "dtype_mismatch",
         "op_mismatch": "op_mismatch", "skipped_collective": "missing_collective",
         "extra_collective": "missing_collective", "rank_exit": "rank_died",
         "rank_killed": "rank_died", "oom": "oom", "straggler": "straggler",
         "p2p_deadlock": "p2p_deadlock"}


def _table():
    lines, start = inspect.getsourcelines(kinds)
    table, kind = {}, None
    for n, line in enumerate(lines, start or 1):
        m = re.search(r'kind == "(\w+)"', line)
        if m:
            kind = m.group(1)
        if "# <- the bug" in line and kind in CLASS:
            table[n] = CLASS[kind]
        if "_p2p_ring_send_first(world)" in line:
            table[n] = "p2p_deadlock"
    return table


def classify(evidence_dir):
    table = _table()
    text = ""
    for path in glob.glob(os.path.join(evidence_dir, "**", "*"), recursive=True):
        if os.path.isfile(path):
            text += open(path, errors="replace").read()
    for n in map(int, re.findall(r'kinds\.py(?:", line |:)(\d+)', text)):
        if n in table:
            return table[n]
    if "out of memory" in text or "can't allocate memory" in text:
        return "oom"
    run = os.path.join(evidence_dir, "run.json")
    if os.path.exists(run):
        import json

        ranks = json.load(open(run)).get("ranks") or []
        if any(r.get("exit_code") not in (0, None, -15) for r in ranks):  # not stopped by dtlab
            return "rank_died"
        if json.load(open(run)).get("outcome") == "ok":  # it finished: then it was slow
            return "straggler"
    if "KeyError" in text or "ValueError" in text:
        return "exception"
    if "send (" in text:
        return "p2p_deadlock"
    if "BFloat16" in text:
        return "dtype_mismatch"
    if "all_gather" in text:
        return "op_mismatch"
    return "missing_collective"
