"""A small Llama-style decoder, readable top to bottom, in the sizes the capstone trains.

Contract: ``Llama(CONFIGS[size])`` maps token ids ``(batch, seq)`` to logits ``(batch, seq,
vocab)``; :func:`n_params` gives its parameter count from the config alone (equal to
``sum(p.numel() for p in Llama(cfg).parameters())``), :func:`flops_per_token` the training FLOPs
per token that MFU divides by. Try it::

    python -c "from dtlab.capstone.model import *; print(n_params(CONFIGS['1b']))"   # 852,559,872

The pieces, each as its paper defines it:

* RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"): scale by the inverse
  root-mean-square, no mean subtraction, no bias.
* Rotary position embeddings, RoPE (Su et al. 2021, "RoFormer"): rotate each (even, odd) pair of
  query/key channels by an angle proportional to the position, so ``q . k`` depends only on the
  distance between the two tokens. Here the pairs are the two halves of a head (the layout
  Llama's checkpoints use), which is the same rotation with the channels permuted.
* SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer"):
  ``down(silu(gate(x)) * up(x))``.
* Grouped-query attention, GQA (Ainslie et al. 2023): ``n_kv_heads`` key/value heads, each shared
  by ``n_heads / n_kv_heads`` query heads; ``scaled_dot_product_attention(enable_gqa=True)``
  does the sharing without copying keys and values.
* Untied embeddings: the output head is its own matrix, not the input embedding transposed.

No biases anywhere, pre-norm residual blocks, as in Llama (Touvron et al. 2023).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Config:
    vocab: int        # token ids 0..vocab-1 (256 = bytes)
    dim: int          # hidden size d
    layers: int       # L decoder blocks
    heads: int        # query heads; head_dim = dim // heads
    kv_heads: int     # key/value heads (GQA); heads % kv_heads == 0
    ffn: int          # SwiGLU intermediate size
    seq: int          # training sequence length s
    batch: int        # sequences per rank per step
    lr: float         # AdamW peak learning rate
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def to_json(self) -> dict:
        return asdict(self)


CONFIGS = {
    # CPU, two ranks, a second or so per 30 steps: the test suite's model
    "tiny": Config(vocab=256, dim=64, layers=2, heads=4, kv_heads=2, ffn=176, seq=64, batch=8,
                   lr=1e-2),
    # a few million parameters: a minute on CPU, instant on a GPU
    "small": Config(vocab=256, dim=256, layers=4, heads=8, kv_heads=4, ffn=704, seq=256, batch=8,
                    lr=3e-3),
    # issue 15's benchmark shape: ~0.85B, 8 x 2048 tokens per GPU (bytes use ids < 256 of 32000)
    "1b": Config(vocab=32000, dim=2048, layers=16, heads=32, kv_heads=8, ffn=5632, seq=2048,
                 batch=8, lr=3e-4),
}


def check_config(cfg: Config) -> None:
    if cfg.dim % cfg.heads or cfg.heads % cfg.kv_heads or cfg.head_dim % 2:
        raise ValueError(f"dim={cfg.dim}, heads={cfg.heads}, kv_heads={cfg.kv_heads}: need dim "
                         "divisible by heads, heads by kv_heads, and an even head_dim.")


class RMSNorm(nn.Module):
    """x / rms(x) * g, per token (Zhang & Sennrich 2019), computed in float32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(cfg: Config, seq: int, device, dtype):
    """cos and sin, ``(seq, head_dim)``: angle ``pos * theta^(-2i/head_dim)`` (Su et al. 2021),
    each frequency repeated for both halves of the head."""
    inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim, 2, device=device,
                                                dtype=torch.float32) / cfg.head_dim)
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotate channel i with channel i + head_dim/2 by the position's angle; x: (b, h, s, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal grouped-query self-attention (Ainslie et al. 2023) with RoPE on q and k."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.heads, self.kv_heads, self.hd = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q = nn.Linear(cfg.dim, cfg.heads * self.hd, bias=False)
        self.k = nn.Linear(cfg.dim, cfg.kv_heads * self.hd, bias=False)
        self.v = nn.Linear(cfg.dim, cfg.kv_heads * self.hd, bias=False)
        self.o = nn.Linear(cfg.heads * self.hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.hd).transpose(1, 2)      # (b, h, s, hd)
        k = self.k(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)   # (b, kv, s, hd)
        v = self.v(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        return self.o(y.transpose(1, 2).reshape(b, s, self.heads * self.hd))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020)."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.gate = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x)). FSDP2 shards one of
    these per unit (dtlab.capstone.train)."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(cfg.dim, cfg.eps), RMSNorm(cfg.dim, cfg.eps)
        self.attn, self.mlp = Attention(cfg), SwiGLU(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """Embedding -> L blocks -> RMSNorm -> untied output head."""

    def __init__(self, cfg: Config):
        super().__init__()
        check_config(cfg)
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, 0.02) weights, as Llama's; the projections that write into the residual
        stream (attention out, MLP down) scaled by 1/sqrt(2L), as GPT-2's, so the stream's
        variance does not grow with depth. Norm gains start at 1."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                scale = 1 / math.sqrt(2 * self.cfg.layers) if name.endswith(("o.weight",
                                                                             "down.weight")) else 1
                p.normal_(0.0, std * scale)

    def forward(self, tokens):
        x = self.embed(tokens)
        # one table per forward, shared by every block; in the activations' dtype (bf16 under
        # FSDP2's mixed precision, where the embedding's output is already bf16)
        cos, sin = rope_tables(self.cfg, tokens.shape[1], tokens.device, x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def n_params(cfg: Config) -> int:
    """Parameters of ``Llama(cfg)``, counted from the shapes (no biases)."""
    q_out, kv_out = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    attn = cfg.dim * q_out + 2 * cfg.dim * kv_out + q_out * cfg.dim
    mlp = 3 * cfg.dim * cfg.ffn
    block = attn + mlp + 2 * cfg.dim                  # + two RMSNorm gains
    return 2 * cfg.vocab * cfg.dim + cfg.layers * block + cfg.dim   # untied embed + head, norm


def matmul_params(cfg: Config) -> int:
    """The parameters that take part in a matmul: all but the input embedding table (a lookup;
    Kaplan et al. 2020 count N without embeddings). The untied output head is a matmul: counted."""
    return n_params(cfg) - cfg.vocab * cfg.dim


def flops_per_token(cfg: Config, seq: int | None = None) -> float:
    """Training FLOPs per token, forward + backward: ``6N + 12 L d s`` with N
    :func:`matmul_params` (2 FLOPs per weight per token forward, 4 backward; Kaplan et al. 2020),
    plus attention's scores and weighted sum (PaLM's MFU, Chowdhery et al. 2022, app. B).
    Norms, softmax, activations and the optimizer are not counted."""
    s = cfg.seq if seq is None else seq
    return 6 * matmul_params(cfg) + 12 * cfg.layers * cfg.dim * s
