"""The relay: a process group whose every message passes through the launcher, which records it.

Ranks of an observed job (:mod:`.observed`) share no network, no memory and no files: each
reaches the others only through its own unix socket to the relay, in the launching process. The
ranks' ``torch.distributed`` calls go there (:mod:`.relaypg` is the backend), and the relay does
what a backend's transport would -- matches a send with its receive, waits for every rank to
enter a collective, reduces, hands out the results -- and writes down each message::

    relay = Relay(nprocs=3, offer={"send", "recv"}, folder=private_dir)
    relay.paths          # {rank: socket path}; rank r connects to paths[r] and to nothing else
    relay.step(0.1)      # serve whatever arrived (the caller's loop: observed.run)
    relay.traffic        # [Message(rank=0, op="send", peer=1, dtype="float32", shape=[4], ...)]

Because it sees every byte, it can also answer questions no backend can: which ranks are
waiting, for what (:meth:`Relay.waiting`); and a collective whose ranks disagree (op, dtype,
shapes) fails at once on every rank with what each called, instead of hanging.

Only what an exercise offers is served (``offer``: torch.distributed op names, optionally capped
in elements per call, ``max_numel``); anything else fails on the calling rank with a one-line
reason. Two hooks serve a rank-side harness (:mod:`dtlab.course.harness`): ``serve`` answers its
``fetch`` requests (a sample of a dataset held here), and ``deliver`` may change what each rank
gets from an ``impl:`` collective -- a collective the harness hands the learner's code as an
implementation under test, whose faults the grader chooses here, out of the ranks' reach.
``mark`` messages (where a harness's case begins) are recorded and stamped on what follows.

Wire (both ways): a 4-byte big-endian length, a JSON header of that length, then ``header["n"]``
bytes of payload (tensor data, rank order where several). No pickle ever comes back here.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

MAX_HEADER = 1 << 20
MAX_PAYLOAD = 64 << 20    # bytes in one message
MAX_TOTAL = 256 << 20     # bytes through the relay in one job: it keeps them all (the record)
P2P = ("send", "recv")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "reduce")
REDUCTIONS = ("sum", "max", "min", "product")


def pack(header: dict, payload: bytes = b"") -> bytes:
    header = {**header, "n": len(payload)}
    body = json.dumps(header).encode()
    return struct.pack("!I", len(body)) + body + payload


@dataclass
class Message:
    """One thing a rank did on the relay, as recorded (payload kept for the judge)."""

    seq: int            # order of arrival at the relay, over all ranks
    rank: int
    op: str             # "send", "recv", "all_reduce", ..., "mark", "fetch"
    peer: int | None = None   # send: the destination; recv: the source
    tag: int = 0
    dtype: str = ""
    shapes: list = field(default_factory=list)
    reduce: str = ""
    root: int | None = None
    data: bytes = b""   # send / collective input (as the rank gave it)
    got: bytes = b""    # what the rank received (after any deliver hook)
    info: dict = field(default_factory=dict)   # mark / fetch details
    t: float = 0.0

    @property
    def numel(self) -> int:
        return sum(_numel(s) for s in self.shapes)


class _Conn:
    def __init__(self, rank: int, sock: socket.socket):
        self.rank, self.sock = rank, sock
        self.buf = bytearray()
        self.out = bytearray()
        self.closed = False


class Relay:
    """The parent side of an observed job's process group (see the module)."""

    def __init__(self, nprocs: int, folder: str, offer: set[str] | None = None,
                 max_numel: dict[str, int] | None = None,
                 deliver: Callable[[Message, bytes], bytes] | None = None,
                 serve: Callable[[Message], tuple[dict, bytes]] | None = None):
        self.nprocs = nprocs
        self.offer = set(P2P + COLLECTIVES) if offer is None else set(offer)
        self.max_numel = dict(max_numel or {})
        self.deliver, self.serve = deliver, serve
        self.marks: dict[int, dict] = {}  # each rank's last mark
        self.sel = selectors.DefaultSelector()
        self.paths: dict[int, str] = {}
        self._listen: dict[int, socket.socket] = {}
        for r in range(nprocs):
            path = os.path.join(folder, f"rank{r}.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            s.listen(1)
            s.setblocking(False)
            self.paths[r], self._listen[r] = path, s
            self.sel.register(s, selectors.EVENT_READ, ("listen", r))
        self.conns: dict[int, _Conn] = {}
        self.jobs: dict[int, tuple[dict, bytes]] = {}   # what each rank gets on connecting
        self.results: dict[int, object] = {}
        self.errors: dict[int, str] = {}
        self.traffic: list[Message] = []
        self._sends: dict[tuple[int, int, int], list[Message]] = {}  # (src, dst, tag) -> queue
        self._recvs: dict[tuple[int, int, int], list[tuple[Message, int]]] = {}
        self._coll: dict[int, dict[int, tuple[Message, int]]] = {}   # k -> rank -> (msg, id)
        self._coll_count = [0] * nprocs
        self._pending: dict[int, dict[int, str]] = {r: {} for r in range(nprocs)}  # id -> what
        self._seq = 0
        self.last_message = time.monotonic()
        self.total_bytes = 0
        self.stopped = ""  # why the relay gave up on the job (too much data), else ""

    # -- the loop -----------------------------------------------------------------------------
    def step(self, timeout: float) -> None:
        """Serve what is ready within ``timeout`` seconds."""
        for key, mask in self.sel.select(timeout):
            kind, r = key.data
            if kind == "listen":
                self._accept(r)
            elif mask & selectors.EVENT_READ:
                self._read(self.conns[r])
            if kind == "conn" and mask & selectors.EVENT_WRITE:
                self._flush(self.conns[r])

    def done(self) -> bool:
        return bool(self.stopped) or len(self.results) + len(self.errors) >= self.nprocs

    def waiting(self) -> dict[int, list[str]]:
        """What each rank has asked for and not yet got (a recv, a collective)."""
        return {r: list(p.values()) for r, p in self._pending.items() if p}

    def close(self) -> None:
        for c in self.conns.values():
            self._close(c)
        for s in self._listen.values():
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
        for path in self.paths.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.sel.close()

    # -- connections ----------------------------------------------------------------------------
    def _accept(self, r: int) -> None:
        try:
            sock, _ = self._listen[r].accept()
        except BlockingIOError:
            return
        if r in self.conns:  # one connection per rank, ever
            sock.close()
            return
        sock.setblocking(False)
        c = self.conns[r] = _Conn(r, sock)
        self.sel.register(sock, selectors.EVENT_READ, ("conn", r))
        header, payload = self.jobs.get(r, ({"t": "job"}, b""))
        self._send(c, header, payload)

    def _read(self, c: _Conn) -> None:
        try:
            chunk = c.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(c)
            return
        c.buf += chunk
        while len(c.buf) >= 4:
            (hlen,) = struct.unpack("!I", c.buf[:4])
            if hlen > MAX_HEADER:
                return self._broken(c, f"a message header of {hlen} bytes")
            if len(c.buf) < 4 + hlen:
                return
            try:
                header = json.loads(bytes(c.buf[4:4 + hlen]))
                n = int(header.get("n", 0))
            except (ValueError, TypeError, AttributeError, RecursionError):
                return self._broken(c, "a message that is not a JSON header")
            if not 0 <= n <= MAX_PAYLOAD:
                return self._broken(c, f"a payload of {n} bytes")
            if len(c.buf) < 4 + hlen + n:
                return
            payload = bytes(c.buf[4 + hlen:4 + hlen + n])
            del c.buf[:4 + hlen + n]
            self.last_message = time.monotonic()
            self.total_bytes += n
            if self.total_bytes > MAX_TOTAL:
                self.stopped = (f"the ranks sent more than {MAX_TOTAL >> 20} MB through the relay "
                                f"(rank {c.rank} last)")
                return self._broken(c, "too much data")
            try:
                self._handle(c, header, payload)
            except (KeyError, TypeError, ValueError, RuntimeError) as e:
                # RuntimeError: torch's, for a payload that does not fit the shapes it claims
                # (eleventh red team: [[1000]] with 4 bytes reached the grader's test cell)
                return self._broken(c, f"a malformed request ({type(e).__name__}: {e})")

    def _broken(self, c: _Conn, what: str) -> None:
        self.errors.setdefault(c.rank, f"rank {c.rank} sent the relay {what}")
        self._close(c)

    def _send(self, c: _Conn, header: dict, payload: bytes = b"") -> None:
        if c.closed:
            return
        c.out += pack(header, payload)
        self._flush(c)

    def _flush(self, c: _Conn) -> None:
        try:
            while c.out:
                k = c.sock.send(c.out)
                del c.out[:k]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(c)
            return
        try:
            self.sel.modify(c.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0),
                            ("conn", c.rank))
        except (KeyError, ValueError):
            pass

    def _close(self, c: _Conn) -> None:
        if c.closed:
            return
        c.closed = True
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        if c.rank not in self.results and c.rank not in self.errors:
            self.errors[c.rank] = f"rank {c.rank} ended without an answer"

    # -- requests -------------------------------------------------------------------------------
    def _record(self, rank: int, header: dict, payload: bytes = b"") -> Message:
        self._seq += 1
        info = dict(header.get("info") or {})
        info.pop("mark", None)  # the relay says where a message belongs, never the rank
        if rank in self.marks:
            info["mark"] = self.marks[rank]
        m = Message(self._seq, rank, str(header["op"]), header.get("peer"), int(header.get("tag", 0)),
                    str(header.get("dtype", "")), [list(map(int, s)) for s in header.get("shapes", [])],
                    str(header.get("reduce", "")), header.get("root"), payload,
                    info=info, t=time.monotonic())
        self.traffic.append(m)
        return m

    def _handle(self, c: _Conn, h: dict, payload: bytes) -> None:
        t = h.get("t")
        if t == "result":
            self.results[c.rank] = h.get("value")
            return
        if t == "error":
            self.errors[c.rank] = str(h.get("text", ""))[:100_000]
            return
        if t == "mark":
            self._record(c.rank, {"op": "mark", "info": h.get("info")})
            self.marks[c.rank] = dict(h.get("info") or {})
            return
        if t == "fetch":
            m = self._record(c.rank, {"op": "fetch", "info": h.get("info")})
            reply, data = self.serve(m) if self.serve else ({"fail": "nothing to fetch here"}, b"")
            self._send(c, {"t": "reply", "id": h["id"], **reply}, data)
            return
        if t != "op":
            return self._broken(c, f"an unknown request {t!r}")
        op, rid = str(h["op"]), int(h["id"])
        if op not in self.offer:
            self._send(c, {"t": "reply", "id": rid, "fail": _not_offered(op, self.offer)})
            return
        if op in self.max_numel:
            numel = sum(_numel(s) for s in h.get("shapes", []))
            if numel > self.max_numel[op]:
                self._send(c, {"t": "reply", "id": rid, "fail": (
                    f"dist.{op} of {numel} elements: this exercise's process group carries at "
                    f"most {self.max_numel[op]} per call")})
                return
        if op == "send":
            self._p2p_send(c.rank, h, payload)
            self._send(c, {"t": "reply", "id": rid})   # eager: a send never waits
        elif op == "recv":
            self._p2p_recv(c.rank, h, rid)
        else:
            self._collective(c.rank, h, payload, rid)

    def _p2p_send(self, rank: int, h: dict, payload: bytes) -> None:
        peer = int(h["peer"])
        if not 0 <= peer < self.nprocs or peer == rank:
            raise ValueError(f"send to rank {peer}")
        m = self._record(rank, h, payload)
        key = (rank, peer, m.tag)
        waiting = self._recvs.get(key)
        if waiting:
            recv, rid = waiting.pop(0)
            self._complete_recv(recv, rid, m)
        else:
            self._sends.setdefault(key, []).append(m)

    def _p2p_recv(self, rank: int, h: dict, rid: int) -> None:
        peer = int(h["peer"])
        if not 0 <= peer < self.nprocs or peer == rank:
            raise ValueError(f"recv from rank {peer}")
        m = self._record(rank, h)
        key = (peer, rank, m.tag)
        queued = self._sends.get(key)
        if queued:
            self._complete_recv(m, rid, queued.pop(0))
        else:
            self._recvs.setdefault(key, []).append((m, rid))
            self._pending[rank][rid] = f"recv from rank {peer}" + (f" (tag {m.tag})" if m.tag else "")

    def _complete_recv(self, recv: Message, rid: int, send: Message) -> None:
        self._pending[recv.rank].pop(rid, None)
        data = send.data
        if recv.dtype != send.dtype or _nbytes(recv) != len(data):
            self._send(self.conns[recv.rank], {"t": "reply", "id": rid, "fail": (
                f"rank {recv.rank} received into {recv.dtype}{recv.shapes[0]} what rank "
                f"{send.rank} sent as {send.dtype}{send.shapes[0]}")})
            return
        recv.got = data
        self._send(self.conns[recv.rank], {"t": "reply", "id": rid}, data)

    def _collective(self, rank: int, h: dict, payload: bytes, rid: int) -> None:
        k = self._coll_count[rank]
        self._coll_count[rank] += 1
        m = self._record(rank, h, payload)
        m.info["k"] = k + 1
        entered = self._coll.setdefault(k, {})
        entered[rank] = (m, rid)
        self._pending[rank][rid] = f"{m.op} (collective #{k + 1})"
        if len(entered) < self.nprocs:
            return
        del self._coll[k]
        calls = [entered[r][0] for r in range(self.nprocs)]
        try:
            outs = _compute(calls, self.nprocs)
        except ValueError as e:
            outs, why = None, str(e)
        for r in range(self.nprocs):
            msg, rid_r = entered[r]
            self._pending[r].pop(rid_r, None)
            if outs is None:
                self._send(self.conns[r], {"t": "reply", "id": rid_r, "fail": why})
                continue
            msg.got = outs[r]
            if msg.op.startswith("impl:") and self.deliver is not None:
                msg.got = self.deliver(msg, outs[r])
            self._send(self.conns[r], {"t": "reply", "id": rid_r}, msg.got)


def _not_offered(op: str, offer: set[str]) -> str:
    return (f"dist.{op} is not available in this exercise's process group (it offers: "
            f"{', '.join(sorted(offer)) or 'nothing'})")


def _numel(shape) -> int:
    k = 1
    for d in shape:
        k *= int(d)
    return k


def _nbytes(m: Message) -> int:
    import torch

    return m.numel * torch.empty((), dtype=_dtype(m.dtype)).element_size()


def _dtype(name: str):
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def _tensors(m: Message, data: bytes) -> list:
    """The tensors of a message (shapes in order, one buffer)."""
    import torch

    flat = torch.frombuffer(bytearray(data), dtype=_dtype(m.dtype)) if data else \
        torch.empty(0, dtype=_dtype(m.dtype))
    out, at = [], 0
    for s in m.shapes:
        k = _numel(s)
        out.append(flat[at:at + k].reshape(s))
        at += k
    return out


def _bytes(tensors) -> bytes:
    import torch

    if not tensors:
        return b""
    flat = torch.cat([t.reshape(-1) for t in tensors]) if len(tensors) > 1 else tensors[0].reshape(-1)
    return flat.contiguous().view(torch.uint8).numpy().tobytes()


def _reduce(name: str, stack):
    if name == "sum":
        return stack.sum(0, dtype=stack.dtype)
    if name == "product":
        return stack.prod(0, dtype=stack.dtype)
    if name == "max":
        return stack.max(0).values
    if name == "min":
        return stack.min(0).values
    raise ValueError(f"reduction {name!r} is not served (only {', '.join(REDUCTIONS)})")


def _compute(calls: list[Message], n: int) -> list[bytes]:
    """Every rank's output of one collective, or ValueError when the ranks disagree."""
    import torch

    first = calls[0]
    sig = [(c.op, c.dtype, c.shapes, c.reduce, c.root) for c in calls]
    if any(s != sig[0] for s in sig):
        said = "; ".join(f"rank {c.rank}: {c.op}({c.dtype}, shapes {c.shapes}"
                         + (f", {c.reduce}" if c.reduce else "") + ")" for c in calls)
        raise ValueError(f"the ranks called different collectives at #{first.info['k']}: {said}")
    ins = [_tensors(c, c.data) for c in calls]
    op = first.op.removeprefix("impl:")  # a harness's collective: computed as the real one
    if op == "barrier":
        return [b""] * n
    if op == "all_reduce":  # each rank's tensors, element-wise over ranks
        out = [_reduce(first.reduce, torch.stack([ins[r][i] for r in range(n)]))
               for i in range(len(first.shapes))]
        return [_bytes(out)] * n
    if op == "reduce":
        out = [_reduce(first.reduce, torch.stack([ins[r][i] for r in range(n)]))
               for i in range(len(first.shapes))]
        return [_bytes(out) if r == first.root else _bytes(ins[r]) for r in range(n)]
    if op == "broadcast":
        return [_bytes(ins[first.root])] * n
    if op == "all_gather":  # each rank one input; everyone gets all, in rank order
        if len(first.shapes) != 1:
            raise ValueError("all_gather: one input tensor per rank")
        return [_bytes([ins[r][0] for r in range(n)])] * n
    if op == "reduce_scatter":  # each rank n inputs; rank r gets the reduction of inputs[r]
        if len(first.shapes) != n:
            raise ValueError(f"reduce_scatter: {n} input chunks per rank, got {len(first.shapes)}")
        return [_bytes([_reduce(first.reduce, torch.stack([ins[q][r] for q in range(n)]))])
                for r in range(n)]
    raise ValueError(f"{op} is not served by the relay")
