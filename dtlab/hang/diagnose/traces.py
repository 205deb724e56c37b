"""Step 3: each rank's sequence of collectives, from Flight Recorder or from NCCL's COLL lines,
and the first place the ranks disagree.

A :class:`Call` is one collective a rank issued: its 1-based position on the communicator
(Flight Recorder's ``collective_seq_id``; the position in the COLL sequence for NCCL logs, since
NCCL 2.28 logs ``opCount 0`` for torch's calls over P2P/SHM), the op, the element count, the
dtype, whether it completed, and the user line that called it.

Point-to-point calls (send/recv) are kept apart: they are paired, not matched across all ranks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# op names as torch (FR profiling names, DETAIL OpType) and NCCL spell them -> one spelling
_OPS = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather", "_reduce_scatter_tensor_base": "reduce_scatter",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all", "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "recvanysource": "recv",
}
_DTYPES = {"float": "float32", "float32": "float32", "ncclfloat32": "float32", "ncclfloat": "float32",
           "bfloat16": "bfloat16", "ncclbfloat16": "bfloat16", "half": "float16",
           "float16": "float16", "ncclfloat16": "float16", "double": "float64",
           "ncclfloat64": "float64", "int": "int32", "ncclint32": "int32", "long": "int64",
           "ncclint64": "int64", "char": "int8", "ncclint8": "int8", "byte": "uint8",
           "nccluint8": "uint8"}


def op_name(raw: str) -> str:
    """'nccl:all_reduce', 'ALLREDUCE', 'AllReduce', '_ALLGATHER_BASE' -> 'all_reduce' etc."""
    key = raw.split(":")[-1].strip().lower()
    return _OPS.get(key, _OPS.get(key.replace("_", ""), key))


def dtype_name(raw: str | None) -> str | None:
    if raw is None:
        return None
    return _DTYPES.get(str(raw).lower(), str(raw).lower())


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


def from_flight_recorder(dump: dict) -> list[Call]:
    """Collective calls of the default process group in one rank's FR dump."""
    calls = []
    entries = [e for e in dump.get("entries", [])
               if not e.get("is_p2p") and e.get("collective_seq_id")
               and (str((e.get("process_group") or ("0",))[0]) in ("0", "")
                    or "default" in str((e.get("process_group") or ("", ""))[1]))]
    streams = _streams(entries)
    for e in max(streams, key=_is_user_stream) if streams else []:
        site = None
        for fr in e.get("frames") or []:
            name = fr.get("filename", "")
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


@dataclass
class Divergence:
    seq: int
    reason: str  # "op", "count", "dtype", "fewer_calls"
    groups: dict[tuple, list[int]]  # signature (or "none") -> ranks
    odd: list[int]  # the minority ranks, when one group is a strict minority of one kind
    calls: dict[int, Call | None]
    fewer: list[int]  # ranks that issued fewer collectives than the most any rank issued


def first_divergence(traces: dict[int, list[Call]]) -> Divergence | None:
    """Where the ranks' collective sequences first disagree (None if they never do)."""
    traces = {r: [c for c in t if not c.p2p] for r, t in traces.items()}
    if len(traces) < 2:
        return None
    longest = max(len(t) for t in traces.values())
    for i in range(longest):
        at = {r: (t[i] if i < len(t) else None) for r, t in traces.items()}
        sigs = {r: (c.signature() if c else None) for r, c in at.items()}
        if len(set(sigs.values())) == 1:
            continue
        present = {r: c for r, c in at.items() if c is not None}
        if len(present) < len(at):
            reason = "fewer_calls"
        else:
            ops = {c.op for c in present.values()}
            counts = {c.count for c in present.values()}
            reason = "op" if len(ops) > 1 else "count" if len(counts) > 1 else "dtype"
            reason = torch_match(list(present.values()), len(traces)) or reason
        groups: dict[tuple, list[int]] = {}
        for r, s in sigs.items():
            groups.setdefault(s if s is not None else ("none",), []).append(r)
        most = max(len(t) for t in traces.values())
        fewer = sorted(r for r, t in traces.items() if len(t) < most)
        seq = next(c.seq for c in at.values() if c is not None)
        return Divergence(seq, reason, groups, odd_one_out(groups), at, fewer)
    return None


def odd_one_out(groups: dict) -> list[int]:
    """The ranks of the single smallest group, if it is strictly smaller than every other and
    the rest agree (one majority); else [] (e.g. two ranks that disagree: no majority)."""
    if len(groups) < 2:
        return []
    sizes = Counter(len(v) for v in groups.values())
    ordered = sorted(groups.values(), key=len)
    smallest, largest = ordered[0], ordered[-1]
    if len(groups) == 2 and len(smallest) < len(largest):
        return sorted(smallest)
    if len(groups) > 2 and sizes[len(largest)] == 1 and len(largest) > sum(map(len, ordered[:-1])):
        return sorted(r for g in ordered[:-1] for r in g)
    return []


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
    except (AssertionError, KeyError, ValueError):
        return None
    for other in ops[1:]:
        state = getattr(ops[0].match(other), "state", None)
        name = getattr(state, "name", "")
        if name in _TORCH_STATES:
            return _TORCH_STATES[name]
    return None
