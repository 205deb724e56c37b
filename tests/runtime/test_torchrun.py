"""dtlab.torchrun: a script under the real torchrun, its console streamed into the caller and
returned, a bad argument refused before anything starts, and a timeout that ends torchrun,
every rank and their children."""

import pytest

import dtlab


def test_bad_input_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dtlab.LaunchError, match="no file 'absent.py'"):
        dtlab.torchrun("absent.py")
    (tmp_path / "s.py").write_text("")
    with pytest.raises(dtlab.LaunchError, match="nproc=0 must be"):
        dtlab.torchrun("s.py", nproc=0)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_console_streams_and_a_timeout_ends_every_process(tmp_path, monkeypatch, capsys, no_orphans):
    monkeypatch.chdir(tmp_path)
    # rank 0 prints and leaves; rank 1 starts a child of its own and waits forever
    (tmp_path / "s.py").write_text(
        "import os, subprocess, sys, time\n"
        "if os.environ['RANK'] == '0':\n    print('rank 0 says', sys.argv[1:], flush=True)\n"
        "else:\n    subprocess.Popen(['sleep', '600'])\n    time.sleep(600)\n")
    run = dtlab.torchrun("s.py", "--x", 3, nproc=2, timeout=12)
    shown = capsys.readouterr().out
    assert run.code is None and not run.ok and "stopped after 12 s" in shown
    assert "[default0]:rank 0 says ['--x', '3']" in shown and "[default0]:rank 0 says" in run.console
    assert run.command == "torchrun --standalone --nproc-per-node 2 s.py --x 3"
    assert "OMP_NUM_THREADS environment variable" not in shown  # torchrun's banner stays out
