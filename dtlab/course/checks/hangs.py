"""07's checks: evidence folders for ``classify`` and ``diagnosis`` -- neutrally named copies of
the recorded GPU evidence, the same with its code moved, and synthetic folders written here
(Flight Recorder dumps, py-spy dumps, consoles) -- and what a check asserts of the answer.

The cases themselves (which kinds, which calls on which rank, the expected answers) are the
test cell's."""

from __future__ import annotations

import os
import pickle

from ..answer import folder as as_folder
from ..broken import moved_copy, unlabeled_copy
from ..recorded import recorded

HANG = "h200x2-hang"  # the recorded GPU evidence: data/h200x2-hang/<kind>/
KEYS = {"failure_class", "collective_seq", "watchdog_seq", "culprit_ranks", "culprit_site"}
C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"


def _recorded(kind: str) -> str:
    return os.path.dirname(recorded(f"{HANG}/{kind}/run.json", show=False).path)


def unseen(kind: str, into: str) -> str:
    """A neutrally named copy of the recorded evidence of ``kind``, without what names the answer."""
    return unlabeled_copy(_recorded(kind), into)


def moved(kind: str, into: str, rng) -> str:
    """The recorded evidence of ``kind`` as if its job's code had moved: another file, its lines
    further down, its functions renamed (all drawn from ``rng``) -- a table keyed on where the
    bugs sit answers nothing."""
    return moved_copy(_recorded(kind), into, shift=rng.randrange(40, 900),
                      name=rng.choice(["job.py", "loop.py", "step.py"]), file="kinds.py", package="hang")


def synthetic(files: dict, into: str) -> str:
    """An evidence folder written here: {path: text, or a dict pickled as torch pickles dumps}."""
    dst = os.path.join(into, f"case{len(os.listdir(into))}")
    for rel, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        with open(os.path.join(dst, rel), "wb") as f:
            f.write(pickle.dumps(content) if isinstance(content, dict) else content.encode())
    return dst


def _entry(i: int, op: str, numel: int, dtype: str, backend: str, frames: list[dict]) -> dict:
    return {"record_id": i - 1, "collective_seq_id": i, "p2p_seq_id": 0, "pg_id": 0,
            "process_group": ("0", "default_pg"), "profiling_name": f"{backend}:{op}", "is_p2p": False,
            "input_sizes": [[numel]], "input_dtypes": [dtype], "output_sizes": [[numel]],
            "output_dtypes": [dtype], "state": "completed", "frames": frames}


def fr_dump(calls: list[tuple]) -> dict:
    """A Flight Recorder dump (the fields torch writes) of completed gloo calls (op, numel, dtype),
    each made in ``train_step`` at /job/train.py:57."""
    return {"version": "2.10", "pg_config": {}, "entries": [
        _entry(i, op, numel, dtype, "gloo", [{"name": "train_step", "filename": "/job/train.py", "line": 57}])
        for i, (op, numel, dtype) in enumerate(calls, 1)]}


def fr_traces(calls_by_rank: dict) -> dict:
    """{rank: calls} as the files of a synthetic folder: fr/fr_trace_<rank>, :func:`fr_dump`'s."""
    return {f"fr/fr_trace_{r}": fr_dump(calls) for r, calls in calls_by_rank.items()}


def fr_job(calls_by_rank: dict, into: str) -> str:
    """A job folder of SYNTHETIC Flight Recorder dumps, dumps/fr_trace_<rank>, of completed NCCL
    calls: rank -> [(op, numel, dtype, line)], each made through torch's all_reduce from ``step``
    at /job/train.py:<line>."""
    dst = os.path.join(into, f"job{len(os.listdir(into))}", "dumps")
    os.makedirs(dst)
    for rank, calls in calls_by_rank.items():
        entries = [_entry(i, op, numel, dtype, "nccl", [
            {"name": "all_reduce", "filename": "/venv/site-packages/torch/distributed/distributed_c10d.py",
             "line": 3068},
            {"name": "step", "filename": "/job/train.py", "line": line}])
            for i, (op, numel, dtype, line) in enumerate(calls, 1)]
        with open(os.path.join(dst, f"fr_trace_{rank}"), "wb") as f:
            pickle.dump({"version": "2.10", "pg_config": {}, "entries": entries}, f)
    return os.path.dirname(dst)


def code_moved(folder: str, to: str, down: int, file: str = "kinds.py") -> str:
    """``folder``'s Flight Recorder dumps rewritten in place as if the code of ``file`` had moved
    to ``to``, ``down`` lines further down."""
    from ...hang.diagnose.load import plain_pickle

    for name in os.listdir(os.path.join(folder, "fr")):
        path = os.path.join(folder, "fr", name)
        with open(path, "rb") as f:
            dump = plain_pickle(f.read())
        for e in dump["entries"]:
            for fr in e["frames"]:
                if fr["filename"].endswith(file):
                    fr["filename"], fr["line"] = to, fr["line"] + down
        with open(path, "wb") as f:
            pickle.dump(dump, f)
    return folder


def pyspy(pid: int, script: str, frames: list[str]) -> str:
    """py-spy's dump of a one-thread process ``python <script>`` idle in ``frames`` (innermost
    first, each ``"function (file:line)"``)."""
    return (f"Process {pid}: python {script}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            f"Thread {pid} (idle): \"MainThread\"\n" + "".join(f"    {f}\n" for f in frames))


def traceback_of(calls: list[tuple], error: str) -> str:
    """A Python traceback through ``calls`` [(file, line, function, code)], outermost first,
    ending in ``error``."""
    return ("Traceback (most recent call last):\n"
            + "".join(f'  File "{f}", line {n}, in {fn}\n    {code}\n' for f, n, fn, code in calls)
            + error + "\n")


def classified(mine, folder: str, expected: str, what: str) -> None:
    """``classify`` of a read-only copy of ``folder`` is ``expected``."""
    got = mine(as_folder(folder))  # it gets a read-only copy; its answer comes back
    assert got == expected, f"{what}: classify returned {got!r}"
    print(f"ok: {what} -> {got}")


def diagnosed(mine, folder: str, expected: dict, what: str) -> None:
    """``diagnosis`` of a read-only copy of ``folder`` is a dict of :data:`KEYS` that agrees with
    ``expected`` on every key ``expected`` has."""
    got = mine(as_folder(folder))  # it gets a read-only copy; its answer comes back
    assert isinstance(got, dict) and set(got) == KEYS, f"diagnosis() must return a dict with the keys {sorted(KEYS)}"
    wrong = {k: got[k] for k in KEYS if k in expected and got[k] != expected[k]}
    assert not wrong, f"{what}: wrong {wrong}"
    print(f"ok: {what}")
