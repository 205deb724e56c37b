"""Section 08, the capstone: a small Llama trained with FSDP2, measured (first slice).

    dtlab capstone train [--size tiny|small|1b] [--steps N] [--nprocs N] [--backend B] [--json]

* :mod:`.model`  the Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA) and its sizes
* :mod:`.data`   byte-level tokens of the Python standard library's sources; per-rank batches
* :mod:`.train`  FSDP2 training on ``dtlab.run`` ranks: loss, step time, tokens/s, memory, MFU
"""

from .model import CONFIGS, Config, Llama, flops_per_token, n_params
from .train import format_summary, train

__all__ = ["CONFIGS", "Config", "Llama", "n_params", "flops_per_token", "train",
           "format_summary"]
