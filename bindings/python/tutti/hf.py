# SPDX-License-Identifier: Apache-2.0
"""tutti in Hugging Face transformers (5.x): a Cache whose layer l takes its prefix KV from the
paged blocks tutti loads into, right after waiting for that layer, and an attention function
that attends over a cached prefix with a fused kernel.

    from tutti import hf
    model = hf.build("llama3-8b")                         # random weights, bf16, on the GPU
    kv = PagedKv(...)                                     # registered with a tutti Runtime
    with PrefixLoad(rt, tokens, table, stream=torch.cuda.current_stream()) as load:
        cache = hf.PagedCache(model.config, kv, table, prefix=load.tokens, wait=load.wait)
        logits = hf.prefill(model, tokens, cache)         # last token's logits
    store(rt, tokens, table, begin=load.tokens)           # the blocks now hold every token's KV

Transformers' stock attention builds a full mask once a prefix is cached (and its sdpa path
assumes the keys start where the queries do); `attention` here runs fused kernels instead
(tutti.prefix_attention; `METHOD` picks how, `python -m tutti.bench.attention` compares them).
"""
import os
from typing import Callable, List, Optional

import torch
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention as sdpa
from transformers import AttentionInterface, DynamicCache, LlamaConfig, LlamaForCausalLM

from . import prefix_attention
from .layerwise import PagedKv
from .model_shapes import MODEL_SHAPES

ATTENTION = "tutti"
# Over a cached prefix: the new tokens' causal square on cuDNN (the kernel a full recompute
# gets on Hopper) merged with their rectangle over the prefix. FlashAttention-2's bottom-right
# causal call ran at 345 TFLOP/s on the H200 against cuDNN's 520-590, which made a suffix over
# a short prefix slower than recomputing the whole prompt (docs/ttft.md).
METHOD = os.environ.get("TUTTI_PREFIX_ATTENTION", "split-cudnn")
_fallback = False  # set once cuDNN refuses: FlashAttention from then on


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: Optional[float] = None,
              **kwargs):
    """query [b, heads, q, d] over key/value [b, kv_heads, k, d] with k >= q: query i sees keys
    up to k - q + i (causal, aligned to the bottom right). Returns [b, q, heads, d]."""
    global _fallback
    q_len, k_len = query.shape[2], key.shape[2]
    if attention_mask is not None:
        raise ValueError("tutti's attention takes no mask: the prompt is one causal sequence")
    gqa = query.shape[1] != key.shape[1]
    if q_len == k_len:
        out = sdpa(query, key, value, is_causal=True, scale=scaling, enable_gqa=gqa)
    elif query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        method = "flash" if _fallback and METHOD.endswith("cudnn") else METHOD
        try:
            out = prefix_attention.bottom_right(query, key, value, scaling, method=method)
        except RuntimeError:
            if method == "flash":
                raise
            _fallback = True
            out = prefix_attention.bottom_right(query, key, value, scaling, method="flash")
    else:
        out = sdpa(query, key, value, attn_mask=causal_lower_right(q_len, k_len), scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, attention)


def build(shape: str, seed: int = 0, device: str = "cuda", dtype=torch.bfloat16, max_tokens: int = 131072):
    """A Llama-style model of a named shape (tutti.model_shapes) with random weights from `seed`."""
    cfg = LlamaConfig(**MODEL_SHAPES[shape], max_position_embeddings=max_tokens)
    torch.manual_seed(seed)
    previous = torch.get_default_device()
    torch.set_default_device(device)
    try:
        model = LlamaForCausalLM._from_config(cfg, dtype=dtype, attn_implementation=ATTENTION)
    finally:
        torch.set_default_device(previous)
    model.set_attn_implementation(ATTENTION)
    return model.eval()


class PagedCache(DynamicCache):
    """The KV of one prompt in a PagedKv: positions [0, prefix) are there already or arrive
    there (wait(layer) returns once layer's have; with a CUDA stream, work queued after it sees
    them), the new tokens' K and V are written to their blocks as each layer computes them, and
    written(layer) is called right after (e.g. a tutti.layerwise.LayerStore's ready: the layer's
    store then runs while later layers compute).

    With events=True, the time the GPU stalls in each layer's wait is measured: `events` holds
    CUDA events recorded before and after each layer's wait, `bubbles_ms()` their gaps."""

    def __init__(self, config, kv: PagedKv, table: torch.Tensor, prefix: int = 0,
                 wait: Optional[Callable[[int], None]] = None, events: bool = False,
                 written: Optional[Callable[[int], None]] = None):
        super().__init__(config=config)
        self.kv, self.table, self.prefix, self.wait = kv, table.to(kv.kv[0].device), prefix, wait
        self.written = written
        self.seen = [prefix] * kv.layers
        self.events: List = []
        if events and wait is not None:
            self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                            for _ in range(kv.layers)]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if key_states.shape[0] != 1:
            raise ValueError("PagedCache holds one prompt (batch 1)")
        begin = self.seen[layer_idx]
        self.kv.write(layer_idx, self.table, begin, key_states[0].transpose(0, 1), value_states[0].transpose(0, 1))
        self.seen[layer_idx] = end = begin + key_states.shape[2]
        if self.wait is not None and begin > 0:
            if self.events:
                self.events[layer_idx][0].record()
            self.wait(layer_idx)
            if self.events:
                self.events[layer_idx][1].record()
        # After the wait: a store's first chunk may start inside the loaded prefix (a hit that
        # ends inside a chunk), and must not read those rows before they landed.
        if self.written is not None:
            self.written(layer_idx)
        if begin == 0:  # nothing before: attend over the new tokens as they are
            return key_states, value_states
        k, v = self.kv.read(layer_idx, self.table, end)  # [end, kv_heads, head_dim]
        return k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen[layer_idx]

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0):
        return self.seen[layer_idx] + query_length, 0

    def bubbles_ms(self) -> List[float]:
        """Per layer, how long the GPU waited for the layer's prefix (after a synchronize)."""
        return [a.elapsed_time(b) for a, b in self.events]


@torch.no_grad()
def prefill(model, tokens: torch.Tensor, cache: PagedCache) -> torch.Tensor:
    """Computes the tokens after the cache's prefix and returns the logits of the last token,
    [vocab] in float32."""
    begin = cache.prefix
    device = cache.kv.kv[0].device
    ids = tokens[begin:].to(device=device, dtype=torch.long).unsqueeze(0)
    pos = torch.arange(begin, tokens.shape[0], device=device).unsqueeze(0)
    out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].float()
