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
import select
import socket
import threading
from multiprocessing.connection import (Connection, Listener, answer_challenge,
                                        deliver_challenge)

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


def reachable(path: str) -> tuple[str, int | None]:
    """``path`` as a unix socket address, and an fd to close once it is bound or connected.
    An address holds at most 107 bytes; a run folder deeper than that (a long ``$TMPDIR`` or
    ``DTLAB_RUN_ROOT``) is reached through ``/proc/self/fd/N`` of its folder, held open."""
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        return path, None
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


class ControlServer:
    """Accepts connections in a thread and authenticates each in a thread of its own, so a
    connection that never answers the challenge delays nobody; hands authenticated ones over
    through a queue. ``close()`` ends every thread it started: the accept loop wakes at least
    every ``POLL`` seconds, and closing a pending connection ends its handshake."""

    POLL = 0.1

    def __init__(self, run_dir: str, key: bytes):
        os.chmod(run_dir, 0o700)
        self.address = os.path.join(run_dir, SOCKET)
        self._key = key
        bind, self._dir_fd = reachable(self.address)
        self._listener = Listener(bind, family="AF_UNIX")  # the key is checked per conn
        self.accepted: "queue.Queue[Connection]" = queue.Queue()
        self.rejected = 0
        self._closed = False
        self._pending: set[Connection] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "dtlab-control-accept")

    def _spawn(self, target, name, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        sock = self._listener._listener._socket  # to wait with a timeout before accept()
        while not self._closed:
            try:
                ready, _, _ = select.select([sock], [], [], self.POLL)
                if not ready or self._closed:
                    continue
                conn = self._listener.accept()
            except OSError:  # we closed the listener
                return
            with self._lock:
                self._pending.add(conn)
            self._spawn(self._authenticate, "dtlab-control-auth", conn)

    def _authenticate(self, conn: Connection) -> None:
        try:
            deliver_challenge(conn, self._key)
            answer_challenge(conn, self._key)
        except Exception:  # a wrong key, a peer that hung up, or close() ended a silent one
            self.rejected += 1
            conn.close()
            return
        finally:
            with self._lock:
                self._pending.discard(conn)
        if self._closed:
            conn.close()
        else:
            self.accepted.put(conn)

    def close(self) -> None:
        """Stop accepting, end unfinished handshakes, remove the socket file."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            pending, self._pending = list(self._pending), set()
        for conn in pending:
            try:  # shutdown wakes a thread blocked reading it; close alone may not
                socket.socket(fileno=os.dup(conn.fileno())).shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2)
        try:
            self._listener.close()
        except OSError:
            pass
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass
