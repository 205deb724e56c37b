"""host_oom without starting a rank: the diagnosis rule on synthetic evidence of the shapes a real
run writes (tests/hang/test_reproduce_diagnose.py makes one), the cgroup files read, the refusal.

The three deaths that must not be confused: the kernel's OOM killer (a SIGKILL and a memory
cgroup that counted it), a plain SIGKILL (no memory events: never called OOM), and an allocation
that failed inside the rank (its own error message: OOM, but not the kernel's killer).
"""

import json
import os

import pytest

from dtlab.hang import diagnose, host_oom
from dtlab.hang.reproduce import check_args
from dtlab.runtime import LaunchError
from dtlab.runtime.cgroups import Cgroup

PEER = ("Traceback (most recent call last):\n"
        '  File "/job/train.py", line 140, in training_loop\n    dist.all_reduce(grad)\n'
        '  File "/venv/torch/distributed/distributed_c10d.py", line 3252, in all_reduce\n'
        "    work.wait()\n"
        "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:1975. This is typically caused by a remote worker crashing.\n")
ALLOC = ("Traceback (most recent call last):\n"
         '  File "/job/train.py", line 150, in training_loop\n    batch = load()\n'
         "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
         "allocate memory: you tried to allocate 4611686018427387904 bytes. Error code 12 "
         "(Cannot allocate memory)\n")
LIMIT = 33816576  # what a real run on this machine set: 32 MiB above the group's usage


def evidence(root, code1, stderr1="", oom_kill=None, stopped=()):
    """A 3-rank gloo run where rank 1 ended with ``code1`` at step 2 and ranks 0 and 2 lost it;
    with ``oom_kill`` set, rank 1's memory cgroup as `dtlab hang host_oom` saves it."""
    os.makedirs(root)
    codes = {0: 1, 1: code1, 2: 1}
    with open(os.path.join(root, "run.json"), "w") as f:
        json.dump({"nprocs": 3, "backend": "gloo", "phase": "run", "outcome": "done",
                   "stopped_by_dtlab": list(stopped),
                   "ranks": [{"rank": r, "pid": 100 + r, "exit_code": c, "duration_s": None}
                             for r, c in codes.items()]}, f)
    for r in range(3):
        with open(os.path.join(root, f"rank{r}.stdout.txt"), "w") as f:
            for step in range(3):
                f.write(f"[dtlab-step] rank={r} step={step} phase=collective t={1e9 + step}\n")
        with open(os.path.join(root, f"rank{r}.stderr.txt"), "w") as f:
            f.write(stderr1 if r == 1 else PEER)
    if oom_kill is not None:
        with open(os.path.join(root, "cgroup-memory.json"), "w") as f:
            json.dump({"memory_cgroups": [{
                "rank": 1, "path": "/sys/fs/cgroup/memory/dtlab/hang-host_oom-run-1-abc",
                "cgroup_version": 1, "oom_kill": oom_kill, "limit_bytes": LIMIT,
                "peak_bytes": LIMIT, "failcnt": 0, "files": {}}], "kernel_log": []}, f)
    return str(root)


def test_oom_killed_rank_is_oom_with_the_cgroups_limit(tmp_path):
    d = diagnose(evidence(tmp_path / "ev", -9, oom_kill=1))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == ("oom", [1], [1], True)
    assert d.summary.startswith("Rank 1 was killed (SIGKILL) by the kernel's OOM killer inside "
                                "its memory cgroup (limit 32.2 MiB)"), d.summary
    assert "Host memory" in d.summary
    found = [e for e in d.evidence if e["kind"] == "memory_events"]
    assert found and found[0]["file"] == "cgroup-memory.json"
    assert "oom_kill 1" in found[0]["finding"]


def test_plain_sigkill_is_never_called_oom(tmp_path):
    d = diagnose(evidence(tmp_path / "ev", -9))
    assert (d.failure_class, d.culprit_ranks) == ("rank_died", [1]), d.summary
    assert "killed by SIGKILL; could be the OOM killer; the evidence holds no memory events" \
        in d.summary
    assert "by the kernel's OOM killer" not in d.summary


def test_sigkill_with_a_cgroup_that_counted_no_kill_is_not_the_oom_killer(tmp_path):
    d = diagnose(evidence(tmp_path / "ev", -9, oom_kill=0))
    assert (d.failure_class, d.culprit_ranks) == ("rank_died", [1]), d.summary
    assert "its memory cgroup counted no OOM kill: not the OOM killer" in d.summary


def test_failed_allocation_is_oom_but_not_the_kernels_killer(tmp_path):
    d = diagnose(evidence(tmp_path / "ev", 1, stderr1=ALLOC))
    assert (d.failure_class, d.culprit_ranks) == ("oom", [1]), d.summary
    assert d.summary.startswith("Rank 1 ran out of memory") and "OOM killer" not in d.summary


@pytest.mark.parametrize("code, stopped", [(1, ()), (-9, (1,))])
def test_a_count_alone_does_not_make_the_rank_oom_killed(tmp_path, code, stopped):
    # exit code 1: the rank lived through the kill (a child of it was the one killed);
    # stopped by dtlab: dtlab's own SIGKILL, whatever the group counted
    d = diagnose(evidence(tmp_path / "ev", code, oom_kill=1, stopped=stopped))
    assert d.failure_class != "oom", d.summary
    assert "by the kernel's OOM killer" not in d.summary


def test_memory_events_are_read_from_the_kernels_files(tmp_path):
    v1 = tmp_path / "v1"
    v1.mkdir()
    for name, text in {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
                       "memory.limit_in_bytes": "33816576\n", "memory.failcnt": "7\n",
                       "memory.max_usage_in_bytes": "33800000\n"}.items():
        (v1 / name).write_text(text)
    got = Cgroup([str(v1)], 1).memory_events()
    assert {k: got[k] for k in ("oom_kill", "limit_bytes", "peak_bytes", "failcnt")} == \
        {"oom_kill": 2, "limit_bytes": 33816576, "peak_bytes": 33800000, "failcnt": 7}
    assert got["files"]["memory.oom_control"].endswith("oom_kill 2\n")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 31\noom 1\noom_kill 1\n")
    (v2 / "memory.max").write_text("max\n")  # no limit: not a number of bytes
    got = Cgroup([str(v2)], 2).memory_events()
    assert (got["oom_kill"], got["limit_bytes"], got["peak_bytes"], got["max_events"]) == \
        (1, None, None, 31)


def test_lowering_a_v1_limit_lowers_memory_and_swap(tmp_path):
    (tmp_path / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    Cgroup([str(tmp_path)], 1).limit_memory(1 << 25)
    assert (tmp_path / "memory.limit_in_bytes").read_text() == str(1 << 25)
    assert (tmp_path / "memory.memsw.limit_in_bytes").read_text() == str(1 << 25)


def test_kernel_lines_of_this_group_only():
    lines = ["oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a/dtlab/g1,task=python,pid=7,uid=0",
             "Memory cgroup out of memory: Killed process 7 (python) total-vm:9kB",
             "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a/dtlab/g10,task=x,pid=70,uid=0",
             "Memory cgroup out of memory: Killed process 70 (x) total-vm:9kB", "eth0: link up"]
    assert host_oom.select(lines, "g1") == lines[:2]


def test_refused_in_one_line_where_no_cgroup_can_be_made(monkeypatch, capsys):
    from dtlab.cli import main

    monkeypatch.setattr(host_oom, "_make", lambda what: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("DTLAB_CGROUP", raising=False)
    with pytest.raises(LaunchError, match=r"^kind='host_oom' needs a memory cgroup: making a "
                                          r"memory cgroup needs root"):
        check_args("host_oom", backend="gloo")
    assert main(["hang", "host_oom", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtlab hang: kind='host_oom' needs a memory cgroup: ") and \
        err.count("\n") == 1 and "Traceback" not in err


def test_the_recorded_run_notebook_07_falls_back_on_is_diagnosed_oom():
    """data/cpu-host-oom/host_oom: what 07 shows where no memory cgroup can be made."""
    from dtlab.course.recorded import data_root

    ev = os.path.join(data_root(), "cpu-host-oom", "host_oom")
    d = diagnose(ev)
    assert (d.failure_class, d.culprit_ranks, d.confident) == ("oom", [1], True)
    assert "the kernel's OOM killer" in d.summary and "limit 32.2 MiB" in d.summary
    with open(os.path.join(ev, "diagnosis.json")) as f:   # what the recording command wrote
        assert json.load(f)["failure_class"] == "oom"
