"""RankProcs, the one owner of rank processes: what it holds in the parent ends with the ranks."""

import os
import time

import pytest

from dtlab.runtime.procs import RankProcs

pytestmark = pytest.mark.usefixtures("no_orphans")


def _open_under(folder: str) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(folder):
            out.append(target)
    return out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_stopped_ranks_leave_no_log_file_open_in_the_parent(tmp_path):
    """torch closes a rank's log files only for ranks it stops itself, and dtlab stops them
    first: every pool whose supervisor was still referenced (a HangError's traceback) kept its
    ranks' logs open, deleted with the run folder (26 -> 54 fds after 20 pool hangs)."""
    # a rank that fails at once (no call to run: there is no context.pkl in its run folder)
    procs = RankProcs(str(tmp_path / "logs"), {0: {"RANK": "0"}}, ("oneshot", str(tmp_path)))
    procs.start()
    deadline = time.monotonic() + 60
    while procs.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    procs.stop()
    assert procs.exit_codes[0] not in (None, 0)
    assert _open_under(str(tmp_path)) == [], "the parent still holds the ranks' log files"


def test_a_fork_of_the_launcher_never_stops_its_ranks(tmp_path, monkeypatch):
    """A process forked from the launcher (os.fork) runs its atexit hooks when it exits, and
    stop() there signalled the launcher's ranks: Popen.poll in a fork sees every rank as done."""
    from dtlab.runtime import procs as procs_module

    procs = RankProcs(str(tmp_path / "logs"), {0: {"RANK": "0"}}, ("oneshot", str(tmp_path)))
    procs.start()
    marker = tmp_path / "signalled"
    child = os.fork()
    if child == 0:  # what the fork's atexit hook would do
        try:
            monkeypatch.setattr(procs_module, "signal_all", lambda *a: marker.touch())
            procs.stop()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    procs.stop()
    assert not marker.exists(), "a fork of the launcher signalled the launcher's ranks"
