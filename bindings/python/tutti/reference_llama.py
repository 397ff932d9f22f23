# SPDX-License-Identifier: Apache-2.0
"""A Llama-style decoder in plain torch (RMSNorm, rotary positions, grouped-query attention,
SwiGLU), with random weights from a seed, that keeps its KV in a tutti.layerwise.PagedKv.

It is the model of tutti's layer-wise tests where no model library is installed (CI runs
Debian's torch on the CPU). prefill() computes the tokens after a cached prefix: per layer it
writes the new tokens' K and V into the blocks, calls before_attention(layer) (tutti's wait for
that layer's prefix), then attends over prefix + new tokens, causal and bottom-right aligned.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .layerwise import PagedKv


@dataclass
class LlamaShape:
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 512
    vocab: int = 1024
    rope_theta: float = 500000.0
    eps: float = 1e-5


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x: [tokens, heads, head_dim]; rotates pairs (i, i + head_dim/2) by pos * theta^(-2i/d)."""
    half = x.shape[-1] // 2
    freq = theta ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    ang = pos.to(torch.float32)[:, None] * freq[None, :]
    cos, sin = ang.cos()[:, None, :].to(x.dtype), ang.sin()[:, None, :].to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class ReferenceLlama:
    def __init__(self, shape: LlamaShape, seed: int = 0, dtype=torch.float32, device="cpu"):
        self.s = shape
        g = torch.Generator().manual_seed(seed)

        def w(*dims, scale=None):
            t = torch.randn(*dims, generator=g) * (scale if scale is not None else dims[-1] ** -0.5)
            return t.to(dtype=dtype, device=device)

        s = shape
        self.embed = w(s.vocab, s.hidden, scale=1.0)
        self.blocks = []
        for _ in range(s.layers):
            self.blocks.append(dict(
                attn_norm=torch.ones(s.hidden, dtype=dtype, device=device),
                wq=w(s.heads * s.head_dim, s.hidden), wk=w(s.kv_heads * s.head_dim, s.hidden),
                wv=w(s.kv_heads * s.head_dim, s.hidden), wo=w(s.hidden, s.heads * s.head_dim),
                mlp_norm=torch.ones(s.hidden, dtype=dtype, device=device),
                w_gate=w(s.intermediate, s.hidden), w_up=w(s.intermediate, s.hidden),
                w_down=w(s.hidden, s.intermediate)))
        self.norm = torch.ones(s.hidden, dtype=dtype, device=device)
        self.lm_head = w(s.vocab, s.hidden)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, kv: PagedKv, table: torch.Tensor, prefix: int = 0,
                before_attention: Optional[Callable[[int], None]] = None) -> torch.Tensor:
        """Logits of tokens[prefix:], with positions 0..prefix-1 already in `kv` (or arriving
        there by the time before_attention(layer) returns)."""
        s = self.s
        n = tokens.shape[0]
        pos = torch.arange(prefix, n, device=self.embed.device)
        x = self.embed[tokens[prefix:].long().to(self.embed.device)]
        q_len = n - prefix
        # Query i (position prefix+i) sees keys 0..prefix+i: causal, aligned to the bottom right.
        mask = torch.ones(q_len, n, dtype=torch.bool, device=x.device).tril(diagonal=prefix)
        for layer, b in enumerate(self.blocks):
            h = _rms_norm(x, b["attn_norm"], s.eps)
            q = _rope((h @ b["wq"].T).view(q_len, s.heads, s.head_dim), pos, s.rope_theta)
            k = _rope((h @ b["wk"].T).view(q_len, s.kv_heads, s.head_dim), pos, s.rope_theta)
            v = (h @ b["wv"].T).view(q_len, s.kv_heads, s.head_dim)
            kv.write(layer, table, prefix, k, v)
            if before_attention is not None:
                before_attention(layer)
            keys, values = kv.read(layer, table, n)  # [n, kv_heads, head_dim]
            rep = s.heads // s.kv_heads
            keys = keys.to(q.dtype).repeat_interleave(rep, dim=1).transpose(0, 1)     # [heads, n, d]
            values = values.to(q.dtype).repeat_interleave(rep, dim=1).transpose(0, 1)
            att = (q.transpose(0, 1) @ keys.transpose(1, 2)) * s.head_dim ** -0.5    # [heads, q, n]
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            o = (att @ values).transpose(0, 1).reshape(q_len, s.heads * s.head_dim)
            x = x + o @ b["wo"].T
            h = _rms_norm(x, b["mlp_norm"], s.eps)
            x = x + (torch.nn.functional.silu(h @ b["w_gate"].T) * (h @ b["w_up"].T)) @ b["w_down"].T
        return _rms_norm(x, self.norm, s.eps) @ self.lm_head.T
