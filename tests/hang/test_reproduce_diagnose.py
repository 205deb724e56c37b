"""Every failure class, reproduced for real on gloo with 3 ranks, then diagnosed from its evidence.

The diagnosis must name the class, the odd rank out and the collective -- without reading what the
reproducer wrote about itself (``run.json``'s ``reproducer`` section is removed first).
"""

import json
import os
import shutil

import pytest

from conftest import assert_no_descendants
from dtlab.hang import KINDS, diagnose, reproduce
from dtlab.hang.kinds import CULPRIT
from dtlab.runtime import LaunchError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class _Reproductions(dict):
    """Each kind reproduced once, when a test first asks for it (``-k host_oom`` runs one)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, kind):
        try:
            self[kind] = reproduce(kind, nprocs=3, backend="gloo", timeout=20, pg_timeout=5,
                                   out=str(self.root / kind), delay=0.6)
        except LaunchError as e:  # host_oom without a memory cgroup to make: the reason
            self[kind] = e
        assert_no_descendants()
        if isinstance(self[kind], LaunchError):
            pytest.skip(str(self[kind]))
        return self[kind]


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    """Reproduce each kind once (raw run + DETAIL rerun), keep the folders for all tests."""
    os.environ.setdefault("DTLAB_OUTPUT", "none")
    return _Reproductions(tmp_path_factory.mktemp("hang"))


def blind(src: str, dst: str) -> str:
    """A copy of the evidence without anything the reproducer said about the bug it planted."""
    shutil.copytree(src, dst)
    for dirpath, _, files in os.walk(dst):
        for name in files:
            path = os.path.join(dirpath, name)
            if name == "run.json":
                info = json.load(open(path))
                info.pop("reproducer", None)
                json.dump(info, open(path, "w"))
            if name == "diagnosis.json":
                os.remove(path)
    return dst


@pytest.mark.parametrize("kind", list(KINDS))
def test_diagnosis_names_class_culprit_and_collective(kind, evidence, tmp_path):
    rep = evidence[kind]
    expect = KINDS[kind]
    d = diagnose(blind(rep.out, str(tmp_path / "ev")))
    assert d.failure_class == expect.failure_class, d.summary
    want = [0, 1, 2] if kind == "p2p_deadlock" else [CULPRIT]
    assert d.culprit_ranks == want, d.summary
    assert d.collective_seq == expect.seq, d.summary
    assert d.summary and d.evidence
    assert all({"file", "kind", "finding"} <= set(e) for e in d.evidence)
    # the reproduction kept the evidence its docstring promises
    files = os.listdir(rep.out)
    assert "run.json" in files and "rank1.stderr.txt" in files and "diagnosis.json" in files


def test_outcomes_are_the_real_gloo_behaviour(evidence):
    assert evidence["straggler"].outcome == "ok"
    for kind in ("size_mismatch", "rank_killed", "p2p_deadlock"):
        assert evidence[kind].outcome in ("RankError", "HangError"), kind
    # gloo aborts on a size mismatch (a C++ enforce in its transport): the byte count cannot
    # tell a size from a dtype mismatch, so "auto" reran that one with DETAIL, which can
    out = evidence["size_mismatch"].out
    raw = "".join(open(os.path.join(out, f"rank{r}.stderr.txt")).read() for r in range(3))
    # which rank notices first varies from run to run: the receiver that aborts on the byte
    # count, or a peer that sees the connection drop
    assert "doesn't match expected size" in raw or "by peer" in raw
    assert not os.path.exists(os.path.join(out, "detail"))  # its raw evidence sufficed
    detail = os.path.join(evidence["dtype_mismatch"].out, "detail")
    assert evidence["dtype_mismatch"].detail_outcome == "RankError"
    assert any("Detected mismatch between collectives" in open(os.path.join(detail, f)).read()
               for f in os.listdir(detail) if f.endswith("stderr.txt"))


def test_stacks_were_taken_during_the_hang(evidence):
    stacks = os.path.join(evidence["p2p_deadlock"].out, "stacks")
    dumps = [f for f in os.listdir(stacks) if f.startswith("snapshot-")]
    assert len(dumps) == 3
    assert all("send" in open(os.path.join(stacks, f)).read() for f in dumps)


def test_host_oom_is_the_kernels_oom_killer(evidence, tmp_path):
    """The culprit was killed by the kernel (SIGKILL, no traceback) inside its memory cgroup,
    which counted the kill; the cgroup is gone; the diagnosis says so, with the limit."""
    rep = evidence["host_oom"]
    run = json.load(open(os.path.join(rep.out, "run.json")))
    codes = {r["rank"]: r["exit_code"] for r in run["ranks"]}
    assert codes[CULPRIT] == -9 and run["stopped_by_dtlab"] == [], codes
    assert "Traceback" not in open(os.path.join(rep.out, f"rank{CULPRIT}.stderr.txt")).read()
    saved = json.load(open(os.path.join(rep.out, "cgroup-memory.json")))
    group = saved["memory_cgroups"][0]
    assert group["rank"] == CULPRIT and group["oom_kill"] >= 1, group
    limit, peak = group["limit_bytes"], group["peak_bytes"]
    assert 0 < limit < 1 << 30, limit  # a little above what the rank held, not the machine
    assert peak is None or limit // 2 < peak <= limit, (peak, limit)
    assert not os.path.exists(group["path"])  # the group was removed once the ranks ended
    assert rep.detail_outcome is None  # the raw evidence sufficed
    d = diagnose(blind(rep.out, str(tmp_path / "ev")))
    assert (d.failure_class, d.culprit_ranks, d.root_ranks, d.confident) == ("oom", [1], [1], True)
    assert f"by the kernel's OOM killer inside its memory cgroup (limit {limit / 2**20:.1f} MiB)" \
        in d.summary, d.summary
    assert any(e["kind"] == "memory_events" and e["file"] == "cgroup-memory.json"
               for e in d.evidence)


def test_dtlab_hang_json_is_the_only_thing_on_stdout(tmp_path, capfd):
    """The ranks print while they fail (tracebacks, the watchdog): with --json that goes to
    stderr, and stdout is one JSON document -- on 2x H100 it was the ranks' lines, then the JSON."""
    from dtlab.cli import main

    out = tmp_path / "ev"
    assert main(["hang", "rank_exit", "--nprocs", "2", "--backend", "gloo", "--timeout", "30",
                 "--out", str(out), "--no-detail", "--json"]) == 0
    stdout, stderr = capfd.readouterr()
    got = json.loads(stdout)
    assert got["kind"] == "rank_exit" and got["out"] == str(out)
    assert got["diagnosis"]["failure_class"] == "rank_died", got["diagnosis"]["summary"]
    assert "[rank " in stderr  # what the ranks said is still shown, on stderr
