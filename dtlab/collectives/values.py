"""Rank side: the inputs a check gives each rank, and the judge of what came back.

Known values make every misrouting visible: rank r's element i is ``salt + r*K + i``, with K the
power of ten above the size (size 67 -> K = 100: rank 2's element 5 is 205 + salt). The salt
``(call % 16) * K * n`` changes every call, so a rank that answers with the previous call's
result is caught; values stay small enough to be exact in float32 (below 2**24 for sizes under
10**4 on up to 8 ranks) and decodable: a wrong element of a copy names where it came from.
PRODUCT gets 1, 2 or 3 instead (a product of n such values stays exact).

Random values (the only check for float16/bfloat16) come from a generator seeded by
(seed, call, rank), so every rank can rebuild every other rank's input and compute the float64
reference itself, without trusting any collective to deliver it.

>>> ctx = Ctx(rank=0, n=2)
>>> ctx.seq = 1
>>> ctx.known(1, 3, "int64").tolist()          # salt 1*10*2 = 20, + rank 1 * K 10 + index
[30, 31, 32]
>>> ctx.judge([(None, torch.tensor([30, 20, 32]), torch.tensor([30, 31, 32]), 0, 10)])
('fail', "rank 0, index 1: expected 31, got 20 (= rank 0's element 0) (1 of 3 elements wrong)")
"""

from __future__ import annotations

import re

import torch

from .numerics import sum_error_bound

SENTINEL = -7  # every output buffer starts here: an element nobody wrote shows up as -7

# how torch and its backends say "I cannot do that" (gloo, nccl, torch's own argument checks):
# such a call is *unsupported*, neither passed nor failed. NCCL refuses a non-contiguous tensor
# ("ValueError: Tensors must be contiguous", torch 2.11 on 2x H200) where gloo may take it.
UNSUPPORTED = re.compile(r"support|not implemented|unimplemented|Cannot use ReduceOp|"
                         r"invalid .*(dtype|type)|invalid tensor size|no kernel|"
                         r"must be contiguous", re.I)


def block(size: int) -> int:
    """K: the power of ten above the largest index (size 7 -> 10, 67 -> 100, 1 -> 10)."""
    return 10 ** len(str(max(size - 1, 0)))


class Ctx:
    """What a rank knows while it runs checks: who it is, where its tensors live, which
    implementation it judges (``impl``: torch function name -> replacement), and the call
    counter every rank advances in step."""

    def __init__(self, rank: int, n: int, device: str = "cpu", impl: dict | None = None,
                 seed: int = 0):
        self.rank, self.n, self.device, self.impl, self.seed = rank, n, device, impl, seed
        self.seq = 0

    # --- inputs --------------------------------------------------------------------------------
    def known(self, r: int, size: int, dtype: str, kind: str = "sum") -> torch.Tensor:
        """Rank r's known input for this call (CPU)."""
        i = torch.arange(size, dtype=torch.int64)
        if kind == "product":
            v = 1 + (r + i + self.seq) % 3
        else:
            k = block(size)
            v = (self.seq % 16) * k * self.n + r * k + i
        return v.to(getattr(torch, dtype))

    def random(self, r: int, size: int, dtype: str) -> torch.Tensor:
        """Rank r's random input for this call (CPU), rounded to ``dtype``."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.seq * 1009 + r)
        return torch.randn(size, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))

    def empty(self, size: int, dtype: str) -> torch.Tensor:
        return torch.full((size,), SENTINEL, dtype=getattr(torch, dtype), device=self.device)

    def dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.clone().to(self.device)

    def call(self, name: str, *args, **kwargs):
        """torch.distributed.<name>, or the implementation being judged in its place."""
        import torch.distributed as dist

        fn = (self.impl or {}).get(name) or getattr(dist, name)
        return fn(*args, **kwargs)

    # --- the judge -------------------------------------------------------------------------------
    def judge(self, comparisons) -> tuple[str, str]:
        """``comparisons``: (label, got, expected, tol, decode) each; ``got``/``expected`` a
        tensor or a list of tensors (a list names positions as ``[j][i]``), ``tol`` 0 (exact) or
        the largest error allowed per element, ``decode`` the K of known values (names where a
        wrong element came from) or None.
        Returns ("pass", "") or ("fail", "rank R, index I: expected E, got G ...")."""
        wrong = [v for c in comparisons if (v := self._compare(*c))]
        return ("fail", "; ".join(wrong)) if wrong else ("pass", "")

    def _compare(self, label, got, exp, tol, decode) -> str:
        lens = [t.numel() for t in got] if isinstance(got, (list, tuple)) else None
        g = torch.cat([t.detach().reshape(-1).cpu() for t in got]) if lens is not None \
            else got.detach().reshape(-1).cpu()
        e = torch.cat([t.reshape(-1) for t in exp]) if isinstance(exp, (list, tuple)) \
            else exp.reshape(-1)
        where = f" {label}" if label else ""
        if g.numel() != e.numel():
            return f"rank {self.rank}{where}: expected {e.numel()} elements, got {g.numel()}"
        if g.is_floating_point() or e.is_floating_point():
            diff = (g.double() - e.double()).abs()
            wrong = ~(diff <= torch.as_tensor(tol, dtype=torch.float64))  # NaN counts as wrong
        else:
            wrong = g != e
        if not wrong.any():
            return ""
        k = int(wrong.nonzero()[0])
        pos = f"index {k}"
        if lens is not None:
            j = 0
            while k >= lens[j]:
                k, j = k - lens[j], j + 1
            pos = f"index [{j}][{k}]"
            k = sum(lens[:j]) + k
        text = (f"rank {self.rank}{where}, {pos}: expected {_num(e[k])}, got {_num(g[k])}"
                f"{self._origin(g[k], decode) if decode else ''} "
                f"({int(wrong.sum())} of {e.numel()} elements wrong)")
        if not isinstance(tol, (int, float)) or tol:
            t = torch.as_tensor(tol, dtype=torch.float64).reshape(-1)
            text += f"; allowed error {float(t[k] if t.numel() > 1 else t[0]):.3g}"
        return text

    def _origin(self, v, k: int) -> str:
        """Where a wrong known value came from: ' (= rank 1's element 3 of an earlier call)'."""
        v = float(v)
        if v == SENTINEL:
            return " (never written)"
        if v != int(v) or v < 0:
            return ""
        salt, rest = divmod(int(v), k * self.n)
        if salt >= 16:
            return ""
        r, i = divmod(rest, k)
        earlier = " of an earlier call" if salt != self.seq % 16 else ""
        return f" (= rank {r}'s element {i}{earlier})"


def _num(x) -> str:
    x = x.item()
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def sum_tol(xs: list[torch.Tensor], dtype: str, n: int) -> torch.Tensor:
    """Per-element error bound of summing the n ranks' inputs ``xs`` in ``dtype``."""
    return sum_error_bound(dtype, n, torch.stack([x.double().abs() for x in xs]).sum(0))
