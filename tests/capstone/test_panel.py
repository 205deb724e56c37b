"""The live GPU panel and the step bar (dtlab/monitor/gpu.py), on CPU: nvidia-smi and NVML are
fakes here (synthetic, recorded-looking output), the notebook display is a fake handle. No rank
starts in this file; tests/capstone/test_capstone_train.py runs the bar and a fake panel around
a real launch.

    .venv/bin/python -m pytest tests/capstone -q -k "panel or train"
"""

import io
import subprocess
import threading
import time
import types

import pytest

from dtlab.capstone.train import progress_mode, train
from dtlab.monitor import gpu as P

# synthetic, in the shape `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,
# memory.total --format=csv,noheader,nounits` prints on a 2x H100 machine mid-training (and a
# MIG-style row whose utilisation is not reported)
SMI_SAMPLE = """\
0, NVIDIA H100 80GB HBM3, 97, 41236, 81559
1, NVIDIA H100 80GB HBM3, 94, 40987, 81559
2, NVIDIA A100-SXM4-40GB, [N/A], 17, 40960
"""


def _done(cmd, **kw):
    return subprocess.CompletedProcess(["nvidia-smi"], 0, stdout=SMI_SAMPLE, stderr="")


class Scripted:
    """A reader that returns the given readings in turn (an Exception in the list is raised)."""

    source = "scripted"

    def __init__(self, *readings):
        self.readings, self.closed, self.calls = list(readings), False, 0

    def read(self):
        self.calls += 1
        got = self.readings[min(self.calls, len(self.readings)) - 1]
        if isinstance(got, Exception):
            raise got
        return got

    def close(self):
        self.closed = True


def _row(gpu, util, used, total=81559.0):
    return {"gpu": gpu, "name": "NVIDIA H100 80GB HBM3", "util": util, "mem_used": used,
            "mem_total": total}


def _panel_threads():
    return [t for t in threading.enumerate() if t.name == "dtlab-gpu-panel"]


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


# --- reading the GPUs ---------------------------------------------------------------------------

def test_parse_smi():
    rows = P.parse_smi(SMI_SAMPLE)
    assert [r["gpu"] for r in rows] == [0, 1, 2]
    assert rows[0] == {"gpu": 0, "name": "NVIDIA H100 80GB HBM3", "util": 97.0,
                       "mem_used": 41236.0, "mem_total": 81559.0}
    assert rows[2]["util"] is None and rows[2]["mem_total"] == 40960.0   # [N/A]: unknown, not 0
    assert P.parse_smi("0, Tesla V100, PCIe, 3, 5, 16384\n")[0]["name"] == "Tesla V100, PCIe"
    assert P.parse_smi("\n") == []
    with pytest.raises(ValueError):
        P.parse_smi("No devices were found")


def test_smi_reader_runs_the_query_with_a_timeout():
    seen = {}

    def runner(cmd, **kw):
        seen.update(cmd=cmd, **kw)
        return _done(cmd)

    rows = P.SmiReader("/usr/bin/nvidia-smi", runner).read()
    assert len(rows) == 3
    assert seen["cmd"] == ["/usr/bin/nvidia-smi",
                           "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
                           "--format=csv,noheader,nounits"]
    assert seen["timeout"] == P.SMI_TIMEOUT and seen["text"] and seen["capture_output"]
    broken = P.SmiReader("nvidia-smi", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the driver"))
    with pytest.raises(RuntimeError, match="exited 9: NVIDIA-SMI has failed"):
        broken.read()


def _no_nvml():
    raise ImportError("No module named 'pynvml'")


def test_find_reader_without_a_gpu_says_why():
    reader, why = P.find_reader(_no_nvml, which=lambda name: None)
    assert reader is None
    assert why == "pynvml is not installed; no nvidia-smi on PATH"

    def failing(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, P.SMI_TIMEOUT)

    reader, why = P.find_reader(_no_nvml, which=lambda n: "/usr/bin/nvidia-smi", runner=failing)
    assert reader is None and "nvidia-smi failed" in why and "timed out" in why
    empty = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", "")  # noqa: E731
    reader, why = P.find_reader(_no_nvml, which=lambda n: "/usr/bin/nvidia-smi", runner=empty)
    assert reader is None and why.endswith("nvidia-smi lists no GPU")


def test_find_reader_falls_back_to_nvidia_smi():
    reader, why = P.find_reader(_no_nvml, which=lambda n: "/usr/bin/nvidia-smi", runner=_done)
    assert why is None and reader.source == "nvidia-smi" and reader.exe == "/usr/bin/nvidia-smi"


def fake_pynvml(count=2, fail_init=False):
    """Just the pynvml calls the panel makes; memory in bytes as NVML gives it."""
    nv = types.SimpleNamespace(NVMLError=type("NVMLError", (Exception,), {}), log=[])

    def init():
        if fail_init:
            raise nv.NVMLError("Driver Not Loaded")
        nv.log.append("init")

    def util(h):
        if h == 1:
            raise nv.NVMLError("Not Supported")
        return types.SimpleNamespace(gpu=80 + h, memory=10)

    nv.nvmlInit, nv.nvmlShutdown = init, lambda: nv.log.append("shutdown")
    nv.nvmlDeviceGetCount = lambda: count
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    nv.nvmlDeviceGetUtilizationRates = util
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        used=(h + 1) * 2**30, total=140 * 2**30, free=0)
    return nv


def test_nvml_first_and_shut_down_on_close():
    nv = fake_pynvml()
    reader, why = P.find_reader(lambda: nv, which=lambda n: pytest.fail("nvidia-smi asked"))
    assert why is None and reader.source == "nvml"
    rows = reader.read()
    assert rows[0] == {"gpu": 0, "name": "NVIDIA H200", "util": 80.0, "mem_used": 1024.0,
                       "mem_total": 140 * 1024.0}
    assert rows[1]["util"] is None and rows[1]["mem_used"] == 2048.0
    reader.close()
    assert nv.log == ["init", "shutdown"]


def test_nvml_that_fails_or_sees_nothing_gives_way_to_nvidia_smi():
    nv = fake_pynvml(fail_init=True)
    reader, _ = P.find_reader(lambda: nv, which=lambda n: "nvidia-smi", runner=_done)
    assert reader.source == "nvidia-smi"
    nv = fake_pynvml(count=0)
    reader, why = P.find_reader(lambda: nv, which=lambda n: None)
    assert reader is None and why.startswith("NVML sees no GPU") and nv.log[-1] == "shutdown"


# --- the panel: no GPU, thread lifetime, failures -----------------------------------------------

def test_no_gpu_one_line_no_thread(monkeypatch):
    monkeypatch.setattr(P, "find_reader", lambda: (None, "pynvml is not installed; no "
                                                         "nvidia-smi on PATH"))
    out = io.StringIO()
    with P.GpuPanel(notebook=False, stream=out, show_off=True) as panel:
        assert panel._thread is None and not _panel_threads()
    assert out.getvalue() == ("GPU panel off: pynvml is not installed; no nvidia-smi on PATH\n")
    assert panel.summary() is None and panel.samples == []
    quiet = io.StringIO()   # train(panel=None) outside a notebook: not a word
    with P.GpuPanel(notebook=False, stream=quiet):
        pass
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("exc", [ValueError("the body failed"), KeyboardInterrupt()])
def test_thread_stops_when_the_body_raises(exc):
    reader = Scripted([_row(0, 50.0, 1000.0)])
    with pytest.raises(type(exc)):
        with P.GpuPanel(interval=0.02, reader=reader, notebook=False, stream=io.StringIO()) as p:
            assert p.running
            time.sleep(0.1)
            raise exc
    assert not p.running and not _panel_threads()
    assert reader.closed and reader.calls >= 2 and p.summary()["polls"] == reader.calls


def test_failing_polls_never_raise_and_turn_the_gpu_side_off():
    reader = Scripted(OSError("nvidia-smi: driver hiccup"))
    with P.GpuPanel(interval=0.01, reader=reader, notebook=False, stream=io.StringIO()) as p:
        deadline = time.monotonic() + 5
        while p.reader is not None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert reader.calls == P.MAX_ERRORS and reader.closed
    s = p.summary()
    assert s["errors"] == P.MAX_ERRORS and s["polls"] == 0 and s["gpus"] == []
    assert s["off"].startswith(f"stopped after {P.MAX_ERRORS} failed polls (OSError")
    assert "note: stopped after" in p.format_summary()


def test_a_good_poll_resets_the_failure_count():
    r = _row(0, 10.0, 1.0)
    p = P.GpuPanel(reader=Scripted(*[OSError("x")] * (P.MAX_ERRORS - 1), [r], OSError("y"),
                                   [r]), notebook=False)
    for _ in range(P.MAX_ERRORS + 2):
        p.poll()
    assert p.reader is not None and p.errors == P.MAX_ERRORS and p.polls == 2


# --- samples and the summary --------------------------------------------------------------------

def test_samples_and_summary_math():
    clock = Clock()
    reader = Scripted([_row(0, 20.0, 1000.0), _row(1, None, 500.0)],
                      [_row(0, 80.0, 3000.0), _row(1, 90.0, 700.0)],
                      [_row(0, 50.0, 2000.0), _row(1, 30.0, 600.0)])
    p = P.GpuPanel(interval=1.0, reader=reader, notebook=False, clock=clock)
    p._t0 = clock.t
    for _ in range(3):
        clock.t += 1.0
        p.poll()
    assert p.samples == [(1.0, 0, 20.0, 1000.0), (1.0, 1, None, 500.0),
                         (2.0, 0, 80.0, 3000.0), (2.0, 1, 90.0, 700.0),
                         (3.0, 0, 50.0, 2000.0), (3.0, 1, 30.0, 600.0)]
    s = p.summary()
    assert s["source"] == "scripted" and s["polls"] == 3 and s["duration_s"] == 3.0
    g0, g1 = s["gpus"]
    assert (g0["util_mean"], g0["util_max"], g0["mem_peak_mib"]) == (50.0, 80.0, 3000.0)
    assert g0["samples"] == 3 and g0["mem_total_mib"] == 81559.0
    assert (g1["util_mean"], g1["util_max"], g1["samples"]) == (60.0, 90.0, 3)  # None skipped
    table = p.format_summary().splitlines()
    assert table[0] == "GPU panel (scripted, every 1 s): 3 polls over 3.0 s"
    assert table[2].split() == ["0", "NVIDIA", "H100", "80GB", "HBM3", "50%", "80%", "2.9",
                                "/", "79.6"]
    assert p.gpu_line() == "gpu 0 50% 2.0/79.6 GiB | gpu 1 30% 0.6/79.6 GiB"


# --- the step bar -------------------------------------------------------------------------------

def test_step_bar_text_and_html():
    bar = P.StepProgress()
    assert bar.text().startswith("starting ranks")
    bar.feed({"step": 1, "steps": 4, "loss": 5.5452, "ms": 31.0, "tok_s": 66000.0})
    bar.feed({"step": 4, "steps": 4, "loss": 3.0123, "ms": 29.6, "tok_s": 69189.2})
    assert bar.text() == ("step 4/4 [##############################] loss 3.0123 | 30 ms/step "
                          "| 69.2k tok/s/rank")
    h = bar.html()
    assert "<progress value='4' max='4'" in h and "5.5452 &rarr; <b>3.0123</b>" in h


def test_step_bar_tails_the_file_rank_0_appends_to(tmp_path):
    path = tmp_path / "steps.jsonl"
    bar = P.StepProgress(str(path))
    bar.read()                                   # not written yet: nothing, no error
    assert bar.last is None
    line = '{"step": 1, "steps": 2, "loss": 5.0, "ms": 10.0, "tok_s": 1000.0}\n'
    path.write_text(line[:20])                   # half a line: not read yet
    bar.read()
    assert bar.last is None
    with open(path, "a") as f:
        f.write(line[20:] + "not json\n" + line.replace('"step": 1', '"step": 2'))
    bar.read()
    assert bar.last["step"] == 2 and bar.first_loss == 5.0


def test_progress_mode(monkeypatch):
    import dtlab.runtime.output as output

    assert progress_mode(True) == "lines" and progress_mode(False) is None
    assert progress_mode("bar") == "bar"
    monkeypatch.setattr(output, "in_notebook_kernel", lambda: True)
    assert progress_mode(True) == "bar"
    with pytest.raises(ValueError):
        progress_mode("tqdm")


def test_train_refuses_bad_panel_and_progress_before_starting():
    with pytest.raises(ValueError, match="panel="):
        train("tiny", 2, nprocs=2, backend="gloo", panel="yes")
    with pytest.raises(ValueError, match="progress="):
        train("tiny", 2, nprocs=2, backend="gloo", progress="tqdm")


# --- drawing: a notebook's display handle, a terminal's lines -----------------------------------

class Handle:
    def __init__(self, bundle):
        self.bundles = [bundle]

    def update(self, bundle, raw=False):
        assert raw
        self.bundles.append(bundle)


@pytest.fixture
def fake_display(monkeypatch):
    import IPython.display

    shown = []

    def display(bundle, raw=False, display_id=None):
        assert raw and display_id is True
        shown.append(Handle(bundle))
        return shown[-1]

    monkeypatch.setattr(IPython.display, "display", display)
    return shown


def test_notebook_one_display_updated_in_place(fake_display, tmp_path):
    path = tmp_path / "steps.jsonl"
    reader = Scripted([_row(0, 97.0, 41236.0), _row(1, 94.0, 40987.0)])
    with P.GpuPanel(interval=0.02, reader=reader, progress=P.StepProgress(str(path)),
                    notebook=True) as p:
        time.sleep(0.05)
        for k in (1, 2, 3):
            with open(path, "a") as f:
                f.write(f'{{"step": {k}, "steps": 3, "loss": {6 - k}.0, "ms": 20.0, '
                        f'"tok_s": 8000.0}}\n')
    assert len(fake_display) == 1 and not p.running
    bundles = fake_display[0].bundles
    assert bundles[0]["text/plain"].startswith("starting ranks")
    assert all(a != b for a, b in zip(bundles, bundles[1:]))   # redrawn only on a change
    last = bundles[-1]
    assert last["text/plain"] == ("step 3/3 [##############################] loss 3.0000 | "
                                  "20 ms/step | 8.0k tok/s/rank\n"
                                  "gpu 0 97% 40.3/79.6 GiB | gpu 1 94% 40.0/79.6 GiB")
    assert "<td>gpu 1</td>" in last["text/html"] and "<progress value='94'" in last["text/html"]


def test_notebook_without_gpu_shows_the_off_line_once(fake_display, monkeypatch):
    monkeypatch.setattr(P, "find_reader", lambda: (None, "no nvidia-smi on PATH"))
    with P.GpuPanel(notebook=True) as p:
        pass
    assert p._thread is None and len(fake_display) == 1
    assert fake_display[0].bundles[-1]["text/plain"] == "GPU panel off: no nvidia-smi on PATH"


def test_bar_alone_reads_no_gpu(fake_display, monkeypatch):
    monkeypatch.setattr(P, "find_reader", lambda: pytest.fail("GPUs probed"))
    bar = P.StepProgress()
    with P.GpuPanel(interval=0.02, progress=bar, gpus=False, notebook=True) as p:
        bar.feed({"step": 2, "steps": 2, "loss": 4.0, "ms": 5.0, "tok_s": 100.0})
    assert p.summary() is None and not p.running
    assert fake_display[0].bundles[-1]["text/plain"].startswith("step 2/2 [")


def test_terminal_compact_lines():
    out, clock = io.StringIO(), Clock()
    p = P.GpuPanel(interval=1.0, reader=Scripted([_row(0, 97.0, 41236.0)]), notebook=False,
                   stream=out, line_every=10.0, clock=clock)
    p._started, p._t0, p._last_line = True, clock.t, clock.t   # drawn by hand: no thread
    p.poll()
    p._draw(False)
    clock.t += 10.0
    p._draw(False)
    p._draw(True)
    assert out.getvalue().splitlines() == ["gpu 0 97% 40.3/79.6 GiB"] * 2
