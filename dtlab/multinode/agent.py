"""``python -m dtlab.multinode.agent [--loopback] TORCHRUN_ARGS...``: torchrun, as
:mod:`.simulate` runs it on each simulated node.

Contract: the same agent as ``torchrun TORCHRUN_ARGS...`` (:func:`torch.distributed.run.main`),
with two changes that a rehearsal on one machine needs and a cluster does not:

* ``--loopback``: every TCPStore the agent serves -- the c10d rendezvous store on the hosting
  node, and the store its workers share (``MASTER_ADDR:MASTER_PORT``) -- listens on 127.0.0.1
  only. TCPStore's own listener binds every interface (``::``), whatever host it is given, which
  on one machine would open the rehearsal to every host that reaches this one; a socket bound to
  127.0.0.1 is handed to it instead (``master_listen_fd``), as :func:`dtlab.runtime.supervisor.
  loopback_store` does for the runtime's ranks.
* After a successful run, the agent that serves a store leaves only once every other agent has
  hung up (at most :data:`LINGER` s). torchrun's hosting agent exits as soon as its own
  rendezvous shutdown is done; an agent still closing the rendezvous then finds no store and
  logs "failed to shutdown the rendezvous ... RendezvousConnectionError" after a run that
  worked (1 of 3 clean runs on a busy 2-core machine).

The workers it starts are plain: only the agent's own process is changed::

    python -m dtlab.multinode.agent --loopback --nnodes 2 --node-rank 0 --nproc-per-node 1 \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29400 --rdzv-id sim \\
        --rdzv-conf is_host=1 -m dtlab.multinode.check
"""

from __future__ import annotations

import socket
import sys
import time

LINGER = 10.0  # s: the other agents close the rendezvous within a second of the exit barrier

# the stores this process serves, held to the end: torchrun drops its references when its launch
# returns, and the last reference closing is the server stopping
_served: list = []


def _serving_store_class(loopback: bool):
    """torch's TCPStore, but a server records its port and, with ``loopback``, listens on a
    socket bound to 127.0.0.1."""
    from torch.distributed import TCPStore

    args = ("world_size", "is_master", "timeout", "wait_for_workers", "multi_tenant",
            "master_listen_fd", "use_libuv")  # TCPStore's parameters after host and port

    class ServingTCPStore(TCPStore):
        def __init__(self, host_name, port, *a, **kw):
            kw.update(zip(args, a))
            if kw.get("is_master") and loopback and kw.get("master_listen_fd") is None:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does
                sock.bind(("127.0.0.1", port))
                sock.listen(128)
                port = sock.getsockname()[1]
                kw["master_listen_fd"] = sock.detach()  # the store owns it from here
            super().__init__(host_name, port, **kw)
            if kw.get("is_master"):
                _served.append(self)

    return ServingTCPStore


def _install(loopback: bool) -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    cls = _serving_store_class(loopback)
    dist.TCPStore = cls  # DynamicRendezvousHandler's shared store: dist.TCPStore(...)
    c10d_rendezvous_backend.TCPStore = cls  # the rendezvous store, imported there by name


def peers() -> int:
    """Connections other processes hold to the stores this process serves."""
    import psutil

    ports = {s.port for s in _served}
    conns = [(_v4(c.laddr), _v4(c.raddr)) for c in psutil.Process().net_connections("tcp")
             if c.status == psutil.CONN_ESTABLISHED and c.raddr]
    own = {local for local, remote in conns if remote[1] in ports}  # this process's clients
    return sum(1 for local, remote in conns if local[1] in ports and remote not in own)


def _v4(addr) -> tuple[str, int]:
    """('::ffff:10.0.0.1', p) -> ('10.0.0.1', p): a ``::`` listener sees IPv4 peers mapped."""
    return addr.ip.removeprefix("::ffff:"), addr.port


def linger(limit: float = LINGER) -> None:
    """Until no other process is connected to a store this one serves, or ``limit`` s."""
    deadline = time.monotonic() + limit
    while _served and peers() and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: list[str]) -> None:
    loopback = bool(argv) and argv[0] == "--loopback"
    _install(loopback)
    from torch.distributed import run

    run.main(argv[1:] if loopback else argv)  # raises on failure: no lingering then
    linger()


if __name__ == "__main__":
    main(sys.argv[1:])
