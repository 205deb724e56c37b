# The fifth red team's 07 classify shortcut (6/6 in two sessions before the hidden recorded
# size mismatch): keywords, a table on run.json's exit codes, the sets of ops, dtypes and sizes
# over every dump, no order of evidence. Kept whole; tests/grading/answers.py runs it.
import json
import os
import re

from dtlab.hang.diagnose.load import plain_pickle

# keyword rules + a table on run.json's exit codes; no ordering of evidence, no divergence
EXITS = {(-15, 3): "rank_died", (-15, -9): "rank_died", (-15, 1): "oom", (-6, -6): "p2p_deadlock",
         (0, 0): "straggler"}


def classify(evidence_dir):
    text, frs, codes = "", {}, None
    for root, _, files in os.walk(evidence_dir):
        for n in files:
            p = os.path.join(root, n)
            raw = open(p, "rb").read()
            if n == "run.json":
                codes = tuple(r["exit_code"] for r in json.loads(raw)["ranks"])
            try:
                frs[n] = plain_pickle(raw)["entries"]
                continue
            except Exception:
                text += raw.decode("utf-8", "replace")
    if re.search(r"out of memory|can't allocate", text, re.I):
        return "oom"
    if codes in EXITS:
        return EXITS[codes]
    if "SystemExit" in text:
        return "rank_died"
    if re.search(r"^(KeyError|ValueError|TypeError|IndexError|RuntimeError: [^N])", text, re.M):
        return "exception"
    if frs:
        if len({len(e) for e in frs.values()}) > 1:
            return "missing_collective"
        ent = [e for es in frs.values() for e in es]
        if len({e["profiling_name"] for e in ent}) > 1:
            return "op_mismatch"
        if len({str(e["input_dtypes"]) for e in ent}) > 1:
            return "dtype_mismatch"
        if len({str(e["input_sizes"]) for e in ent}) > 1:
            return "size_mismatch"
    if text.count("send (") >= 2 or text.count("in send") >= 2 or re.search(r"\bsend\b.*\n.*\bsend\b", text):
        return "p2p_deadlock"
    if "[dtlab-step]" in text:
        return "straggler"
    return "timeout_unknown"
