"""Reading sources: line by line, overlong lines skipped and counted, regular files only."""

import os
import tracemalloc

import pytest

import dtlab.nccl_log as nl
from dtlab.nccl_log.report import summary
from dtlab.nccl_log.sources import MAX_LINE

HEAD = b"h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
TAIL = b"h:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\n" \
       b"h:1:1 [0] misc.cc:1 (f) NCCL WARN after the long line\n"


def test_a_50_mb_line_costs_a_bounded_amount_of_memory(tmp_path):
    # synthetic: a 50 MB line (a progress bar redrawn with \r, say) between NCCL lines
    path = tmp_path / "rank0.log"
    with open(path, "wb") as f:
        f.write(HEAD)
        f.write(b"x" * (50 << 20) + b"\n")
        f.write(TAIL)
    tracemalloc.start()
    try:
        log = nl.parse(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_LINE, f"peak {peak} B for a 50 MB line (cap {MAX_LINE} B)"
    assert log.overlong_lines == {str(path): 1} and log.to_dict()["overlong_lines"]
    assert log.nccl_version == "2.28.9" and log.env == {"NCCL_P2P_DISABLE": "1"}
    assert log.warnings[0]["line"] == 4  # the skipped line still counts: numbers stay true
    assert f"skipped lines longer than {MAX_LINE // 1024} KiB" in summary(log)


def test_text_sources_skip_overlong_lines_too_and_keep_splitlines_lines():
    text = (HEAD + b"y" * (MAX_LINE + 1) + b"\r\n" + TAIL).decode()
    log = nl.parse(text)
    assert log.overlong_lines == {"<text>": 1} and log.warnings[0]["line"] == 4
    exact = (HEAD + b"z" * MAX_LINE + b"\n" + TAIL).decode()  # at the cap: still read
    assert nl.parse(exact).overlong_lines == {}


def test_a_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    with pytest.raises(nl.NotAnNcclLog, match="not a regular file"):
        nl.parse(str(fifo))  # opening it would block forever
    (tmp_path / "rank0.log").write_bytes(HEAD)
    assert nl.parse(str(tmp_path)).sources == [str(tmp_path / "rank0.log")]  # found, skipped


def test_in_a_folder_an_unreadable_or_3_gb_file_is_skipped_and_said_why(tmp_path):
    (tmp_path / "rank0.log").write_bytes(HEAD)
    with open(tmp_path / "core", "wb") as f:
        f.truncate(3 << 30)  # sparse: streaming its zeros took minutes
    secret = tmp_path / "secret.log"
    secret.write_bytes(HEAD)
    secret.chmod(0)
    if os.access(secret, os.R_OK):  # root reads it anyway: a /proc file refuses root too
        if not os.path.exists("/proc/sys/vm/compact_memory"):
            pytest.skip("root here, and no /proc file that refuses root")
        secret.unlink()
        os.symlink("/proc/sys/vm/compact_memory", secret)
    log = nl.parse(str(tmp_path))  # was a PermissionError traceback
    assert log.sources == [str(tmp_path / "rank0.log")]
    skipped = " ".join(log.skipped_sources)
    assert "core (not read: larger than 1024 MiB" in skipped
    assert "secret.log (not read: cannot open it (Permission denied))" in skipped
