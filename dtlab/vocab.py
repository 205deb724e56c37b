"""One vocabulary for the whole package: collective names, dtypes, exit wording, sizes, and the
rule for naming the odd rank out. A leaf: it imports nothing from dtlab (ARCHITECTURE.md), so
every layer -- the runtime, the log parser, the bench, the diagnoser -- can use it.

Collectives are spelled as ``torch.distributed`` spells them (``all_to_all``, not ``alltoall``);
``sendrecv`` is the paired send/recv pattern that nccl-tests measures.

>>> op_name("AllReduce"), op_name("nccl:_ALLGATHER_BASE"), op_name("alltoall_perf")
('all_reduce', 'all_gather', 'all_to_all')
>>> dtype_name("ncclBfloat16"), dtype_name("Half"), dtype_name("torch.float32")
('bfloat16', 'float16', 'float32')
>>> exit_summary(-9), exit_summary(3)
('killed by SIGKILL', 'exit code 3')
>>> parse_size("128M"), format_size(1536)
(134217728, '1.5K')
>>> odd_ones_out({0: "a", 1: "a", 2: "b"}), odd_ones_out({0: "a", 1: "b"})
(([2], True), ([0, 1], False))
"""

from __future__ import annotations

import re
import signal
from collections import Counter

# --- collectives -------------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
               "gather", "scatter", "barrier")
P2P = ("send", "recv", "sendrecv")
OPS = COLLECTIVES + P2P

# every spelling met in torch (API names, Flight Recorder profiling names, DETAIL OpType), NCCL
# (COLL lines, TUNING lines) and nccl-tests (binary names) -> the one above
_OP_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "allgatherbase": "all_gather",
    "allgatherintotensor": "all_gather", "allgatherintotensorcoalesced": "all_gather",
    "allgathercoalesced": "all_gather", "allgathersingle": "all_gather",
    "reducescatter": "reduce_scatter", "reducescattersingle": "reduce_scatter",
    "reducescatterbase": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "reducescattertensorbase": "reduce_scatter", "reducescattertensorcoalesced": "reduce_scatter",
    "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
    "alltoall": "all_to_all", "alltoallbase": "all_to_all", "alltoallsingle": "all_to_all",
    "alltoallv": "all_to_all", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
    "send": "send", "recv": "recv", "recvanysource": "recv", "sendrecv": "sendrecv",
    "p2p": "sendrecv",
}


def op_name(raw: str) -> str:
    """Any spelling of a collective -> its one name; an unknown name comes back lower-cased.

    'nccl:all_reduce', 'ALLREDUCE', 'AllReduce', '_ALLGATHER_BASE', 'alltoall_perf' ...
    """
    key = str(raw).split(":")[-1].strip().lower()
    key = re.sub(r"_perf$", "", key)
    return _OP_ALIASES.get(re.sub(r"[_\- ]", "", key), key)


def check_op(raw, allowed: tuple[str, ...] = OPS, what: str = "op") -> str:
    """:func:`op_name`, or ValueError naming the choices when ``raw`` is not one of ``allowed``."""
    name = op_name(raw) if isinstance(raw, str) else None
    if name not in allowed:
        raise ValueError(f"{what}={raw!r} is not one of: {', '.join(allowed)}.")
    return name


# --- dtypes ------------------------------------------------------------------------------------

# torch name: (bytes per element, nccl-tests' name, NCCL's ncclDataType_t name)
DTYPES = {
    "float32": (4, "float", "ncclFloat32"), "float16": (2, "half", "ncclFloat16"),
    "bfloat16": (2, "bfloat16", "ncclBfloat16"), "float64": (8, "double", "ncclFloat64"),
    "int8": (1, "int8", "ncclInt8"), "uint8": (1, "uint8", "ncclUint8"),
    "int32": (4, "int32", "ncclInt32"), "uint32": (4, "uint32", "ncclUint32"),
    "int64": (8, "int64", "ncclInt64"), "uint64": (8, "uint64", "ncclUint64"),
    "float8_e4m3fn": (1, "f8e4m3", "ncclFloat8e4m3"), "float8_e5m2": (1, "f8e5m2", "ncclFloat8e5m2"),
}
_DTYPE_ALIASES = {
    "float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16",
    "bf16": "bfloat16", "double": "float64", "fp64": "float64", "int": "int32", "long": "int64",
    "char": "int8", "byte": "uint8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    **{nccl.lower(): name for name, (_, _, nccl) in DTYPES.items()},
    "ncclfloat": "float32", "ncclhalf": "float16", "nccldouble": "float64", "ncclint": "int32",
    "ncclchar": "int8",
}


def dtype_name(raw) -> str | None:
    """torch.float32, 'Float' (Flight Recorder), 'half', 'bf16', 'ncclBfloat16' -> torch's
    name; an unknown one comes back lower-cased; None stays None."""
    if raw is None:
        return None
    key = str(raw).removeprefix("torch.").strip().lower()
    return _DTYPE_ALIASES.get(key, key)


def check_dtype(raw, allowed=tuple(DTYPES), what: str = "dtype") -> str:
    """:func:`dtype_name`, or ValueError naming the choices."""
    name = dtype_name(raw)
    if name not in allowed:
        raise ValueError(f"{what}={raw!r} is not one of: {', '.join(allowed)}.")
    return name


def dtype_bytes(name) -> int:
    return DTYPES[dtype_name(name)][0]


def nccl_tests_type(name) -> str:
    """The name nccl-tests prints in its ``type`` column."""
    return DTYPES[dtype_name(name)][1]


# --- how a process ended -------------------------------------------------------------------------

def signal_name(exit_code: int | None) -> str | None:
    """'SIGKILL' for exit code -9 (Popen's convention); None for a normal exit."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def exit_summary(exit_code: int | None) -> str:
    """'killed by SIGSEGV', 'exit code 3', 'still running'."""
    if exit_code is None:
        return "still running"
    sig = signal_name(exit_code)
    return f"killed by {sig}" if sig else f"exit code {exit_code}"


# --- sizes ---------------------------------------------------------------------------------------

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: int | str, name: str = "size") -> int:
    """Byte sizes as nccl-tests writes them: 8, "8", "1K", "128M", "1G", "1.5K", "4KiB"
    (K = 1024). ValueError with an example for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name}={value!r} must be >= 0 bytes.")
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(value))
    if not m:
        raise ValueError(f"{name}={value!r} is not a size: give bytes like 8, 1K, 128M or 1G "
                         f"(K/M/G are powers of 1024, as in nccl-tests' -b/-e).")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(nbytes: int) -> str:
    """Short power-of-1024 label, as on nccl-tests plots: 8, 1K, 1.5K, 128M, 1G."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if nbytes >= scale:
            return f"{nbytes / scale:.4g}{unit}"
    return str(nbytes)


# --- who is the odd one out ----------------------------------------------------------------------

def odd_ones_out(values: dict[int, object]) -> tuple[list[int], bool]:
    """(ranks, confident): the ranks whose value differs from a strict majority's, confidently;
    with no strict majority (two ranks that disagree, a tie), every rank is a candidate and the
    answer is not confident -- the evidence alone cannot tell which side is wrong.

    >>> odd_ones_out({0: 1, 1: 1, 2: 1, 3: 2})
    ([3], True)
    >>> odd_ones_out({0: 1, 1: 1, 2: 2, 3: 2})
    ([0, 1, 2, 3], False)
    >>> odd_ones_out({0: 1, 1: 1})
    ([], True)
    """
    if not values:
        return [], True
    top, n = Counter(values.values()).most_common(1)[0]
    if n * 2 > len(values):
        return sorted(r for r, v in values.items() if v != top), True
    return sorted(values), False
