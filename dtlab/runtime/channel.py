"""The pool's control channel: a unix socket in a private directory, with a key.

The parent listens; each rank connects once at start. ``multiprocessing.connection`` runs an
HMAC challenge-response with the shared key *before* any message is read, and only messages
from a connection that passed it are ever unpickled -- a foreign process that reaches the socket
without the key is dropped without a byte of its data being interpreted. The socket lives in a
0700 directory and is removed as soon as every rank has connected, so after start-up there is
nothing left to connect to.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
from multiprocessing.connection import Connection, Listener

KEY_FILE = "control.key"
SOCKET = "control.sock"


def write_key(run_dir: str) -> bytes:
    key = secrets.token_bytes(32)
    path = os.path.join(run_dir, KEY_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def read_key(run_dir: str) -> bytes:
    with open(os.path.join(run_dir, KEY_FILE), "rb") as f:
        return f.read()


class ControlServer:
    """Accepts authenticated connections in a thread; hands them over through a queue."""

    def __init__(self, run_dir: str, key: bytes):
        os.chmod(run_dir, 0o700)
        self.address = os.path.join(run_dir, SOCKET)
        self._listener = Listener(self.address, family="AF_UNIX", authkey=key)
        self.accepted: "queue.Queue[Connection]" = queue.Queue()
        self.rejected = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="dtlab-control-accept",
                                        daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()  # the key handshake happens inside accept()
            except Exception:  # AuthenticationError, a peer that hung up, or we closed
                if self._closed:
                    return
                self.rejected += 1
                continue
            self.accepted.put(conn)

    def close(self) -> None:
        """Stop accepting and remove the socket file."""
        if self._closed:
            return
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass
