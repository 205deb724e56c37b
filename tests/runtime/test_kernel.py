"""A real Jupyter kernel: magics work there, and restart / shutdown leave no rank behind."""

import re

import pytest

start_new_kernel = pytest.importorskip("jupyter_client.manager").start_new_kernel

from conftest import pid_gone  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_orphans")


def run(kc, code, timeout=120):
    out = []

    def collect(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("ERROR " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=collect)
    return reply["content"]["status"], "".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["restart", "shutdown"])
def test_kernel_restart_or_shutdown_leaves_no_rank(how, monkeypatch):
    monkeypatch.setenv("DTLAB_OUTPUT", "lines")
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        status, out = run(kc, "%load_ext dtlab\n%dtlab start -n 2 --backend gloo")
        assert status == "ok", out
        status, out = run(kc, "%%dtlab\nimport os\nprint('PID', os.getpid())")
        assert status == "ok", out
        pids = [int(p) for p in re.findall(r"PID (\d+)", out)]
        assert len(pids) == 2
        if how == "restart":
            km.restart_kernel(now=True)  # SIGKILL: nothing in the kernel gets to clean up
        else:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        assert all(pid_gone(p, 10.0) for p in pids)
    finally:
        if km.is_alive():
            kc.stop_channels()
            km.shutdown_kernel(now=True)
