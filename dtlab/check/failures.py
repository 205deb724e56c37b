"""Failures of a check that have a name: a check that could not run is a FAIL row, and where
its error is one NCCL or CUDA names, the row says which, instead of the error's first line.

NCCL refuses two ranks of one host on one GPU when it creates a communicator (``src/init.cc``,
after the first all-gather of the ranks' peer info)::

    WARN("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", rank, i, busId)

and returns ``ncclInvalidUsage``, which torch raises with NCCL's last error appended. ``busId``
is the PCI bus id read as one hexadecimal number (``0000:1a:00.0`` -> ``1a000``). It happens when
the ranks' ``CUDA_VISIBLE_DEVICES`` differ (a GPU hidden from, or reordered for, one rank: its
``cuda:LOCAL_RANK`` is another rank's GPU) or when a program picks its device by something other
than LOCAL_RANK.

>>> name_failure("ncclInvalidUsage: ...\\nLast error:\\nDuplicate GPU detected : rank 1 and "
...              "rank 0 both on CUDA device 1a000")[0]
'duplicate GPU: ranks 1 and 0 both on the GPU at PCI 0000:1a:00.0 (NCCL refuses two ranks on one GPU)'
"""

from __future__ import annotations

import re

DUPLICATE_GPU = re.compile(r"Duplicate GPU detected\s*:\s*rank (\d+) and rank (\d+) both on CUDA "
                           r"device ([0-9a-fA-F]+)")
# CUDA's cudaErrorInvalidDevice, as torch prints it: a rank asked for cuda:N with fewer than N+1
# GPUs visible to it
INVALID_ORDINAL = re.compile(r"invalid device ordinal", re.I)

HOW_TO_SEE = ("compare the ranks' CUDA_VISIBLE_DEVICES; under torchrun, `python -m dtlab.check` "
              "prints every rank's GPU (UUID, bus id) and names the ranks that share one")


def nccl_bus_id(value: str) -> str:
    """NCCL's busId number, as printed in hexadecimal, back to a PCI bus id.

    >>> nccl_bus_id("1a000"), nccl_bus_id("60")
    ('0000:1a:00.0', '0000:00:06.0')
    """
    v = int(value, 16)
    return f"{v >> 20:04x}:{(v >> 12) & 0xff:02x}:{(v >> 4) & 0xff:02x}.{v & 0xf:x}"


def name_failure(text: str) -> tuple[str, str] | None:
    """(what failed, what to do) for an error text with a name; None for any other."""
    m = DUPLICATE_GPU.search(text)
    if m:
        a, b, bus = m.groups()
        return (f"duplicate GPU: ranks {a} and {b} both on the GPU at PCI {nccl_bus_id(bus)} "
                f"(NCCL refuses two ranks on one GPU)",
                "give each rank its own GPU: " + HOW_TO_SEE + " (sections 00, 04)")
    if INVALID_ORDINAL.search(text):
        return ("a GPU hidden from a rank: it asked for cuda:LOCAL_RANK and CUDA has no such "
                "device (invalid device ordinal)",
                "every rank of a node must see that node's GPUs: " + HOW_TO_SEE + " (sections 00, 04)")
    return None


def error_text(e: BaseException) -> str:
    """All an exception says: its message and, for :class:`dtlab.RankError`, each rank's
    traceback (where NCCL's own line is)."""
    parts = [str(e)]
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict):
        parts += [str(v) for v in failures.values()]
    return "\n".join(parts)
