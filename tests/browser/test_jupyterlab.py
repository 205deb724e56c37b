"""The real thing: JupyterLab on localhost, driven in headless Chromium.

A notebook starts a pool with ``%dtlab start -n 2`` and runs a ``%%dtlab`` cell; both ranks'
output must appear in the page (in the per-rank panes). The screenshot is kept in
``test-artifacts/``. Needs Debian's chromium (``apt-get install chromium``); skipped without it
unless DTLAB_REQUIRE_BROWSER=1 (CI sets it, so there it fails instead).
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "test-artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.browser

NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "id": "a",
         "source": "%load_ext dtlab\n%dtlab start -n 2 --backend gloo"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "id": "b",
         "source": "%%dtlab\nprint(f'hello from rank {rank} of {world_size}')"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    if CHROMIUM is None:
        if os.environ.get("DTLAB_REQUIRE_BROWSER"):
            pytest.fail("chromium not found but DTLAB_REQUIRE_BROWSER is set: apt-get install chromium")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    (tmp_path / "smoke.ipynb").write_text(json.dumps(NOTEBOOK))
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.pop("DTLAB_OUTPUT", None)  # a real browser session: per-rank panes
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={tmp_path}",
         "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=True",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("JupyterLab did not start:\n" + server.stdout.read().decode())
                time.sleep(0.3)
        yield base, token
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(server.pid, sig)
                server.wait(wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def test_two_ranks_print_in_jupyterlab(no_orphans, lab):
    from playwright.sync_api import sync_playwright

    base, token = lab
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "jupyterlab-dtlab-pool.png")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/lab/tree/smoke.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                " && window.jupyterapp.shell.currentWidget.sessionContext"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            for r in (0, 1):
                page.wait_for_selector(f"text=hello from rank {r} of 2", timeout=120_000)
            page.screenshot(path=shot, full_page=True)
            text = page.inner_text(".jp-Notebook")
            assert "2 ranks up, backend gloo" in text
            assert "rank 0" in text and "rank 1" in text  # the pane titles
        finally:
            browser.close()
    assert os.path.getsize(shot) > 10_000
    # the server's teardown shuts the kernel down; no_orphans then proves the ranks went too
