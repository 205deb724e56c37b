import pytest

from forked import refuse_starts


@pytest.fixture
def nothing_starts(monkeypatch):
    """Any attempt to start a process raises :class:`forked.Started`."""
    refuse_starts(monkeypatch.setattr)
