"""Watching a run while it goes: every GPU's utilisation and memory, polled about once a second,
and a step bar, in one display updated in place (a notebook cell or a terminal).

* :mod:`.gpu`  :class:`GpuPanel` (NVML through ``pynvml``, else ``nvidia-smi``; off, in one
  line, without either), :class:`StepProgress` (rank 0's steps from a JSON-lines file),
  :func:`format_summary` (mean/max utilisation and peak memory per GPU, as a table)

It uses the runtime (:mod:`dtlab.runtime.output`) and nothing of the sections; the capstone's
``train()`` (:mod:`dtlab.capstone.train`) wraps its launch in a :class:`GpuPanel`.
"""

from .gpu import (GpuPanel, NvmlReader, SmiReader, StepProgress, find_reader, format_summary,
                  parse_smi)

__all__ = ["GpuPanel", "StepProgress", "format_summary", "find_reader", "SmiReader",
           "NvmlReader", "parse_smi"]
