"""Step 2: what each piece of text says, as small independent passes over lines.

Every pass turns matching lines into :class:`Signal` objects tagged with the rank they came from.
Rank attribution, in order: a prefix on the line (``[rank 1]`` from dtlab, ``[rank1]:`` from
torch's C++ logging, ``[default1]:`` from torchrun), else the file's name (``rank1.stderr.txt``).

An exception is *primary* when it is the rank's own failure (a ValueError in the user's code, a
bad argument to a collective) and *secondary* when it only reports what the collective library
saw happen: a peer that went away, a timeout, a mismatch that gloo or TORCH_DISTRIBUTED_DEBUG
caught, NCCL's watchdog (``CONSEQUENCE`` below). Only primary exceptions make the ``exception``
failure class; the others are symptoms of a cause found elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...runtime.stacks import is_library, main_thread, parse_threads
from ...vocab import OPS, op_name
from .notes import exception_text

_PREFIX = re.compile(r"^\[(?:rank ?(\d+)(?: [^\]]*)?|default(\d+))\]:? ?")


@dataclass
class Signal:
    kind: str
    rank: int | None
    path: str
    line: str
    data: dict = field(default_factory=dict)


def split_by_rank(text: str, default: int | None) -> dict[int | None, list[str]]:
    """Lines of ``text`` grouped by the rank that printed them."""
    out: dict[int | None, list[str]] = {}
    for line in text.splitlines():
        m = _PREFIX.match(line)
        rank = default
        if m:
            rank = int(m.group(1) or m.group(2))
            line = line[m.end():]
            m2 = _PREFIX.match(line)  # "[rank 1] [rank1]:[E...]": both prefixes
            if m2:
                line = line[m2.end():]
        out.setdefault(rank, []).append(line)
    return out


# -- one regex pass per message shape --------------------------------------------------------------

OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate memory|"
                 r"std::bad_alloc|\bMemoryError\b|out of memory", re.IGNORECASE)
GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")
PEER_LOST = re.compile(r"Connection (?:closed|reset) by peer|remote process exited|Broken pipe")
GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (send|recv) operation")
WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), "
                      r"OpType=(\w+)(?:, NumelIn=(\d+), NumelOut=(\d+))?.*?Timeout\(ms\)=(\d+)\)")
FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\("
                         r"SequenceNumber=(\d+), OpType=(\w+), TensorShape=\[([^\]]*)\], "
                         r"TensorDtypes=(\w+)")
BARRIER = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
# (other key=value fields may sit before t=: the capstone's "phase=done loss=2.96 t=...")
STEP = re.compile(r"\[dtlab-step\] rank=(\d+) step=(\d+) phase=(\w+)(?: \w+=\S+)* t=([\d.]+)")
DTLAB_FAILURE = re.compile(r"^----- rank (\d+) \[([^\]]*)\] (?:killed by (SIG\w+)|exit code (-?\d+))")
NCCL_ERROR = re.compile(r"NCCL error|ncclInvalidUsage|ncclSystemError|ncclInternalError|"
                        r"ncclRemoteError|ncclUnhandledCudaError")
# the line that ends a traceback: "Type: message", or the bare type when the message is empty
# (``raise NotImplementedError()``, a bare ``assert``); any class name, not only *Error
EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$")
# between the tracebacks of a chain: the earlier exception is the cause, not what was raised
CHAINED = ("During handling of the above exception, another exception occurred:",
           "The above exception was the direct cause of the following exception:")
TB_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
# an exception that reports what the collective library saw, not the rank's own bug: a peer
# that went away (the runtime's errors.py marks the same messages secondary), a timeout, a
# mismatch caught by gloo or by TORCH_DISTRIBUTED_DEBUG's checks, NCCL errors and watchdog
CONSEQUENCE = re.compile(
    r"Connection (?:closed|reset) by peer|Broken pipe|remote process exited|ncclRemoteError|"
    r"communicator was aborted|Socket Timeout|Connection refused|ECONNRESET|EPIPE|"
    r"/gloo/|enforce fail|Timed out|timed out|Timeout|Detected mismatch between collectives|"
    r"failed to pass monitoredBarrier|Watchdog|NCCL error|nccl\w*Error|"
    r"op\.preamble\.length|doesn't match expected size", re.IGNORECASE)
# not a rank's own failure: the launcher's, a requested stop, or torch.distributed's own errors
# (a KeyboardInterrupt is a rank's own unless dtlab sent it: failed.exception skips stopped ranks)
_NOT_PRIMARY_TYPES = re.compile(r"(?:^|\.)(?:SystemExit|SignalException|"
                                r"ChildFailedError|Dist\w*Error)$")


def is_primary(sig: Signal) -> bool:
    """Is this exception signal the rank's own failure (see the module docstring)?"""
    return (sig.kind == "exception" and sig.rank is not None
            and not _NOT_PRIMARY_TYPES.search(sig.data["type"])
            and not OOM.search(f"{sig.data['type']}: {sig.data['message']}")
            and not CONSEQUENCE.search(f"{sig.data['type']}: {sig.data['message']}"))


def line_signals(lines: list[str], rank: int | None, path: str) -> list[Signal]:
    out = []
    for line in lines:
        if m := STEP.search(line):
            out.append(Signal("step", int(m[1]), path, line,
                              {"step": int(m[2]), "phase": m[3], "t": float(m[4])}))
            continue
        for f in FINGERPRINT.finditer(line):
            out.append(Signal("fingerprint", int(f[1]), path, line, {
                "seq": int(f[2]) + 1,  # torch's SequenceNumber counts from 0; FR and we from 1
                "op": f[3], "shape": f[4].replace(" ", ""), "dtype": f[5], "reporter": rank}))
        if m := BARRIER.search(line):
            missing = [int(x) for x in re.findall(r"\d+", m[1])]
            out.append(Signal("barrier_missing", rank, path, line, {"ranks": missing}))
        if m := WATCHDOG.search(line):
            out.append(Signal("watchdog", rank, path, line, {
                "seq": int(m[1]), "op": m[2], "numel": int(m[3]) if m[3] else None,
                "timeout_ms": int(m[5])}))
        if m := GLOO_SIZE.search(line):
            out.append(Signal("gloo_size", rank, path, line,
                              {"got": int(m[1]), "expected": int(m[2])}))
        if m := GLOO_TIMEOUT.search(line):
            out.append(Signal("gloo_timeout", rank, path, line, {"op": m[2], "ms": int(m[1])}))
        if PEER_LOST.search(line):
            out.append(Signal("peer_lost", rank, path, line))
        if OOM.search(line) and "[dtlab-step]" not in line:
            out.append(Signal("oom", rank, path, line))
        if NCCL_ERROR.search(line):
            out.append(Signal("nccl_error", rank, path, line))
        if m := DTLAB_FAILURE.match(line):
            code = -_signum(m[3]) if m[3] else int(m[4])
            out.append(Signal("reported_exit", int(m[1]), path, line,
                              {"exit_code": code, "root": "ROOT CAUSE" in m[2]}))
    return out


def _signum(name: str) -> int:
    import signal

    try:
        return int(getattr(signal, name))
    except AttributeError:
        return 0


def tracebacks(lines: list[str], rank: int | None, path: str) -> list[Signal]:
    """Python tracebacks: the exception and the innermost user frame it came through. Of a
    chain (``raise ... from``, or an exception while handling another) only the exception that
    was finally raised counts; its ``cause`` is the one before it."""
    out = []
    frames: list[tuple[str, int, str]] = []
    inside, cause = False, None
    for line in lines:
        if line.startswith("Traceback (most recent call last):"):
            inside, frames = True, []
            continue
        if line.strip() in CHAINED and out and out[-1].data.get("open"):
            cause = out.pop()  # superseded by the exception whose traceback follows
            continue
        if out and out[-1].data.get("open") and line.strip():
            out[-1].data.pop("open")  # the chain ends: whatever follows is other output
        if not inside:
            continue
        if m := TB_FRAME.match(line):
            frames.append((m[3], m[1], int(m[2])))  # (func, file, line) like parse_threads
        elif line[:1].strip() and (m := EXC_LINE.match(line.rstrip())):
            # the first unindented line after the frames (code lines and ^^^ markers are indented)
            out.append(Signal("exception", rank, path, line.strip(), {
                "type": m[1], "message": m[2] or "", "site": _user_site(reversed(frames)),
                "dist_op": _dist_op(reversed(frames)), "open": True,
                "cause": exception_text(cause.data) if cause else None}))
            inside, cause = False, None
        elif line[:1].strip():
            inside = False  # not a traceback after all (other output interleaved)
    for sig in out:
        sig.data.pop("open", None)
    return out


def fatal_dumps(text: str, rank: int | None, path: str) -> list[Signal]:
    """faulthandler's ``Fatal Python error`` (a segfault, or an abort such as gloo's) with the
    main thread's stack, and the C++ message printed just before it."""
    m = re.search(r"Fatal Python error: (\w[\w ]*)", text)
    if not m:
        return []
    frames = main_thread(text[m.start():])
    what = re.search(r"what\(\):\s*(.+)", text)
    return [Signal("fatal", rank, path, m.group(0), {
        "reason": m[1].strip(), "site": _user_site(frames), "dist_op": _dist_op(frames),
        "cpp_message": what[1].strip() if what else None})]


def stack_signal(text: str, rank: int | None, path: str, when: str) -> Signal:
    frames = main_thread(text)
    return Signal("stack", rank, path, f"py-spy {when}", {
        "site": _user_site(frames), "dist_op": _dist_op(frames), "when": when,
        "in_sync": any(f in ("item", "synchronize", "_local_scalar_dense") for f, _, _ in frames[:3]),
        "threads": len(parse_threads(text))})


def _user_site(frames) -> str | None:
    for func, file, line in frames if isinstance(frames, list) else list(frames):
        if not is_library(file):
            return f"{file.rsplit('/', 1)[-1]}:{line}"
    return None


# torch.distributed's API functions beyond the collectives' own names (vocab.op_name maps
# all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, ... to those)
_DIST_EXTRA = {"isend", "irecv", "batch_isend_irecv", "monitored_barrier"}


def _dist_op(frames) -> str | None:
    """The torch.distributed call the rank is in (the frame inside distributed_c10d.py)."""
    for func, file, _ in frames if isinstance(frames, list) else list(frames):
        if file.endswith("distributed_c10d.py") and (op_name(func) in OPS or func in _DIST_EXTRA):
            return func
    return None
