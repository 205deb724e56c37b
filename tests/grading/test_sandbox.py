"""The OS sandbox graded code runs in (dtlab.runtime.sandbox, .cgroups): what a sandboxed process
can see, reach and use, tried from inside one, as a submission would."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from dtlab.runtime import sandbox
from dtlab.runtime.cgroups import Cgroup
from dtlab.runtime.sandbox import Box, Limits, View

pytestmark = pytest.mark.sandbox
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in(box, code, view=None, timeout=60):
    """Python code in a new sandbox of ``box``; (exit code, stdout, stderr)."""
    p = box.popen([sys.executable, "-I", "-c", textwrap.dedent(code)], view or View(),
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def test_it_sees_only_the_system_python_and_its_binds(tmp_path, no_orphans):
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "x.txt").write_text("hello")
    with Box("see") as box:
        code, out, err = run_in(box, f"""
            import json, os
            def exists(p): return os.path.exists(p)
            print(json.dumps({{
                "notebooks": exists({os.path.join(REPO, "notebooks")!r}),
                "git": exists({os.path.join(REPO, ".git")!r}),
                "tests": exists({os.path.join(REPO, "tests")!r}),
                "home_root": sorted(os.listdir("/root")),
                "given": open("/given/x.txt").read(),
                "tmp": os.listdir("/tmp"), "cwd": os.getcwd(),
                "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
                "ifaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]),
            }}))
            open("/home/learner/mine.txt", "w").write("ok")
            for path in ("/given/new.txt", "/usr/x", {os.path.join(REPO, "dtlab", "x.py")!r}):
                try:
                    open(path, "w")
                    print("WROTE", path)
                except OSError:
                    pass
            """, View(ro=[(str(tmp_path / "given"), "/given")]))
    assert code == 0, err
    seen = json.loads(out.splitlines()[0])
    assert not seen["notebooks"] and not seen["git"] and not seen["tests"]  # solutions, history
    assert seen["home_root"] in ([], [".pyenv"])  # only the Python installation, if it lives there
    assert seen["given"] == "hello" and seen["tmp"] == [] and seen["cwd"] == "/home/learner"
    assert seen["pids"] == [1, 2]  # bwrap's init and itself: no other process exists for it
    assert seen["caps"] == "0000000000000000"
    assert seen["ifaces"] == ["lo"]
    assert "WROTE" not in out  # read-only binds, system and library
    assert not (tmp_path / "given" / "new.txt").exists()


def test_loopback_is_its_own_not_the_machines(no_orphans):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with Box("net") as box:
            code, out, err = run_in(box, f"""
                import socket
                try:
                    socket.create_connection(("127.0.0.1", {port}), timeout=3)
                    print("CONNECTED")
                except OSError as e:
                    print("refused:", e)
                """)
    finally:
        server.close()
    assert code == 0 and "refused" in out and "CONNECTED" not in out, out + err


@pytest.mark.slow
def test_a_detached_child_dies_with_the_sandbox(no_orphans):
    marker = f"dtlab-test-detached-{os.getpid()}-{time.monotonic_ns()}"

    def marked():
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    code = f"""
import os, signal, sys, time
if os.fork() == 0:          # daemonize: a session of its own, ignores SIGTERM
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
    os._exit(0)
time.sleep(3)               # the parent leaves; its detached grandchild stays behind
"""
    with Box("detach") as box:
        p = box.popen([sys.executable, "-I", "-c", code], View())
        deadline = time.monotonic() + 30
        while not marked() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked(), "the detached child never started"  # else this test proves nothing
        p.wait(timeout=60)
        time.sleep(0.5)
        assert not marked(), "a detached child outlived its sandbox's first process"


def test_fork_and_memory_bombs_end_in_the_box_only(no_orphans):
    with Box("bombs", Limits(memory_bytes=512 << 20, tasks=64)) as box:
        assert box.cgroup is not None, "root here: a cgroup must be made"
        code, out, err = run_in(box, """
            import os
            n = 0
            try:
                while True:
                    if os.fork() == 0:
                        import time; time.sleep(30); os._exit(0)
                    n += 1
            except OSError as e:
                print("fork refused after", n, e.errno)
            """)
        assert "fork refused after" in out and int(out.split()[3]) < 64, out + err
        code, out, err = run_in(box, "x = bytearray(2 << 30); print('allocated')")
        assert code != 0 and "allocated" not in out
        assert box.cgroup.oom_kills() >= 1
        assert box.cpu_seconds() > 0
        dirs = list(box.cgroup.dirs)
    assert not any(os.path.exists(d) for d in dirs), "the cgroup outlived the box"
    assert psutil.virtual_memory().available > 1 << 30  # the machine is fine


def test_unsafe_box_runs_the_same_without_isolation(no_orphans):
    with Box("unsafe", isolate=False) as box:
        code, out, err = run_in(box, "import os; print(os.path.exists('/etc'), os.getcwd())")
    assert code == 0 and out.startswith("True") and "dtlab-unsandboxed-home" in out


def test_cgroup_counts_cpu_of_exited_processes():
    cg = Cgroup.create(f"count-{os.getpid()}", 1 << 30, 32)
    assert cg is not None
    try:
        p = subprocess.Popen(["/bin/sh", "-c", 'echo $$ > "$1"; exec "$2" -c "sum(range(10**7))"',
                              "sh", cg.procs_files[0], sys.executable])
        for extra in cg.procs_files[1:]:  # v1: every hierarchy (a race the Box's wrapper avoids)
            try:
                with open(extra, "w") as f:
                    f.write(str(p.pid))
            except OSError:
                pass
        p.wait()
        assert cg.cpu_seconds() > 0.05
    finally:
        cg.remove()


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "4G", True])
def test_limits_refuse_nonsense(bad):
    with pytest.raises(ValueError, match="positive finite"):
        Limits(memory_bytes=bad)


def test_unavailable_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(sandbox, "_PROBE", {})
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    assert "bubblewrap is not installed" in sandbox.unavailable()
    with pytest.raises(RuntimeError, match="no sandbox on this machine"):
        Box("none")
