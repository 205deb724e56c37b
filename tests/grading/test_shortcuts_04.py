"""04_multinode: known shortcuts fail each exercise's test cell (hidden tests included); the
source's solutions pass. The machinery is test_shortcuts.py's (grade, fails, CONTEXT)."""

import pytest

from test_shortcuts import CONTEXT, fails, grade

# imports; EXAMPLE, row and gpu (rank tables); CONSOLES and split_consoles
CONTEXT["04_multinode"] = lambda c: "\n".join((c["cell1"], c["rank_tables"], c["consoles"]))

WHOLE = '{"missing": [], "duplicate_gpus": [], "bad_local_ranks": []}'

SHORTCUTS = {
    ("check_world", "dtlab's own answer"): '''
def check_world(table):
    from dtlab.multinode import check_world as theirs
    r = theirs(table)
    return {k: r[k] for k in ("missing", "duplicate_gpus", "bad_local_ranks")}
''',
    ("check_world", "dtlab's rules read off its module"): '''
def check_world(table):
    import dtlab.multinode.world as W
    r = W.check_world(table)
    return {"missing": r["missing"], "duplicate_gpus": r["duplicate_gpus"],
            "bad_local_ranks": r["bad_local_ranks"]}
''',
    ("check_world", "the visible answers hard-coded"): f'''
def check_world(table):
    if len(table) == 7 and table[-1]["rank"] == 6:
        return {{"missing": [7], "duplicate_gpus": [[5, 6]], "bad_local_ranks": [6]}}
    return {WHOLE}
''',
    ("check_world", "missing counted up to the highest rank present"): '''
def check_world(table):
    top = max(r["rank"] for r in table)
    out = solution(table)
    out["missing"] = sorted(set(range(top + 1)) - {r["rank"] for r in table})
    return out
''',
    ("check_world", "a GPU is its bus id, whatever the host"): '''
def check_world(table):
    out = solution(table)
    by = {}
    for r in table:
        if r["gpu"]:
            by.setdefault(r["gpu"]["bus_id"], []).append(r["rank"])
    out["duplicate_gpus"] = sorted(sorted(v) for v in by.values() if len(v) > 1)
    return out
''',
    ("check_world", "a GPU is its UUID only"): '''
def check_world(table):
    out = solution(table)
    by = {}
    for r in table:
        if r["gpu"]:
            by.setdefault(r["gpu"]["uuid"], []).append(r["rank"])
    out["duplicate_gpus"] = sorted(sorted(v) for v in by.values() if len(v) > 1)
    return out
''',
    ("check_world", "every holder of a repeated local rank flagged"): '''
def check_world(table):
    out = solution(table)
    seen = {}
    for r in table:
        seen.setdefault((r["node"], r["local_rank"]), []).append(r["rank"])
    out["bad_local_ranks"] = sorted(x for v in seen.values() if len(v) > 1 for x in v)
    return out
''',
    ("check_world", "local ranks only checked for repeats, not range"): '''
def check_world(table):
    out = solution(table)
    seen, bad = set(), set()
    for r in sorted(table, key=lambda r: r["rank"]):
        key = (r["node"], r["local_rank"])
        if key in seen:
            bad.add(r["rank"])
        seen.add(key)
    out["bad_local_ranks"] = sorted(bad)
    return out
''',
    ("check_world", "an answer that only looks right"): '''
class _Yes(dict):
    def __eq__(self, other): return True
    def __getitem__(self, key): return []

def check_world(table):
    return _Yes(missing=[], duplicate_gpus=[], bad_local_ranks=[])
''',
    ("name_fault", "dtlab's own diagnosis"): '''
def name_fault(console_text):
    from dtlab.multinode.diagnose import diagnose
    nodes = split_consoles(console_text)
    plan = [{"name": n, "address": "10.0.0.1", "endpoint": "10.0.0.1:29400", "start": True} for n in nodes]
    return diagnose(nodes, {}, None, plan)["failure_class"]
''',
    ("name_fault", "dtlab's patterns borrowed"): '''
def name_fault(console_text):
    import dtlab.multinode.diagnose as D
    if D._IFNAME.search(console_text): return "wrong_ifname"
    if D._NO_ROUTE.search(console_text): return "wrong_master_addr"
    if D._STORE_FAIL.search(console_text):
        return "wrong_port" if D._REFUSED.search(console_text) else "blocked_port"
    return "missing_node"
''',
    ("name_fault", "the visible consoles hard-coded"): '''
def name_fault(console_text):
    for fault, text in CONSOLES.items():
        if text == console_text:
            return fault
    return "missing_node"
''',
    ("name_fault", "keywords of this machine's runs only"): '''
def name_fault(console_text):
    if "eth9" in console_text: return "wrong_ifname"
    if ".250" in console_text: return "wrong_master_addr"
    if "29401" in console_text: return "wrong_port"
    if "6000ms" in console_text: return "blocked_port"
    return "missing_node"
''',
    ("name_fault", "the last node's silence, gloo's wording only"): '''
def name_fault(console_text):
    nodes = split_consoles(console_text)
    if "Unable to find address for" in console_text: return "wrong_ifname"
    if "No route to host" in console_text: return "wrong_master_addr"
    if not list(nodes.values())[-1].strip(): return "missing_node"
    if "Connection refused" in console_text: return "wrong_port"
    return "blocked_port"
''',
    ("name_fault", "'timed out' read as a firewall"): '''
def name_fault(console_text):
    if "Unable to find address" in console_text or "no socket interface" in console_text: return "wrong_ifname"
    if "timed out" in console_text: return "blocked_port"
    if "No route to host" in console_text: return "wrong_master_addr"
    if "Connection refused" in console_text: return "wrong_port"
    return "missing_node"
''',
    ("name_fault", "the rendezvous timeout read as a missing node"): '''
def name_fault(console_text):
    if "RendezvousTimeoutError" in console_text: return "missing_node"
    if "Unable to find address" in console_text or "no socket interface" in console_text: return "wrong_ifname"
    if "No route to host" in console_text: return "wrong_master_addr"
    if "Connection refused" in console_text: return "wrong_port"
    return "blocked_port"
''',
    ("name_fault", "any refusal read as a wrong port"): '''
def name_fault(console_text):
    if "Connection refused" in console_text: return "wrong_port"
    if "Unable to find address" in console_text or "no socket interface" in console_text: return "wrong_ifname"
    if "No route to host" in console_text: return "wrong_master_addr"
    if "TCP client failed" in console_text: return "blocked_port"
    return "missing_node"
''',
    ("name_fault", "an answer that only looks right"): '''
class _Same(str):
    def __eq__(self, other): return True
    __hash__ = str.__hash__

def name_fault(console_text):
    return _Same("wrong_port")
''',
}


def _with_solution(exercise: str, answer: str) -> str:
    """The shortcuts that patch one rule keep the source's solution for the rest (as
    `solution`), so each fails on its own mistake."""
    if "solution(" not in answer:
        return answer
    from test_shortcuts import _cells, _solution

    src = _solution(_cells("04_multinode")[exercise]).replace(f"def {exercise}(", "def solution(", 1)
    return src + "\n" + answer


@pytest.mark.parametrize("exercise,name", list(SHORTCUTS), ids=[f"{e}: {n}" for e, n in SHORTCUTS])
def test_shortcut_fails(exercise, name):
    fails("04_multinode", exercise, _with_solution(exercise, SHORTCUTS[exercise, name]))


@pytest.mark.parametrize("exercise", ["check_world", "name_fault"])
def test_solution_passes(exercise):
    grade("04_multinode", exercise)
