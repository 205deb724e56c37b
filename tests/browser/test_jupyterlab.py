"""The real thing: JupyterLab on localhost, as ``make lab`` starts it, driven in headless Chromium.

* The student lab (``python -m dtlab.course.lab``, what ``make lab`` runs) serves a page config
  that disables nbgrader's instructor plugins and has their server endpoints off, while a plain
  ``jupyter lab`` (the instructor's) has them all: no browser needed, about 4 s a server.
* In Chromium, in the student lab: a notebook starts a pool with ``%dtlab start -n 2`` and runs
  ``%%dtlab`` cells. Both ranks' output appears live in per-rank panes; a wide table printed by
  rank 0 alone gets one full-width pane whose lines do not wrap, rank 1 gets the line "no output";
  when the cell ends the panes are replaced by their static copy, and the notebook saved from the
  page holds each rank's text in plain outputs, no widget view. No Nbgrader menu, no Create
  Assignment panel; the Validate button stays. The screenshot is kept in ``test-artifacts/``.

Needs Debian's chromium (``apt-get install chromium``) for the browser part; skipped without it
unless DTLAB_REQUIRE_BROWSER=1 (CI sets it, so there it fails instead).
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from dtlab.course.lab import HIDDEN_PLUGINS, KEPT_PLUGINS

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "test-artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

TABLE = ("#" + " " * 7 + "size         count      type   redop    root     time   algbw   busbw "
         "#wrong     time   algbw   busbw #wrong")


def cell(cid, source):
    return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "id": cid, "source": source}


NOTEBOOK = {
    "cells": [
        cell("a", "%load_ext dtlab\n%dtlab start -n 2 --backend gloo"),
        cell("b", "%%dtlab\nprint(f'hello from rank {rank} of {world_size}')"),
        # rank 0 alone prints a wide nccl-tests-like table, then stays busy while we look live
        cell("c", "%%dtlab\nimport sys, time\nif rank == 0:\n"
                  f"    print({TABLE!r})\n"
                  "    for i in range(12):\n"
                  "        print(f'{8 << i:>12} {2 << i:>12}     float     sum      -1    "
                  "{i * 1.5:6.2f}    0.00    0.00      0    12.34    0.00    0.00      0  "
                  "row {i} end')\n"
                  "sys.stdout.flush()  # a rank's stdout is a file: block-buffered\n"
                  "time.sleep(3)"),
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on a loopback port, in its own session (so it is killed whole)."""

    def __init__(self, root, student: bool):
        self.root, self.port, self.token = str(root), free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.pop("DTLAB_OUTPUT", None)  # a real browser session: per-rank panes
        launcher = ["-m", "dtlab.course.lab"] if student else ["-m", "jupyterlab"]
        # a file, not a pipe nobody reads while the server runs (a full pipe would block it)
        self.log = open(os.path.join(os.path.dirname(self.root), f"jupyterlab-{self.port}.log"),
                        "w+b")
        self.server = subprocess.Popen(
            [sys.executable, *launcher, "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
             f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}",
             "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=True",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("/api/status")
                return
            except OSError:
                if time.monotonic() > deadline or self.server.poll() is not None:
                    self.log.seek(0)
                    text = self.log.read().decode()
                    self.stop()
                    raise RuntimeError("JupyterLab did not start:\n" + text)
                time.sleep(0.3)

    def get(self, path: str, method: str = "GET") -> tuple[int, str]:
        sep = "&" if "?" in path else "?"
        req = urllib.request.Request(f"{self.base}{path}{sep}token={self.token}", method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    def page_config(self) -> dict:
        """The config JupyterLab embeds in /lab: what the frontend will load and disable."""
        status, page = self.get("/lab")
        assert status == 200
        m = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                      page, re.S)
        return json.loads(m.group(1))

    def stop(self):
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.server.pid, sig)
                self.server.wait(wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        self.log.close()


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("student")
    (root / "smoke.ipynb").write_text(json.dumps(NOTEBOOK))
    lab = Lab(root, student=True)
    yield lab
    lab.stop()


def disabled(config: dict) -> set:
    d = config.get("disabledExtensions", [])
    return {k for k, v in d.items() if v} if isinstance(d, dict) else set(d)


def test_student_lab_hides_instructor_tools(student_lab):
    config = student_lab.page_config()
    assert set(HIDDEN_PLUGINS) <= disabled(config)
    assert not disabled(config) & set(KEPT_PLUGINS)  # Validate stays
    assert "@jupyter/nbgrader" in [e["name"] for e in config["federated_extensions"]]
    # nbgrader's instructor (and exchange) endpoints are not loaded; validate's is
    for path in ("/formgrader", "/formgraders", "/assignments"):
        assert student_lab.get(path)[0] == 404, path
    assert student_lab.get("/assignments/validate")[0] == 405  # POST only: it is there


def test_instructor_lab_keeps_them(tmp_path):
    lab = Lab(tmp_path, student=False)
    try:
        config = lab.page_config()
        assert not disabled(config) & (set(HIDDEN_PLUGINS) | set(KEPT_PLUGINS))
        assert lab.get("/formgraders")[0] == 200
        assert lab.get("/formgrader")[0] == 200
    finally:
        lab.stop()


@pytest.mark.browser
def test_two_ranks_print_in_jupyterlab(no_orphans, student_lab):
    if CHROMIUM is None:
        if os.environ.get("DTLAB_REQUIRE_BROWSER"):
            pytest.fail("chromium not found but DTLAB_REQUIRE_BROWSER is set: apt-get install chromium")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    base, token = student_lab.base, student_lab.token
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "jupyterlab-dtlab-pool.png")
    try:
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
                try:
                    check_student_chrome(page)
                    # not awaited: the panes are checked while the last cell still runs
                    page.evaluate(
                        "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
                    for r in (0, 1):
                        page.wait_for_selector(f"text=hello from rank {r} of 2", timeout=120_000)
                    text = page.inner_text(".jp-Notebook")
                    assert "2 ranks up, backend gloo" in text
                    assert "rank 0" in text and "rank 1" in text  # the pane titles
                    check_wide_output(page, shot)
                    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
                    page.wait_for_function(
                        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                        timeout=30_000)
                except Exception:
                    page.screenshot(path=os.path.join(ARTIFACTS, "jupyterlab-failed.png"),
                                    full_page=True)
                    raise
            finally:
                browser.close()
        assert os.path.getsize(shot) > 10_000
        check_saved(os.path.join(student_lab.root, "smoke.ipynb"))
    finally:
        # shut the kernel down (the server lives on for the module): no_orphans then proves
        # that the pool's ranks went with it
        status, body = student_lab.get("/api/kernels")
        for kernel in json.loads(body or "[]"):
            student_lab.get(f"/api/kernels/{kernel['id']}", method="DELETE")


def check_student_chrome(page):
    """No Nbgrader menu, no Create Assignment panel; the Validate button is there."""
    page.wait_for_selector(".validate-button", timeout=30_000)
    assert page.locator("#jp-mainmenu-nbgrader").count() == 0
    assert "Nbgrader" not in page.inner_text(".lm-MenuBar")
    assert page.locator("#nbgrader-create_assignemnt").count() == 0  # sic: nbgrader's id


def check_wide_output(page, shot):
    """Live: rank 0's table in one full-width pane, every line whole (a line wider than the pane
    wraps inside it, never cut at its edge: no sideways scrolling); rank 1 a 'no output' line.
    Then the static copy replaces the panes with the same text and layout."""
    live = page.wait_for_selector(".dtlab-panes >> text=row 11 end", timeout=60_000)
    assert live is not None
    page.wait_for_selector(".dtlab-panes >> text=rank 1: no output yet", timeout=10_000)
    geometry = page.evaluate("""() => {
        const panes = [...document.querySelectorAll('.dtlab-panes .dtlab-pane')]
            .filter(p => p.offsetParent !== null && p.innerText.includes('row 11 end'));
        const pane = panes[panes.length - 1];
        const pre = pane.querySelector('pre');
        const cell = pane.closest('.jp-OutputArea');
        return {panes: panes.length, whiteSpace: getComputedStyle(pre).whiteSpace,
                scrolls: pane.scrollWidth > pane.clientWidth,
                width: pane.getBoundingClientRect().width, cell: cell.getBoundingClientRect().width};
    }""")
    assert geometry["whiteSpace"] == "pre-wrap" and not geometry["scrolls"], geometry
    assert geometry["width"] > 0.8 * geometry["cell"], geometry  # full width, not a half column
    page.screenshot(path=shot, full_page=True)  # live panes
    page.wait_for_selector(".dtlab-output >> text=row 11 end", timeout=60_000)
    page.wait_for_selector(".dtlab-silent >> text=rank 1: no output", timeout=10_000)
    static = page.evaluate("""() => {
        const outs = [...document.querySelectorAll('.dtlab-output')];
        const last = outs[outs.length - 1];
        const pre = last.querySelector('pre');
        return {ranks: last.querySelectorAll('.dtlab-rank').length,
                whiteSpace: getComputedStyle(pre).whiteSpace, text: pre.innerText,
                widgets: document.querySelectorAll('.dtlab-panes').length};
    }""")
    assert static["ranks"] == 1 and static["whiteSpace"] == "pre-wrap", static
    assert static["widgets"] == 0 and "row 11 end" in static["text"], static
    page.screenshot(path=shot.replace(".png", "-static.png"), full_page=True)


def check_saved(path):
    """The notebook saved by JupyterLab keeps each rank's text in plain outputs."""
    with open(path) as f:
        nb = json.load(f)
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    for r in (0, 1):
        assert f"hello from rank {r} of 2" in html
    assert "row 11 end" in html and "rank 1: no output" in html
