# SPDX-License-Identifier: Apache-2.0
"""vLLM's paged KV cache tensors, seen as tutti's per-layer K and V views.

vLLM hands register_kv_caches one tensor per attention layer, named after the module
("model.layers.17.self_attn.attn"). Its layout changed between releases; all of them map to
per-layer K and V views of shape [blocks, block_tokens, kv_heads, head_dim]:

    [2, blocks, block_tokens, kv_heads, head_dim]   K = t[0], V = t[1]  (NHD; HND is the same
                                                    logical shape with permuted strides)
    [blocks, 2, block_tokens, kv_heads, head_dim]   K = t[:, 0], V = t[:, 1]
    [blocks, kv_heads, block_tokens, 2 * head_dim]  K = first half of the last dim, V = second
                                                    (the standardized layout; a layer's tensor
                                                    may be a strided view of a shared buffer)

    [blocks, block_tokens, latent]                  MLA: one latent vector per token, K only
                                                    (a [blocks, block_tokens, 1, latent] view,
                                                    V None)
"""
import re
from typing import Any, Dict, List, Optional, Tuple

_LAYER_INDEX = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def layer_index(name: str) -> int:
    """The layer number in an attention module's name: exactly one dotted integer part."""
    found = _LAYER_INDEX.findall(name)
    if len(found) != 1:
        raise ValueError(f"cannot tell the layer of KV cache {name!r}: expected exactly one numeric part")
    return int(found[0])


def split_kv(t: Any, head_dim: Optional[int] = None, num_blocks: Optional[int] = None) -> Tuple[Any, Any]:
    """K and V views [blocks, block_tokens, kv_heads, head_dim] of one layer's cache tensor (V
    None for MLA). `head_dim` and `num_blocks` (from vLLM's config, when known) settle shapes
    that would otherwise be ambiguous."""
    shape = tuple(t.shape)
    if t.dim() == 5:
        fused_first = shape[0] == 2 and (num_blocks is None or shape[1] == num_blocks)
        fused_second = shape[1] == 2 and (num_blocks is None or shape[0] == num_blocks)
        if fused_first:  # [2, blocks, tokens, heads, dim]
            return t[0], t[1]
        if fused_second:  # [blocks, 2, tokens, heads, dim]
            return t[:, 0], t[:, 1]
    elif t.dim() == 4:  # [blocks, heads, tokens, 2 * dim]
        c = shape[3]
        d = head_dim if head_dim is not None else c // 2
        if c == 2 * d and (num_blocks is None or shape[0] == num_blocks):
            k, v = t[..., :d], t[..., d:]
            return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    elif t.dim() == 3 and (num_blocks is None or shape[0] == num_blocks):  # MLA
        return t.unsqueeze(2), None
    raise ValueError(f"unrecognized vLLM KV cache shape {list(shape)} (head_dim {head_dim}, blocks {num_blocks}): "
                     "expected [2, blocks, block_size, heads, head_dim], [blocks, 2, block_size, heads, head_dim] "
                     "or [blocks, heads, block_size, 2 * head_dim]")


def kv_views(kv_caches: Dict[str, Any], head_dim: Optional[int] = None,
             num_blocks: Optional[int] = None) -> Tuple[List[str], List[Any], List[Any]]:
    """Layer names in layer order, and their K and V views (V None: MLA caches, K only).
    tutti's layer i is the i-th layer here (a pipeline stage's layers 16..31 are its layers
    0..15)."""
    indexed = []
    for name, t in kv_caches.items():
        if isinstance(t, (list, tuple)):  # older vLLM: one tensor per virtual engine
            t = t[0]
        indexed.append((layer_index(name), name, t))
    indexed.sort(key=lambda x: x[0])
    for (a, na, _), (b, nb, _) in zip(indexed, indexed[1:]):
        if a == b:
            raise ValueError(f"KV caches {na!r} and {nb!r} are both layer {a}; one attention module per layer "
                             "is supported")
    names, ks, vs = [], [], []
    for _, name, t in indexed:
        k, v = split_kv(t, head_dim, num_blocks)
        if v is None and vs or v is not None and len(vs) != len(ks):
            raise ValueError(f"KV cache {name!r} is {'MLA' if v is None else 'K and V'}, another layer is not")
        names.append(name)
        ks.append(k)
        if v is not None:
            vs.append(v)
    return names, ks, (vs or None)
