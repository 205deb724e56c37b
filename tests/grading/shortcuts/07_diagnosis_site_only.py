# The fifth red team's 07 diagnosis shortcut (4/4 before a culprit calling from the common
# line): the culprit is whoever called from an unusual line; no vote, no comparison of calls.
import collections
import glob
import os
import re

from dtlab.hang.diagnose.load import plain_pickle


def diagnosis(evidence_dir):
    '''Shortcut: the culprit is whoever issued the divergent call from an unusual line.'''
    tr, wd = {}, []
    for p in glob.glob(os.path.join(evidence_dir, "**", "*"), recursive=True):
        if os.path.isdir(p):
            continue
        raw = open(p, "rb").read()
        m = re.search(r"fr_trace_(\d+)$", p)
        if m:
            tr[int(m.group(1))] = sorted((e for e in plain_pickle(raw)["entries"] if not e.get("is_p2p")),
                                         key=lambda e: e["collective_seq_id"])
        else:
            wd += [int(x) for x in re.findall(r"SeqNum=(\d+)", raw.decode("utf-8", "replace"))]
    key = lambda e: (e["profiling_name"].split(":")[-1], str(e["input_sizes"]), str(e["input_dtypes"]))
    site = lambda e: next(f"{os.path.basename(f['filename'])}:{f['line']}" for f in e["frames"]
                          if "torch" not in f["filename"] and "c10d" not in f["filename"])
    i = 0
    while len({key(t[i]) if i < len(t) else None for t in tr.values()}) == 1:
        i += 1
    at = {r: t[i] for r, t in tr.items() if i < len(t)}
    k = [key(e) for e in at.values()]
    cls = ("op_mismatch" if len({x[0] for x in k}) > 1 else
           "size_mismatch" if len({x[1] for x in k}) > 1 else "dtype_mismatch")
    usual = collections.Counter(site(e) for t in tr.values() for e in t).most_common(1)[0][0]
    culprits = sorted(r for r, e in at.items() if site(e) != usual)
    return {"failure_class": cls, "collective_seq": i + 1, "watchdog_seq": min(wd) if wd else None,
            "culprit_ranks": culprits, "culprit_site": site(at[culprits[0]]) if culprits else None}
