"""The numbers NCCL prints, and their names.

A COLL line says ``datatype 7 op 0``: the raw values of ``ncclDataType_t`` and ``ncclRedOp_t``
from ``src/nccl.h.in`` (stable across versions; the fp8 types 10 and 11 were appended later).
Algorithms and protocols are indices into ``ncclAlgoStr`` / ``ncclProtoStr`` (``src/init.cc``); the per-call TUNING line spells them the way ``ncclAlgoToString`` /
``ncclProtoToString`` do (``src/collectives.cc``: ``RING``, ``NVLS_TREE``, ``SIMPLE``), the
tuning table the way ``ncclAlgoStr`` does (``Ring``, ``NVLSTree``, ``Simple``).

>>> datatype_name(7), redop_name(0), type_size(9), torch_dtype(9)
('ncclFloat32', 'ncclSum', 2, 'bfloat16')
>>> canonical_algorithm("NVLS_TREE"), canonical_protocol("SIMPLE"), algorithm_name(1)
('NVLSTree', 'Simple', 'Ring')
"""

from __future__ import annotations

from ..vocab import dtype_bytes, dtype_name

# ncclDataType_t, src/nccl.h.in (aliases ncclChar/ncclInt/ncclHalf/ncclFloat/ncclDouble share
# the numbers of the names below)
DATATYPES = {
    0: "ncclInt8", 1: "ncclUint8", 2: "ncclInt32", 3: "ncclUint32", 4: "ncclInt64",
    5: "ncclUint64", 6: "ncclFloat16", 7: "ncclFloat32", 8: "ncclFloat64", 9: "ncclBfloat16",
    10: "ncclFloat8e4m3", 11: "ncclFloat8e5m2",
}
# bytes per element (NCCL's ncclTypeSize()), and torch's name: from dtlab.vocab, which knows
# every dtype by NCCL's name too
TYPE_SIZES = {code: dtype_bytes(name) for code, name in DATATYPES.items()}
TORCH_NAMES = {code: dtype_name(name) for code, name in DATATYPES.items()}

# ncclRedOp_t, src/nccl.h.in. Values from ncclNumOps (5) up are handles made at run time by
# ncclRedOpCreatePreMulSum (torch uses one for PREMUL_SUM, and for AVG on old NCCL).
REDOPS = {0: "ncclSum", 1: "ncclProd", 2: "ncclMax", 3: "ncclMin", 4: "ncclAvg"}
NUM_BUILTIN_REDOPS = 5

# ncclResult_t, src/nccl.h.in: the number at the end of NCCL's error-trace lines "file.cc:123 -> 5"
RESULTS = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError",
           3: "ncclInternalError", 4: "ncclInvalidArgument", 5: "ncclInvalidUsage",
           6: "ncclRemoteError", 7: "ncclInProgress"}

# ncclAlgoStr / ncclProtoStr, src/init.cc; the index is what NCCL 2.18's TUNING line prints.
# PAT was appended in 2.23, so older indices keep their meaning.
ALGORITHMS = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"]
PROTOCOLS = ["LL", "LL128", "Simple"]

# Point-to-point operations also print COLL lines (opName "Send"/"Recv", root = the peer);
# they are not expected to match across ranks, so divergence leaves them out.
P2P_OPS = {"Send", "Recv", "SendRecv"}


def datatype_name(code: int) -> str:
    return DATATYPES.get(code, f"unknown({code})")


def result_name(code: int) -> str:
    return RESULTS.get(code, f"unknown({code})")


def type_size(code: int) -> int | None:
    return TYPE_SIZES.get(code)


def torch_dtype(code: int) -> str | None:
    """The dtype's name in torch (and the rest of dtlab): 9 -> 'bfloat16'."""
    return TORCH_NAMES.get(code)


def redop_name(code: int) -> str:
    if code in REDOPS:
        return REDOPS[code]
    if code >= NUM_BUILTIN_REDOPS:
        return f"user-defined({code})"
    return f"unknown({code})"


def _key(name: str) -> str:
    return name.replace("_", "").lower()


_ALGO_BY_KEY = {_key(a): a for a in ALGORITHMS}
_PROTO_BY_KEY = {_key(p): p for p in PROTOCOLS}


def canonical_algorithm(name: str) -> str:
    """'RING' (ncclAlgoToString) or 'Ring' (ncclAlgoStr) -> 'Ring'; unknown names unchanged."""
    return _ALGO_BY_KEY.get(_key(name), name)


def canonical_protocol(name: str) -> str:
    return _PROTO_BY_KEY.get(_key(name), name)


def algorithm_name(index: int) -> str:
    return ALGORITHMS[index] if 0 <= index < len(ALGORITHMS) else f"unknown({index})"


def protocol_name(index: int) -> str:
    return PROTOCOLS[index] if 0 <= index < len(PROTOCOLS) else f"unknown({index})"
