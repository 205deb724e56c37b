"""Warm starts (dtlab.runtime.zygote): a process forked from a zygote runs what it was asked to,
and, moved into a sandbox, is as confined as one bwrap started cold."""

import json
import os
import signal
import textwrap
import time

import psutil
import pytest

from conftest import pid_gone
from dtlab.runtime.sandbox import Box, View
from dtlab.runtime.zygote import Zygote

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = textwrap.dedent('''
    import ctypes, json, os, socket, sys
    libc = ctypes.CDLL(None, use_errno=True)
    status = dict(l.split(":", 1) for l in open("/proc/self/status"))
    try:
        socket.create_connection(("10.0.0.1", 80), timeout=2)
        net = "reached"
    except OSError as e:
        net = str(e)
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    open("/tmp/mine", "w").write(str(os.getpid()))
    print(json.dumps({
        "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
        "no_new_privs": status["NoNewPrivs"].strip(),
        "new_userns": libc.unshare(0x10000000), "new_netns": libc.unshare(0x40000000),
        "net": net, "pids": pids, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
        "sees": {p: os.path.exists(p) for p in sys.argv[1:]},
        "tmp": sorted(os.listdir("/tmp")), "cwd": os.getcwd(), "path0": sys.path[0],
        "env": os.environ.get("PROBE"), "torch_loaded": "torch" in sys.modules,
    }))
''')


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(["json"])
    yield z
    z.close()


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    os.chmod(tmp_path, 0o755)
    path.chmod(0o644)
    return str(path)


def test_a_fork_runs_main_with_its_path_environment_and_folder(zygote, tmp_path, no_orphans):
    probe = _script(tmp_path, "probe.py", PROBE)
    p = zygote.spawn("runpy:run_path", [probe, None, "__main__"], env={"PROBE": "yes"},
                     cwd=str(tmp_path), path=["/nowhere"])
    seen = json.loads(p.stdout.read())
    assert p.wait(10) == 0
    assert seen["env"] == "yes" and seen["cwd"] == str(tmp_path) and seen["path0"] == "/nowhere"
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) <= 4  # + the listing's own


def test_exit_status_and_traceback_come_back(zygote, tmp_path, no_orphans):
    bad = _script(tmp_path, "bad.py", "import sys\nprint('before')\nsys.exit(3)\n")
    p = zygote.spawn("runpy:run_path", [bad, None, "__main__"], env={}, cwd="/")
    assert p.stdout.read() == b"before\n" and p.wait(10) == 3
    p = zygote.spawn("no_such_module:main", [], env={}, cwd="/")
    assert b"ModuleNotFoundError" in p.stdout.read() and p.wait(10) == 1


def test_a_zygote_never_preloads_dtlab():
    with pytest.raises(ValueError, match="preloads no dtlab module"):
        Zygote(["dtlab.course.harness"])


@pytest.mark.sandbox
def test_a_warm_process_in_a_sandbox_is_confined_like_a_cold_one(zygote, tmp_path, no_orphans):
    probe = _script(tmp_path, "probe.py", PROBE)
    secret = tmp_path / "secret"
    secret.mkdir()
    view = View(ro=[(probe, "/probe.py")], env={"PROBE": "boxed"})
    seen = []
    with Box("zygote-test") as box:
        for _ in range(2):  # two sandboxes of one box: nothing shared between them either
            p = box.spawn_warm(zygote, "runpy:run_path", ["/probe.py", None, "__main__"], view)
            seen.append(json.loads(p.stdout.read()))
            assert p.wait(10) == 0
    for s in seen:
        assert s["cap_eff"] == s["cap_bnd"] == "0000000000000000" and s["no_new_privs"] == "1"
        assert s["new_userns"] == -1 and s["new_netns"] == -1
        assert "unreachable" in s["net"]
        assert len(s["pids"]) <= 3  # bwrap's init, the holder, itself: nothing of the machine's
        assert s["tmp"] == ["mine"]  # its own /tmp, not the other sandbox's
        assert s["cwd"] == "/home/learner" and s["env"] == "boxed"


@pytest.mark.sandbox
def test_the_view_hides_the_machine(zygote, tmp_path, no_orphans):
    probe = _script(tmp_path, "probe.py", PROBE.replace("sys.argv[1:]", "json.loads(os.environ['LOOK'])"))
    look = [str(tmp_path), os.path.join(REPO, "tests"), os.path.join(REPO, "notebooks"),
            os.path.join(REPO, ".git"), "/var/lib"]
    view = View(ro=[(probe, "/probe.py")], env={"LOOK": json.dumps(look)})
    with Box("zygote-view") as box:
        p = box.spawn_warm(zygote, "runpy:run_path", ["/probe.py", None, "__main__"], view)
        seen = json.loads(p.stdout.read())
        p.wait(10)
    assert not any(seen["sees"].values()), seen["sees"]


@pytest.mark.sandbox
def test_what_a_warm_process_leaves_behind_dies_with_the_box(zygote, tmp_path, no_orphans):
    stubborn = _script(tmp_path, "stubborn.py", textwrap.dedent('''
        import os, signal, sys, time
        for _ in range(3):
            if os.fork() == 0:
                os.setsid()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                if os.fork() == 0:
                    time.sleep(3600)
                os._exit(0)
        print("ready", flush=True)
        time.sleep(3600)
    '''))
    view = View(ro=[(stubborn, "/stubborn.py")])
    box = Box("zygote-stubborn")
    p = box.spawn_warm(zygote, "runpy:run_path", ["/stubborn.py", None, "__main__"], view)
    assert p.stdout.readline() == b"ready\n"
    time.sleep(0.3)
    if box.cgroup is not None:
        pids = box.cgroup.pids()
    else:  # the detached ones are the sandbox init's now: look under the holder too
        pids = [q.pid for b in box.procs for q in psutil.Process(b.pid).children(recursive=True)]
    # bwrap and the holder; the fork, its child in the sandbox, three detached ones
    assert len(pids) >= 5, pids
    box.close()
    assert all(pid_gone(pid) for pid in pids)
    assert p.wait(10) == -signal.SIGKILL
