"""dtlab diagnose on a folder it did not write (issue 9): only regular files are read, reads are
bounded, and every malformed file is unreadable evidence named in the output -- never a hang, a
memory blow-up or a traceback. Each test takes well under a second."""

import importlib
import json
import os
import pickle
import stat
from collections import OrderedDict

import pytest

from dtlab.hang import NoEvidence, diagnose
from dtlab.cli import main as dtlab

L = importlib.import_module("dtlab.hang.diagnose.load")  # the module (the package exports load())

pytestmark = pytest.mark.timeout(10)

TRACEBACK = ("Traceback (most recent call last):\n  File \"/job/train.py\", line 9, in <module>\n"
             "    step()\nValueError: bad batch\n")


def unreadable(d) -> dict:
    return {e["file"]: e["finding"] for e in d.evidence if e["kind"] == "unreadable"}


@pytest.fixture
def job(tmp_path):
    """A folder with one real piece of evidence, so the rest can be judged beside it."""
    (tmp_path / "rank0.stderr.txt").write_text(TRACEBACK)
    return tmp_path


def test_a_fifo_is_not_opened(job):
    os.mkfifo(job / "rank1.stderr.txt")  # nobody writes to it: reading it would block forever
    d = diagnose(str(job))
    assert d.failure_class == "exception"
    assert "FIFO" in unreadable(d)["rank1.stderr.txt"]


def test_a_symlink_to_a_device_is_not_followed(job):
    os.symlink("/dev/zero", job / "rank1.log")  # read to the end, it never ends
    d = diagnose(str(job))
    assert "symlink" in unreadable(d)["rank1.log"]


def test_a_character_device_is_not_read(job):
    try:
        os.mknod(job / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    d = diagnose(str(job))
    assert "character device" in unreadable(d)["zero"]


def test_the_read_itself_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "link")
    assert L.read_regular(str(tmp_path / "fifo"))[0] is None  # O_NONBLOCK: no wait for a writer
    assert L.read_regular(str(tmp_path / "link"))[0] is None  # O_NOFOLLOW
    assert L.read_regular("/dev/zero")[1] == "a character device, not a regular file"


def test_reads_are_bounded(job, monkeypatch):
    big = job / "rank1.stderr.txt"
    with open(big, "wb") as f:
        f.truncate(L.MAX_BYTES + 1)  # sparse: costs no disk, would cost 64 MiB to read
    d = diagnose(str(job))
    assert "larger than 64 MiB" in unreadable(d)["rank1.stderr.txt"]
    monkeypatch.setattr(L, "MAX_TOTAL", len(TRACEBACK))  # the folder's budget is spent after one
    (job / "rank2.stderr.txt").write_text(TRACEBACK)
    assert "limit" in unreadable(diagnose(str(job)))["rank2.stderr.txt"]


MALFORMED = {
    "entries_not_a_list": {"version": "2.10", "entries": "oops"},
    "entry_not_a_dict": {"version": "2.10", "entries": [5]},
    "seq_is_a_string": {"version": "2.10", "entries": [
        {"collective_seq_id": "1", "profiling_name": "nccl:all_reduce"}]},
    "missing_profiling_name": {"version": "2.10", "entries": [{"collective_seq_id": 1}]},
    "sizes_not_ints": {"version": "2.10", "entries": [
        {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [["a"]]}]},
    "frames_not_dicts": {"version": "2.10", "entries": [
        {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "frames": ["x"]}]},
}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_malformed_flight_recorder_dumps_are_unreadable_evidence(job, name, fmt):
    dump = MALFORMED[name]
    (job / "fr").mkdir()
    blob = pickle.dumps(dump) if fmt == "pickle" else json.dumps(dump).encode()
    (job / "fr" / "fr_trace_1").write_bytes(blob)
    d = diagnose(str(job))  # no traceback
    assert "malformed" in unreadable(d)[os.path.join("fr", "fr_trace_1")]
    assert d.failure_class == "exception"  # the rest of the evidence still counts


@pytest.mark.parametrize("obj, why", [([1, 2, 3], "a pickle of a list"),
                                      (OrderedDict(entries=[], version="2"), "not plain data"),
                                      ({"entries": []}, "a pickle of a dict")])
def test_a_pickle_of_something_else_is_unreadable(job, obj, why):
    (job / "fr_trace_1").write_bytes(pickle.dumps(obj))
    assert why in unreadable(diagnose(str(job)))["fr_trace_1"]


def test_only_unreadable_files_is_no_evidence_and_exit_status_2(tmp_path, capsys):
    os.mkfifo(tmp_path / "rank0.log")
    (tmp_path / "fr_trace_0").write_bytes(pickle.dumps([1]))
    with pytest.raises(NoEvidence, match="rank0.log: a FIFO"):
        diagnose(str(tmp_path))
    assert dtlab(["diagnose", str(tmp_path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_run_json_nested_200k_deep_is_unreadable_evidence(job):
    """json.loads recurses once per level: past Python's limit it raised RecursionError."""
    deep = "[" * 200_000 + "]" * 200_000
    (job / "run.json").write_text('{"nprocs": 2, "backend": "gloo", "ranks": ' + deep + "}")
    d = diagnose(str(job))
    assert "nested deeper" in unreadable(d)["run.json"] and d.failure_class == "exception"


def test_malformed_run_json_is_unreadable(job):
    (job / "run.json").write_text(json.dumps({"nprocs": 2, "backend": "gloo", "ranks": [1, "x"]}))
    d = diagnose(str(job))
    assert "run.json" in unreadable(d)


def test_a_run_json_cut_short_is_named_as_such(job):
    """A run.json cut short (a full disk, a copy stopped halfway) was read as console text."""
    (job / "run.json").write_text('{"nprocs": 2, "backend": "gloo", "ranks": [')
    d = diagnose(str(job))
    assert "not whole JSON" in unreadable(d)["run.json"] and d.failure_class == "exception"
