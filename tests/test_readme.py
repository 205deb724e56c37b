"""README's promises a newcomer acts on: two commands, and how to reach a remote lab.

Cheap checks of the text, plus the facts it relies on: JupyterLab's default port and address
(so the ssh tunnel to localhost:8888 reaches it) and ``make lab`` passing LAB_ARGS through.
"""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def section(text: str, title: str) -> str:
    start = text.index(f"\n{title}\n")
    end = re.search(r"\n#{1,3} ", text[start + len(title) + 2:])
    return text[start: start + len(title) + 2 + (end.start() if end else len(text))]


def test_quick_start_is_two_commands():
    quick = section(read("README.md"), "## Quick start")
    block = re.search(r"```bash\n(.*?)```", quick, re.S).group(1)
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["make lab", "make test"]


def test_remote_machine_port_tunnel_and_token_url():
    remote = section(read("README.md"), "### On a remote machine")
    assert "8888" in remote and "--port=" in remote  # the default, and how to choose
    assert re.search(r"ssh (-N )?-L 8888:localhost:8888 \S+@\S+", remote)
    assert 'make lab LAB_ARGS="--no-browser"' in remote
    assert "http://127.0.0.1:8888/lab?token=" in remote  # the line to look for
    assert "Or copy and paste one of these URLs" in remote  # what is printed above it
    assert "jupyter server list" in remote


def test_what_the_remote_instructions_rely_on(monkeypatch):
    from jupyter_server.serverapp import ServerApp

    monkeypatch.delenv("JUPYTER_PORT", raising=False)
    app = ServerApp()
    assert app.port == 8888 and app.port_retries > 0  # 8888, else the next free one
    assert app.ip == "localhost"  # loopback: reachable from elsewhere only through the tunnel
    lab_recipe = read("Makefile").split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "$(LAB_ARGS)" in lab_recipe and "dtlab.course.lab" in lab_recipe
