"""The rank side of the relay (:mod:`.relay`): a ``torch.distributed`` backend that sends every
call to the launching process over this rank's one socket.

It is a Python ``ProcessGroup`` (torch's extension point for backends written in Python,
``torch.distributed.Backend.register_backend``), so the ordinary API works on top of it::

    pg.install(conn, rank, world_size)      # dist.init_process_group(backend="dtlab_relay", ...)
    dist.all_reduce(t); dist.isend(t, 1); dist.batch_isend_irecv(ops); DDP(model)

Each call sends a request (header + tensor bytes) and returns a ``Work`` at once; a reader thread
completes the work's future when the relay answers, writing the answer into the output tensors
first. Sends complete immediately (the relay keeps the data); receives and collectives when the
relay has what they need. What the relay refuses (an op the exercise does not offer, ranks that
disagree) raises ``RuntimeError`` from ``wait()``, with the relay's reason.
"""

from __future__ import annotations

import json
import socket
import struct
import threading

import torch
import torch.distributed as dist
from torch.futures import Future

from .relay import pack

BACKEND = "dtlab_relay"
_REDUCE = {"SUM": "sum", "MAX": "max", "MIN": "min", "PRODUCT": "product"}


class Conn:
    """This rank's socket to the relay: requests out, replies in (a reader thread)."""

    def __init__(self, sock: socket.socket):
        """``sock``: connected to the relay, the job already read from it."""
        self.sock = sock
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, tuple[Future, object]] = {}
        threading.Thread(target=self._reader, daemon=True, name="dtlab-relay").start()

    def _exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the relay closed the connection")
            data += chunk
        return bytes(data)

    def _read(self) -> tuple[dict, bytes]:
        (hlen,) = struct.unpack("!I", self._exactly(4))
        header = json.loads(self._exactly(hlen))
        return header, self._exactly(int(header.get("n", 0)))

    def _reader(self) -> None:
        try:
            while True:
                header, payload = self._read()
                with self._lock:
                    fut, finish = self._waiting.pop(int(header["id"]))
                if "fail" in header:
                    fut.set_exception(RuntimeError(header["fail"]))
                    continue
                try:
                    fut.set_result(finish(header, payload))
                except Exception as e:  # a reply that does not fit what was asked
                    fut.set_exception(e)
        except (ConnectionError, OSError, ValueError):
            with self._lock:
                left, self._waiting = self._waiting, {}
            for fut, _ in left.values():
                fut.set_exception(RuntimeError("the relay is gone (the job was stopped)"))

    def tell(self, header: dict, payload: bytes = b"") -> None:
        """A message the relay does not answer (a result, a mark)."""
        with self._lock:
            self.sock.sendall(pack(header, payload))

    def ask(self, header: dict, payload: bytes, finish) -> Future:
        """A request; its future gets ``finish(reply_header, reply_payload)``."""
        fut = Future()
        with self._lock:
            rid = self._next
            self._next += 1
            self._waiting[rid] = (fut, finish)
            self.sock.sendall(pack({**header, "id": rid}, payload))
        return fut


class _Work(dist.Work):
    def __init__(self, fut: Future):
        super().__init__()
        self.fut = fut

    def wait(self, timeout=None) -> bool:
        self.fut.wait()  # raises what the relay said, if it refused
        return True

    def is_completed(self) -> bool:
        return self.fut.done()

    def is_success(self) -> bool:
        return self.fut.done()

    def get_future(self) -> Future:
        return self.fut


def _dt(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _data(tensors) -> bytes:
    if not tensors:
        return b""
    flat = torch.cat([t.detach().reshape(-1).cpu() for t in tensors])
    return flat.contiguous().view(torch.uint8).numpy().tobytes()


def _fill(outs, payload: bytes) -> None:
    """Copy a reply's bytes into ``outs``, in order."""
    at = 0
    for o in outs:
        k = o.numel() * o.element_size()
        piece = payload[at:at + k]
        if len(piece) != k:
            raise RuntimeError(f"the relay answered {len(payload)} bytes where {k} were expected")
        if k:
            src = torch.frombuffer(bytearray(piece), dtype=o.dtype).reshape(o.shape)
            with torch.no_grad():
                o.copy_(src)
        at += k


def _reduce_name(opts) -> str:
    name = str(getattr(opts.reduceOp, "op", opts.reduceOp)).rsplit(".", 1)[-1]
    return _REDUCE.get(name, name.lower())


class RelayGroup(dist.ProcessGroup):
    """torch.distributed's calls, as requests to the relay."""

    def __init__(self, conn: Conn, rank: int, size: int):
        super().__init__(rank, size)
        self.conn = conn

    def getBackendName(self) -> str:
        return BACKEND

    def _op(self, op: str, ins, outs, **extra) -> _Work:
        header = {"t": "op", "op": op, "dtype": _dt(ins[0] if ins else outs[0]),
                  "shapes": [list(t.shape) for t in ins], **extra}

        def finish(_h, payload):
            _fill(outs, payload)
            return outs

        return _Work(self.conn.ask(header, _data(ins), finish))

    # point to point
    def send(self, tensors, dstRank, tag=0):
        return self._op("send", tensors, [], peer=int(dstRank), tag=int(tag))

    def recv(self, tensors, srcRank, tag=0):
        t = tensors[0]
        header = {"t": "op", "op": "recv", "peer": int(srcRank), "tag": int(tag), "dtype": _dt(t),
                  "shapes": [list(t.shape)]}

        def finish(_h, payload):
            _fill(tensors, payload)
            return tensors

        return _Work(self.conn.ask(header, b"", finish))

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("recv from any source is not served by the relay: name the source rank")

    # collectives
    def allreduce(self, tensors, opts=None):
        return self._op("all_reduce", tensors, tensors, reduce=_reduce_name(opts) if opts else "sum")

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        return self._op("broadcast", tensors, tensors, root=int(opts.rootRank) if opts else 0)

    def reduce(self, tensors, opts=None):
        return self._op("reduce", tensors, tensors, reduce=_reduce_name(opts),
                        root=int(opts.rootRank))

    def barrier(self, opts=None):
        fut = self.conn.ask({"t": "op", "op": "barrier", "dtype": "uint8", "shapes": []}, b"",
                            lambda _h, _p: [])
        return _Work(fut)

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._op("all_gather", input_tensors, list(output_tensors[0]))

    def _allgather_base(self, output, input, opts=None):
        return self._op("all_gather", [input], [output])

    all_gather_single = _allgather_base

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        return self._op("reduce_scatter", list(input_tensors[0]), output_tensors,
                        reduce=_reduce_name(opts) if opts else "sum")

    def _reduce_scatter_base(self, output, input, opts=None):
        chunks = list(input.reshape(-1).chunk(self.size()))
        if any(c.numel() != output.numel() for c in chunks):
            raise RuntimeError(f"reduce_scatter: input of {input.numel()} elements is not "
                               f"{self.size()} x the output's {output.numel()}")
        return self._op("reduce_scatter", chunks, [output],
                        reduce=_reduce_name(opts) if opts else "sum")

    reduce_scatter_single = _reduce_scatter_base

    def _unserved(self, *args, **kwargs):
        raise RuntimeError("this collective is not served by the relay")

    gather = scatter = alltoall = alltoall_base = allgather_coalesced = _unserved


def install(conn: Conn, rank: int, world_size: int) -> None:
    """``dist.init_process_group`` on the relay (the store is local: the relay is the rendezvous)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.Backend.register_backend(BACKEND, lambda store, r, n, timeout: RelayGroup(conn, r, n),
                                          devices=["cpu"])
    dist.init_process_group(BACKEND, store=dist.HashStore(), rank=rank, world_size=world_size)
