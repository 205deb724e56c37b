"""Step 3: each rank's sequence of collectives, from Flight Recorder or from NCCL's COLL lines,
and the first place the ranks disagree.

A :class:`Call` is one collective a rank issued: its 1-based position on the communicator
(Flight Recorder's ``collective_seq_id``; the position in the COLL sequence for NCCL logs, since
NCCL 2.28 logs ``opCount 0`` for torch's calls over P2P/SHM), the op, the element count, the
dtype, whether it completed, and the user line that called it.

Point-to-point calls (send/recv) are kept apart: they are paired, not matched across all ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...divergence import Divergence
from ...divergence import first_divergence as _first_divergence
from ...vocab import dtype_name, op_name


class MalformedDump(ValueError):
    """A Flight Recorder dump whose entries are not what torch writes (wrong types, missing
    keys): unreadable evidence, never a crash."""


@dataclass
class Call:
    seq: int
    op: str
    count: int | None
    dtype: str | None
    completed: bool | None = None
    site: str | None = None
    time_ns: int | None = None
    entry: dict | None = field(default=None, repr=False, compare=False)  # the raw FR entry

    @property
    def p2p(self) -> bool:
        return self.op in ("send", "recv")

    def signature(self) -> tuple:
        return (self.op, self.count, self.dtype)

    def describe(self) -> str:
        return f"{self.op} of {self.count} x {self.dtype}" + (f" from {self.site}" if self.site else "")


def _numel(sizes) -> int | None:
    if not sizes:
        return None
    total = 0
    for shape in sizes:
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def _streams(entries: list[dict]) -> list[list[dict]]:
    """Split entries whose sequence numbers restart into separate counters. Under
    TORCH_DISTRIBUTED_DEBUG=DETAIL the checking wrapper's own fingerprint all_gathers (int64)
    land in the same recorder with a sequence of their own."""
    streams: list[list[dict]] = []
    for e in entries:
        seq = e["collective_seq_id"]
        fits = [st for st in streams if st[-1]["collective_seq_id"] == seq - 1]
        # two counters can both be at seq-1: prefer the one of the same kind (the checker's
        # int64 all_gathers vs the program's own collectives)
        same = [st for st in fits if _checker(st[-1]) == _checker(e)]
        target = (same or fits or [None])[0]
        if target is None:
            streams.append([e])
        else:
            target.append(e)
    return streams


def _checker(e: dict) -> bool:
    return "all_gather" in str(e.get("profiling_name", "")) and all(
        str(d).lower() in ("long", "int") for d in e.get("input_dtypes") or [])


def _is_user_stream(stream: list[dict]) -> int:
    return len(stream) - 2 * sum(map(_checker, stream))


def _entry_problem(e) -> str | None:
    """Why one Flight Recorder entry is not what torch writes, or None. Checked: the fields
    dtlab reads, with the types torch 2.10/2.11 dumps hold (see data/h200x2-hang/*/fr)."""
    if not isinstance(e, dict):
        return f"an entry is a {type(e).__name__}, not a dict"
    typed = (("collective_seq_id", int), ("profiling_name", str), ("input_sizes", list),
             ("input_dtypes", list), ("frames", list), ("state", str),
             ("process_group", (tuple, list)), ("time_created_ns", int), ("is_p2p", bool))
    for key, kind in typed:
        v = e.get(key)
        if v is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            return f"{key} is a {type(v).__name__}"
    if not e.get("is_p2p") and e.get("collective_seq_id") and "profiling_name" not in e:
        return "a collective entry without profiling_name"
    for shape in e.get("input_sizes") or []:
        if not isinstance(shape, (list, tuple)) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in shape):
            return f"input_sizes holds {shape!r:.40}, not a list of ints"
    if not all(isinstance(fr, dict) for fr in e.get("frames") or []):
        return "frames holds something other than dicts"
    return None


def from_flight_recorder(dump: dict) -> list[Call]:
    """Collective calls of the default process group in one rank's FR dump.

    Raises :class:`MalformedDump` (naming what is wrong) when ``entries`` is not a list of
    entries as torch writes them."""
    entries = dump.get("entries") if isinstance(dump, dict) else None
    if not isinstance(entries, list):
        raise MalformedDump(f"'entries' is a {type(entries).__name__}, not a list")
    for i, e in enumerate(entries):
        if problem := _entry_problem(e):
            raise MalformedDump(f"entry {i}: {problem}")
    calls = []
    entries = [e for e in entries
               if not e.get("is_p2p") and e.get("collective_seq_id")
               and (str((e.get("process_group") or ("0",))[0]) in ("0", "")
                    or "default" in str((tuple(e.get("process_group") or ()) + ("", ""))[1]))]
    streams = _streams(entries)
    for e in max(streams, key=_is_user_stream) if streams else []:
        site = None
        for fr in e.get("frames") or []:
            name = str(fr.get("filename", ""))
            if not ("/torch/" in name or name.endswith("c10d_logger.py")):
                site = f"{name.rsplit('/', 1)[-1]}:{fr.get('line')}"
                break
        state = e.get("state")
        calls.append(Call(
            seq=int(e["collective_seq_id"]), op=op_name(e.get("profiling_name", "?")),
            count=_numel(e.get("input_sizes")),
            dtype=dtype_name((e.get("input_dtypes") or [None])[0]),
            completed=(state == "completed") if state in ("completed", "started") else None,
            site=site, time_ns=e.get("time_created_ns"), entry=e))
    calls.sort(key=lambda c: c.seq)
    return calls


def from_nccl_calls(rows: list[dict]) -> list[Call]:
    """Collective calls from dtlab.nccl_log's per-rank COLL rows (p2p left out)."""
    calls = []
    for row in rows:
        if row.get("p2p"):
            continue
        calls.append(Call(seq=len(calls) + 1, op=op_name(row.get("op", "?")),
                          count=row.get("count"), dtype=dtype_name(row.get("datatype_name"))))
    return calls


FIELDS = ("op", "count", "dtype")  # compared in this order (the reason is the first that differs)


def first_divergence(traces: dict[int, list[Call]]) -> Divergence | None:
    """Where the ranks' collective sequences first disagree (None if they never do):
    :func:`dtlab.divergence.first_divergence` over the collectives (p2p left out), with
    ``position`` set to the collective's sequence number and, where both sides are Flight
    Recorder entries, the kind of mismatch that torch's own analyzer reports."""
    traces = {r: [c for c in t if not c.p2p] for r, t in traces.items()}
    d = _first_divergence(traces, FIELDS)
    if d is None:
        return None
    present = [c for c in d.items.values() if c is not None]
    reason = d.reason
    if reason != "fewer_calls":
        reason = torch_match(present, len(traces)) or reason
    return replace(d, position=present[0].seq, reason=reason)


# torch's Flight Recorder analyzer (torch.distributed.flight_recorder) compares two ranks'
# entries with Op.match; where both sides are Flight Recorder entries it names the mismatch
_TORCH_STATES = {"COLLECTIVE_TYPE_MISMATCH": "op", "SIZE_OR_SYNTAX_MISMATCH": "count",
                 "COLLECTIVE_DTYPE_MISMATCH": "dtype"}


def torch_match(calls: list[Call], world: int) -> str | None:
    """The kind of mismatch torch's own analyzer sees between the first call and each other
    one (None if it cannot say: entries not from Flight Recorder, an analyzer this torch lacks,
    an op name it does not know)."""
    if any(c.entry is None for c in calls):
        return None
    try:
        from torch.distributed.flight_recorder.components.types import Op
    except ImportError:
        return None
    members = {"0": set(range(world))}
    try:
        ops = [Op(c.entry, members, "0") for c in calls]
    except (AssertionError, KeyError, ValueError, TypeError, IndexError, AttributeError):
        return None  # the analyzer's own assumptions about an entry do not hold: no opinion
    for other in ops[1:]:
        state = getattr(ops[0].match(other), "state", None)
        name = getattr(state, "name", "")
        if name in _TORCH_STATES:
            return _TORCH_STATES[name]
    return None
