"""The pool's control channel never interprets a byte from a peer that lacks the key."""

import os
import pickle
import socket
import stat
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest

import dtlab
from dtlab.runtime.channel import ControlServer, read_key, write_key


class Planted:
    """Unpickling this creates a file: proof that foreign data was interpreted."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_foreign_connection_without_the_key_cannot_run_code(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    key = write_key(str(run_dir))
    assert stat.S_IMODE(os.stat(run_dir / "control.key").st_mode) == 0o600
    server = ControlServer(str(run_dir), key)
    try:
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
        planted = tmp_path / "pwned"
        # 1. a raw socket that just sends a malicious pickle
        s = socket.socket(socket.AF_UNIX)
        s.connect(server.address)
        payload = pickle.dumps(Planted(str(planted)))
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        time.sleep(0.5)
        s.close()
        # 2. a well-formed client with the wrong key
        with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
            Client(server.address, family="AF_UNIX", authkey=b"not the key")
        # 3. the real key still works, and only that connection is handed over
        good = Client(server.address, family="AF_UNIX", authkey=read_key(str(run_dir)))
        conn = server.accepted.get(timeout=5)
        good.send(("hello", 1))
        assert conn.recv() == ("hello", 1)
        assert server.rejected >= 2 and server.accepted.empty()
        assert not planted.exists(), "foreign data was unpickled"
    finally:
        server.close()
    assert not os.path.exists(server.address)  # nothing left to connect to


@pytest.mark.slow
def test_a_running_pool_has_no_socket_left(no_orphans):
    with dtlab.Pool(nprocs=2) as pool:
        sock = os.path.join(pool._run_dir, "control.sock")
        assert not os.path.exists(sock)
        assert pool.exec("rank").values == [0, 1]
