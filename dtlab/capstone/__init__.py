"""Section 08, the capstone: a small Llama trained with FSDP2, measured (first slice).

    dtlab capstone train [--size tiny|small|1b] [--steps N] [--nprocs N] [--backend B] [--json]

* :mod:`.model`  the Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA) and its sizes
* :mod:`.data`   byte-level tokens of the Python standard library's sources; per-rank batches
* :mod:`.train`  FSDP2 training on ``dtlab.run`` ranks: loss, step time, tokens/s, memory, MFU

The names below are imported on first use: ``dtlab capstone --help`` (and every other command,
whose parser lists the capstone's) need not import torch. ``train`` is the function wherever
the submodule of that name was first imported from (importing a submodule binds its name on
the package; here that binding is refused).
"""

import importlib
import sys
import types

_FROM = {"CONFIGS": "model", "Config": "model", "Llama": "model", "flops_per_token": "model",
         "n_params": "model", "train": "train", "format_summary": "train"}

__all__ = ["CONFIGS", "Config", "Llama", "n_params", "flops_per_token", "train",
           "format_summary"]


def __getattr__(name: str):
    if name in _FROM:
        value = getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _FROM and isinstance(value, types.ModuleType):
            return  # the import system binding the submodule `train`: the name is the function's
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
