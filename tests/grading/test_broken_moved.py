"""08's hidden "code moved" case (dtlab.course.broken.moved_copy): the job's file renamed, its
lines shifted, and its functions renamed -- a table keyed on the planted lines or on the
functions they sit in (the fourth red team's: "innermost function _stuck_batches ->
missing_collective") finds nothing it knows; what the evidence says still reads."""

import os
import pickle

from dtlab.course.broken import moved_copy, renamed

TRACEBACK = ('  File "/x/dtlab/capstone/hang.py", line 170, in _stuck_batches\n'
             "    time.sleep(3600)\n")
STACK = "Thread 1 (idle): \"MainThread\"\n    _stuck_batches (dtlab/capstone/hang.py:170)\n" \
        "    train_loop (dtlab/capstone/train.py:99)\n"


def test_file_lines_and_functions_move_and_the_rest_stays(tmp_path):
    src = tmp_path / "ev"
    (src / "fr").mkdir(parents=True)
    (src / "rank1.stderr.txt").write_text(TRACEBACK)
    (src / "stacks").mkdir()
    (src / "stacks" / "snapshot-rank1.txt").write_text(STACK)
    dump = {"version": "2.10", "entries": [{"frames": [
        {"filename": "/x/dtlab/capstone/hang.py", "line": 170, "name": "_stuck_batches"},
        {"filename": "/x/dtlab/capstone/train.py", "line": 99, "name": "train_loop"}]}]}
    (src / "fr" / "fr_trace_1").write_bytes(pickle.dumps(dump))
    out = moved_copy(str(src), str(tmp_path), shift=13)
    new = renamed("hang.py", 13)["_stuck_batches"]
    tb = open(os.path.join(out, "rank1.stderr.txt")).read()
    assert tb.startswith(f'  File "/x/dtlab/capstone/trainer.py", line 183, in {new}\n')
    st = open(os.path.join(out, "stacks", "snapshot-rank1.txt")).read()
    assert f"{new} (dtlab/capstone/trainer.py:183)" in st and "train_loop (dtlab/capstone/train.py:99)" in st
    frames = pickle.load(open(os.path.join(out, "fr", "fr_trace_1"), "rb"))["entries"][0]["frames"]
    assert frames[0] == {"filename": "/x/dtlab/capstone/trainer.py", "line": 183, "name": new}
    assert frames[1]["name"] == "train_loop"  # another file's function: untouched
    assert "_stuck_batches" not in tb + st


def test_names_are_drawn_per_shift_and_never_collide():
    a, b = renamed("hang.py", 1), renamed("hang.py", 2)
    assert "_stuck_batches" in a and a != b and len(set(a.values())) == len(a)
