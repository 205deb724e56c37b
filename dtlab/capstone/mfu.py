"""Model FLOPs utilisation, as PaLM defines it: the FLOPs the model needs per token, times the
tokens per second each GPU processed, over **the hardware's peak** (Chowdhery et al. 2022, app. B).

The peak is the datasheet's dense bf16 Tensor Core rate of the GPU the job ran on
(:data:`DENSE_BF16`, each with its source; NVIDIA's datasheets print the 2:4-sparsity figure,
twice the dense one). A GPU not in the table has no MFU ("unknown GPU"), rather than a guess.

A second, separately named figure divides by the rate of a large bf16 matmul timed on the same
GPU in the same job (``of_matmul``): how close the step comes to what this GPU's matmuls reach
in practice (on H200, 767-808 TF/s in the recorded runs, about 80 % of the datasheet), which is not MFU.

FLOPs counted (:func:`dtlab.capstone.model.flops_per_token`): the matmuls, forward and backward,
``6 x (parameters - the input embedding table)`` -- a lookup is no matmul; the output head is one
and counts -- plus attention's scores and weighted sum, ``12 L d s``. Not counted: norms, softmax,
activations, the optimizer, communication. So MFU is a lower bound on how busy the Tensor Cores were.

>>> from dtlab.capstone.mfu import datasheet_peak
>>> datasheet_peak("NVIDIA H200")[0] / 1e12
989.4
>>> datasheet_peak("NVIDIA GeForce RTX 4090") is None
True
"""

from __future__ import annotations

_H100_SXM = "NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity (SXM)"
_H100_PCIE = "NVIDIA H100 Tensor Core GPU datasheet: BF16 1,513 TFLOPS with sparsity (PCIe)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity (SXM)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense (624 with sparsity)"

# (what the device name contains, what it must not contain, dense bf16 FLOP/s, source);
# the first match wins. torch.cuda.get_device_name / NVML print e.g. "NVIDIA H100 80GB HBM3"
# (SXM5), "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-80GB".
DENSE_BF16: list[tuple[str, tuple[str, ...], float, str]] = [
    ("H100 PCIe", (), 756.5e12, _H100_PCIE),
    ("H100", ("NVL", "PCIe"), 989.4e12, _H100_SXM),
    ("H200", ("NVL",), 989.4e12, _H200),
    ("A100", (), 312e12, _A100),
]


def datasheet_peak(name: str | None) -> tuple[float, str] | None:
    """(dense bf16 FLOP/s, its source) for a GPU by its device name; None when not in the table."""
    if not name:
        return None
    for has, lacks, flops, source in DENSE_BF16:
        if has in name and not any(x in name for x in lacks):
            return flops, source
    return None


def mfu(flops_per_token: float, tokens_per_s: float, gpu_name: str | None) -> float | None:
    """PaLM's MFU for one GPU: ``flops_per_token x tokens_per_s / datasheet peak``; None for a
    GPU without a datasheet figure here (or no GPU)."""
    peak = datasheet_peak(gpu_name)
    return flops_per_token * tokens_per_s / peak[0] if peak else None


def percent(fraction: float | None) -> str:
    """A fraction as the tables print it (``36.2%``), ``-`` when there is none."""
    return f"{100 * fraction:.1f}%" if fraction is not None else "-"


def of_matmul(flops_per_token: float, tokens_per_s: float, matmul_flops: float | None
              ) -> float | None:
    """The same FLOPs over the bf16 matmul rate measured on that GPU in the same job (not MFU)."""
    return flops_per_token * tokens_per_s / matmul_flops if matmul_flops else None
