"""dtlab.multinode.agent: the stores a simulated node's agent serves listen on 127.0.0.1 only
(--loopback), outlive torchrun's references, and the agent leaves once no other process is
connected."""

import subprocess
import sys
import time

import psutil
import pytest
from conftest import assert_no_descendants

from dtlab.multinode import agent


@pytest.fixture
def served(monkeypatch):
    monkeypatch.setattr(agent, "_served", [])
    yield agent._served


def _listening(port: int) -> list[str]:
    return [c.laddr.ip for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def test_a_served_store_listens_on_loopback_and_outlives_its_owner(served):
    store = agent._serving_store_class(loopback=True)("127.0.0.1", 0, is_master=True,
                                                       wait_for_workers=False)
    port = store.port
    assert _listening(port) == ["127.0.0.1"]  # TCPStore alone listens on '::'
    del store  # torchrun drops its references once its launch returns
    assert _listening(port) == ["127.0.0.1"] and served[0].port == port


def test_linger_waits_for_the_other_processes_to_hang_up(served):
    store = agent._serving_store_class(loopback=True)("127.0.0.1", 0, is_master=True,
                                                       wait_for_workers=False)
    t0 = time.monotonic()
    agent.linger(limit=5)
    assert time.monotonic() - t0 < 1  # only its own client: nothing to wait for
    peer = subprocess.Popen([sys.executable, "-S", "-c", "import socket, time; s = socket."
                             f"create_connection(('127.0.0.1', {store.port})); time.sleep(1.5)"])
    try:
        deadline = time.monotonic() + 20
        while not agent.peers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.peers() == 1
        t0 = time.monotonic()
        agent.linger(limit=20)
        # the peer's socket closes as it exits, a moment before it can be reaped
        assert agent.peers() == 0 and time.monotonic() - t0 < 20
        assert peer.wait(timeout=10) == 0
    finally:
        peer.kill()
        peer.wait()
    assert_no_descendants()


def test_without_loopback_it_listens_as_torch_has_it_and_is_held(served):
    """netns mode: a node's own namespace is its host; TCPStore's '::' is what a cluster gets."""
    store = agent._serving_store_class(loopback=False)("127.0.0.1", 0, is_master=True,
                                                        wait_for_workers=False)
    assert _listening(store.port) == ["::"] and served == [store]
