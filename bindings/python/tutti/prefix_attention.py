# SPDX-License-Identifier: Apache-2.0
"""Attention of new tokens over a cached prefix plus themselves, on the GPU's fastest kernels.

The queries are the last q of k positions: query i sees keys 0 .. k - q + i (causal, aligned to
the bottom right). Several ways to run that exist in PyTorch and they do not cost the same: the
square causal case (q == k, a full recompute) may take a different backend (cuDNN on Hopper)
than any call with k > q. Each method here computes the same thing:

  flash        FlashAttention-2 with its causal flag (bottom-right aligned when k > q)
  split-cudnn  the new tokens' causal square and their non-causal rectangle over the prefix,
  split-flash  each a plain call, merged by their log-sum-exps
  bias         sdpa with PyTorch's causal_lower_right bias
cuDNN's own causal flag is no option: it aligns the mask to the top left when k > q (on the
H200 with torch 2.11 its output failed the check), so cuDNN runs only the two plain parts.

`python -m tutti.bench.attention` times them on this GPU and checks each against float32.
"""
from typing import Optional

import torch

METHODS = ("flash", "split-cudnn", "split-flash", "bias")

_flash_gqa = True  # until the flash kernel refuses fewer KV heads than query heads


def _grouped(query, key, value):
    groups = query.shape[1] // key.shape[1]
    return key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)


def _flash(query, key, value, causal: bool, scale):
    """FlashAttention-2 with its log-sum-exp ([b, h, q], float32)."""
    global _flash_gqa
    op = torch.ops.aten._scaled_dot_product_flash_attention
    if _flash_gqa or query.shape[1] == key.shape[1]:
        try:
            out = op(query, key, value, 0.0, causal, False, scale=scale)
            return out[0], out[1]
        except RuntimeError:
            if query.shape[1] == key.shape[1]:
                raise
            _flash_gqa = False
    key, value = _grouped(query, key, value)
    out = op(query, key, value, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def _cudnn(query, key, value, causal: bool, scale):
    """cuDNN's fused attention with its log-sum-exp ([b, h, q], float32)."""
    if key.shape[1] != query.shape[1]:
        key, value = _grouped(query, key, value)
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(query, key, value, None, True, 0.0, causal, False,
                                                             scale=scale)
    return out[0], out[1].reshape(query.shape[:3]).float()


def _split(kernel, query, key, value, scale):
    p = key.shape[2] - query.shape[2]
    own, own_lse = kernel(query, key[:, :, p:], value[:, :, p:], True, scale)
    pre, pre_lse = kernel(query, key[:, :, :p], value[:, :, :p], False, scale)
    # (own e^own_lse + pre e^pre_lse) / (e^own_lse + e^pre_lse), without overflow.
    w = torch.sigmoid((own_lse - pre_lse).float()).unsqueeze(-1)
    return torch.lerp(pre.float(), own.float(), w).to(query.dtype)


def bottom_right(query, key, value, scale: Optional[float] = None, method: str = "flash"):
    """query [b, heads, q, d] over key/value [b, kv_heads, k, d], k > q; returns [b, heads, q, d]."""
    if method == "flash":
        return _flash(query, key, value, True, scale)[0]
    if method == "split-cudnn":
        return _split(_cudnn, query, key, value, scale)
    if method == "split-flash":
        return _split(_flash, query, key, value, scale)
    if method == "bias":
        from torch.nn.attention.bias import causal_lower_right  # torch >= 2.2
        from torch.nn.functional import scaled_dot_product_attention as sdpa
        gqa = query.shape[1] != key.shape[1]
        return sdpa(query, key, value, attn_mask=causal_lower_right(query.shape[2], key.shape[2]), scale=scale,
                    enable_gqa=gqa)
    raise ValueError(f"attention method {method!r}: one of {', '.join(METHODS)}")


def reference_rows(query, key, value, rows, scale: Optional[float] = None):
    """The exact result for some query rows, in float32 (checks)."""
    q_len, k_len = query.shape[2], key.shape[2]
    groups = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(groups, dim=1)
    v = value.float().repeat_interleave(groups, dim=1)
    q = query[:, :, rows].float()
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else query.shape[-1] ** -0.5)
    visible = torch.arange(k_len, device=query.device)[None, :] <= (k_len - q_len + rows)[:, None]
    s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v
