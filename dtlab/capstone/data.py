"""Real text that ships offline, as byte-level tokens, and a deterministic per-rank batch stream.

Contract: :func:`corpus` returns a 1-D ``uint8`` tensor of the **Python standard library's own
source files** -- the top-level ``*.py`` files of ``sysconfig.get_paths()["stdlib"]`` (the
interpreter's ``lib/pythonX.Y``, outside any virtual environment), in sorted file-name order,
concatenated up to ``max_bytes``. Every Python installation has them, so nothing is downloaded;
the bytes differ between Python versions (say which one a recorded loss curve came from).
Tokens are the bytes themselves (ids 0..255; Radford et al. 2019 train on bytes too, after BPE).

:func:`batches` yields, for step 0, 1, 2, ..., this rank's ``(inputs, targets)``, each
``(batch, seq)`` int64, targets shifted by one token. Step ``k`` of the global batch is the same
on every machine for a given corpus and seed; rank ``r`` of ``world`` takes rows
``r*batch .. (r+1)*batch-1`` of it, so ranks never see the same window in a step and the global
batch does not depend on how it is split. Try::

    python -c "from dtlab.capstone.data import *; x, y = next(batches(corpus(), 2, 32)); print(bytes(x[0].tolist()))"

:func:`random_batches` is the benchmark's stream: uniform random ids (issue 15: "random tokens
for the benchmark"), same seeding rule.
"""

from __future__ import annotations

import os
import sysconfig
from typing import Iterator

import torch

MAX_BYTES = 4 << 20


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def sources(max_bytes: int = MAX_BYTES) -> list[str]:
    """The files :func:`corpus` reads, in order (the last one may be cut)."""
    root, out, total = stdlib_dir(), [], 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.endswith(".py") and os.path.isfile(path):
            out.append(path)
            total += os.path.getsize(path)
            if total >= max_bytes:
                break
    return out


def corpus(max_bytes: int = MAX_BYTES) -> torch.Tensor:
    """The standard library's top-level sources as bytes (a ``uint8`` tensor, at most
    ``max_bytes`` long). Raises ValueError if fewer than 64 KiB are found."""
    chunks, total = [], 0
    for path in sources(max_bytes):
        with open(path, "rb") as f:
            data = f.read(max_bytes - total)
        chunks.append(data)
        total += len(data)
    text = b"".join(chunks)
    if len(text) < 1 << 16:
        raise ValueError(f"only {len(text)} bytes of Python sources under {stdlib_dir()}; "
                         "is the standard library installed without its .py files?")
    return torch.frombuffer(bytearray(text), dtype=torch.uint8)


def _step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def batches(data: torch.Tensor, batch: int, seq: int, rank: int = 0, world: int = 1,
            seed: int = 0, device="cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's windows of ``data``, step after step, forever (see the module docstring)."""
    if batch < 1 or seq < 1 or not 0 <= rank < world:
        raise ValueError(f"batch={batch}, seq={seq}, rank={rank}, world={world}: need "
                         "batch, seq >= 1 and 0 <= rank < world.")
    if data.numel() < seq + 2:
        raise ValueError(f"the corpus has {data.numel()} tokens, fewer than seq + 2 = {seq + 2}.")
    offsets = torch.arange(seq + 1)
    step = 0
    while True:
        starts = torch.randint(data.numel() - seq - 1, (world * batch,),
                               generator=_step_generator(seed, step))
        mine = starts[rank * batch:(rank + 1) * batch]
        windows = data[mine[:, None] + offsets].long()          # (batch, seq + 1)
        yield windows[:, :-1].to(device), windows[:, 1:].to(device)
        step += 1


def random_batches(vocab: int, batch: int, seq: int, rank: int = 0, world: int = 1,
                   seed: int = 0, device="cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Uniform random token ids in ``[0, vocab)``, split across ranks like :func:`batches`."""
    step = 0
    while True:
        tokens = torch.randint(vocab, (world * batch, seq + 1),
                               generator=_step_generator(seed, step))
        mine = tokens[rank * batch:(rank + 1) * batch]
        yield mine[:, :-1].to(device), mine[:, 1:].to(device)
        step += 1
