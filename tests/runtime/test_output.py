"""Per-rank output in a notebook: the layout rules, and a static copy that survives saving.

The first tests check the static HTML/text a ``PanesSink`` leaves behind (pure functions, no
kernel). The last one executes a notebook with ``DTLAB_OUTPUT=panes`` in a real ipykernel through
nbclient, saves and reloads it, and checks that every rank's text is in ordinary outputs
(text/html and text/plain of a display_data) and that no output is left as a widget view --
what a reopened notebook, an nbgrader submission and its feedback need. About 10 s.
"""

import html.parser

import pytest

from dtlab.runtime import output
from dtlab.runtime.transcript import Transcript, static_html, static_text

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
LABELS = {r: f"rank {r}" for r in range(4)}
TABLE_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw "
                "#wrong     time   algbw   busbw #wrong")


def transcripts(texts: dict[int, list[tuple[str, str]]]) -> dict[int, Transcript]:
    out = {}
    for r, chunks in texts.items():
        out[r] = Transcript()
        for stream, text in chunks:
            out[r].add(stream, text)
    return out


class Panes(html.parser.HTMLParser):
    """The structure of a static copy: columns, the rank of each pane, its text, silent line."""

    def __init__(self, text: str):
        super().__init__()
        self.columns, self.ranks, self.text, self.silent = None, [], {}, ""
        self._in = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("class") == "dtlab-output":
            self.columns = int(a["data-columns"])
        elif a.get("class") == "dtlab-rank":
            self.ranks.append(int(a["data-rank"]))
            self.text[self.ranks[-1]] = ""
        elif tag == "pre":
            self._in = "pre"
        elif a.get("class") == "dtlab-silent":
            self._in = "silent"

    def handle_endtag(self, tag):
        if tag in ("pre", "div"):
            self._in = None

    def handle_data(self, data):
        if self._in == "pre":
            self.text[self.ranks[-1]] += data
        elif self._in == "silent":
            self.silent += data


def table(rows: int = 20) -> str:
    return TABLE_HEADER + "\n" + "".join(
        f"{8 << i:>12} {2 << i:>12}     float     sum      -1    {i * 1.5:6.2f}    0.00    0.00"
        f"      0    12.34    0.00    0.00      0\n" for i in range(rows))


def test_one_wide_rank_gets_one_full_width_pane_and_silent_ranks_one_line():
    t = transcripts({0: [("out", table())], 1: [], 2: [], 3: []})
    p = Panes(static_html(t, [0, 1, 2, 3], LABELS))
    assert p.columns == 1 and p.ranks == [0]  # no empty boxes
    assert p.text[0] == table()               # whole lines: the browser wraps, the text is intact
    assert p.silent == "ranks 1, 2, 3: no output"
    # a line wider than the pane wraps in it, never cut at its edge
    assert 'white-space:pre-wrap; overflow-wrap:anywhere;' in static_html(t, [0, 1, 2, 3], LABELS)


def test_two_short_ranks_side_by_side_wide_or_many_ranks_stacked():
    short = transcripts({0: [("out", "loss 0.5\n")], 1: [("out", "loss 0.5\n")]})
    assert Panes(static_html(short, [0, 1], LABELS)).columns == 2
    wide = transcripts({0: [("out", "x" * 30 + "\n" + "y" * 120)], 1: [("out", "ok\n")]})
    assert Panes(static_html(wide, [0, 1], LABELS)).columns == 1
    many = transcripts({r: [("out", f"hello from rank {r}\n")] for r in range(3)})
    p = Panes(static_html(many, [0, 1, 2], LABELS))
    assert p.columns == 1 and p.ranks == [0, 1, 2] and p.silent == ""


def test_widest_line_spans_writes():
    t = Transcript()
    for piece in ["a" * 50, "b" * 50, "\nshort\n", "c" * 10]:
        t.add("out", piece)
    assert t.widest == 100


def test_static_text_and_stderr_kept_in_order():
    t = transcripts({0: [("out", "step 1\n"), ("err", "warning: slow\n"), ("out", "step 2")],
                     1: []})
    text = static_text(t, [0, 1], LABELS)
    assert text == ("[rank 0] step 1\n[rank 0] warning: slow\n[rank 0] step 2\n"
                    "rank 1: no output")
    assert "background-color" in static_html(t, [0, 1], LABELS)  # stderr marked
    assert Panes(static_html(t, [0, 1], LABELS)).text[0] == "step 1\nwarning: slow\nstep 2"


def test_static_copy_is_escaped_and_capped():
    t = transcripts({0: [("out", "<script>alert(1)</script>\x1b[31mred\x1b[0m\n")]})
    h = static_html(t, [0], LABELS)
    assert "<script>" not in h and "\x1b" not in h and "&lt;script&gt;" in h
    big = transcripts({0: [("out", "".join(f"line {i:06d}\n" for i in range(20_000)))]})
    kept = "".join(text for _, text in big[0].kept(keep=4000))
    assert len(kept) < 4300 and kept.startswith("line 000000\n")
    assert kept.endswith("line 019999\n") and "characters not kept in the saved notebook" in kept
    first, last = kept.split("[dtlab: ")[0], kept.split("(.stdout / .stderr)]\n")[1]
    assert first.endswith("\n") and last.startswith("line ")  # cut at line ends


SAVED_NOTEBOOK_CELLS = [
    # two real ranks: rank 0 prints a wide table, rank 1 one line on stderr
    '''import dtlab

def report():
    import sys
    import torch.distributed as dist
    if dist.get_rank() == 0:
        print(TABLE, end="")
    else:
        print("rank 1 was here", file=sys.stderr)
    return dist.get_rank()

dtlab.run(report, nprocs=2, backend="gloo", timeout=60).values''',
    # three ranks, two silent: no process needed to drive the sink in the kernel
    '''from dtlab.runtime import output
sink = output.choose_sink()
sink.start([0, 1, 2], {0: "rank 0", 1: "rank 1", 2: "rank 2"})
sink.write(0, "out", "only rank 0 talks\\n")
sink.close()
type(sink).__name__''',
]


@pytest.mark.slow
def test_panes_leave_each_ranks_text_in_the_saved_notebook(tmp_path, monkeypatch, no_orphans):
    pytest.importorskip("ipywidgets")
    nbformat = pytest.importorskip("nbformat")  # the notebook stack (absent on GPU images)
    NotebookClient = pytest.importorskip("nbclient").NotebookClient

    monkeypatch.setenv("DTLAB_OUTPUT", "panes")
    cells = [nbformat.v4.new_code_cell(f"TABLE = {table(8)!r}")]
    cells += [nbformat.v4.new_code_cell(src) for src in SAVED_NOTEBOOK_CELLS]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=90, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, str(path))
    saved = nbformat.read(str(path), as_version=4)

    outputs = [o for c in saved.cells for o in c.outputs]
    assert not [o for o in outputs if WIDGET_VIEW in o.get("data", {})], outputs
    run_cell, sink_cell = saved.cells[1].outputs, saved.cells[2].outputs
    assert run_cell[-1]["data"]["text/plain"] == "[0, 1]"
    assert sink_cell[-1]["data"]["text/plain"] == "'PanesSink'"

    (static,) = [o for o in run_cell if o.output_type == "display_data"]
    p = Panes(static["data"]["text/html"])
    assert p.ranks == [0, 1] and p.columns == 1  # the wide table stacks the panes
    assert p.text[0] == table(8) and p.text[1] == "rank 1 was here\n"
    plain = static["data"]["text/plain"].split("\n")
    assert plain == [f"[rank 0] {ln}" for ln in table(8).splitlines()] + [
        "[rank 1] rank 1 was here"]

    (static,) = [o for o in sink_cell if o.output_type == "display_data"]
    p = Panes(static["data"]["text/html"])
    assert p.ranks == [0] and p.text[0] == "only rank 0 talks\n"
    assert p.silent == "ranks 1, 2: no output"
    assert static["data"]["text/plain"] == "[rank 0] only rank 0 talks\nranks 1, 2: no output"


def test_outside_a_kernel_auto_means_labelled_lines(capsys, monkeypatch):
    monkeypatch.delenv("DTLAB_OUTPUT")
    sink = output.choose_sink()
    sink.start([0, 1], LABELS)
    sink.write(0, "out", "a\nb")
    sink.close()
    assert capsys.readouterr().out == "[rank 0] a\n[rank 0] b\n"


def test_doctests():
    import doctest

    from dtlab.runtime import transcript

    result = doctest.testmod(transcript)
    assert result.attempted >= 2 and result.failed == 0
