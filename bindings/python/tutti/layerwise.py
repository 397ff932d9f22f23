# SPDX-License-Identifier: Apache-2.0
"""Layer-wise prefix loading for a model written in torch.

The engine keeps a paged KV cache (PagedKv: per layer one fused [2, blocks, block_tokens,
kv_heads, head_dim] tensor, vLLM's layout before mid-2026) registered with a tutti Runtime.
For a prompt, PrefixLoad(rt, tokens, table) looks the prompt up and submits the load of its
cached prefix; the model then calls wait(layer) right before layer's attention reads the
cache, so the reads of later layers run while earlier layers compute. LayerStore writes the prompt's new whole
chunks back the same way, each layer once the model has written its KV (ready(layer)), while
later layers compute; store() writes them all after the prefill.

    kv = PagedKv(layers, blocks, block_tokens, kv_heads, head_dim, torch.bfloat16, "cuda")
    rt = tutti.Runtime(pool=..., chunk_tokens=256); rt.register_kv(kv.layout())
    with PrefixLoad(rt, tokens, table) as load:   # load.tokens: the cached prefix
        logits = model.prefill(tokens, kv, table, prefix=load.tokens, before_attention=load.wait)
        if load.finish() < load.tokens:              # a chunk failed or was evicted: the logits
            ...                                      # are not to be used; prefill again from
                                                     # the tokens that arrived
    store(rt, tokens, table, begin=load.tokens)

To recompute a head of the prefix while its tail loads (tutti.policy decides how much), give
PrefixLoad begin=head and prefill tokens[:head] first; the tail arrives meanwhile.
"""
from typing import Any, Optional

from . import Error, KvLayout, MEMORY_CUDA, MEMORY_HOST, Runtime, _host_ints

try:
    import torch
except ImportError:  # the binding itself needs no torch
    torch = None


class PagedKv:
    """A paged KV cache in torch tensors: block b of layer l holds tokens' K at kv[l][0, b] and
    V at kv[l][1, b], each [block_tokens, kv_heads, head_dim]."""

    def __init__(self, layers: int, blocks: int, block_tokens: int, kv_heads: int, head_dim: int,
                 dtype: Any = None, device: Any = "cpu"):
        if torch is None:
            raise ImportError("tutti.layerwise needs torch")
        self.layers, self.blocks, self.block_tokens = layers, blocks, block_tokens
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.kv = [torch.zeros(2, blocks, block_tokens, kv_heads, head_dim, dtype=dtype or torch.float32,
                               device=device) for _ in range(layers)]

    def layout(self) -> KvLayout:
        t = self.kv[0]
        return KvLayout.paged(self.layers, self.blocks, self.block_tokens, self.kv_heads, self.head_dim,
                              t.element_size(), k=self.kv,
                              memory=MEMORY_CUDA if t.is_cuda else MEMORY_HOST,
                              device=t.device.index or 0 if t.is_cuda else 0)

    def _slots(self, table: "torch.Tensor", begin: int, end: int):
        pos = torch.arange(begin, end, device=table.device)
        return table[pos // self.block_tokens].long(), pos % self.block_tokens

    def write(self, layer: int, table: "torch.Tensor", begin: int, k: "torch.Tensor", v: "torch.Tensor") -> None:
        """Puts k, v ([tokens, kv_heads, head_dim]) of positions begin.. into their blocks."""
        blocks, offs = self._slots(table.to(self.kv[layer].device), begin, begin + k.shape[0])
        self.kv[layer][0, blocks, offs] = k.to(self.kv[layer].dtype)
        self.kv[layer][1, blocks, offs] = v.to(self.kv[layer].dtype)

    def read(self, layer: int, table: "torch.Tensor", end: int):
        """K and V of positions 0..end, [end, kv_heads, head_dim] each."""
        blocks, offs = self._slots(table.to(self.kv[layer].device), 0, end)
        return self.kv[layer][0, blocks, offs], self.kv[layer][1, blocks, offs]


class PrefixLoad:
    """The load of a prompt's cached prefix, layer by layer. `tokens` is where the cached KV ends
    (0 on a miss: then wait() returns at once and nothing is submitted), at most the prompt's
    length less one: the model computes at least its last token, whose logits are the answer.
    `begin` skips a head that is computed again instead (tutti.policy), `end` caps the load
    below that (or, given as the prompt's length, loads a whole cached prompt); both may be any
    token."""

    def __init__(self, rt: Runtime, tokens: Any, block_table: Any, salt: Optional[bytes] = None,
                 stream: Any = None, begin: int = 0, end: Optional[int] = None):
        self._tokens, self._table = _host_ints(tokens), _host_ints(block_table)
        self._stream = stream
        self.tokens = rt.lookup(self._tokens, salt)
        self.tokens = min(self.tokens, end if end is not None else max(len(self._tokens) - 1, 0))
        self.begin = min(begin, self.tokens)
        self._batch = None
        if self.tokens > self.begin:
            self._batch = rt.batch("load")
            self._batch.add(self._tokens, self._table, token_begin=self.begin, token_end=self.tokens, salt=salt)
            self._batch.submit()

    def wait(self, layer: int) -> None:
        """Returns once layer's prefix KV is in the blocks (with a CUDA stream: work queued on it
        after this call sees the bytes)."""
        if self._batch is not None:
            self._batch.wait_layer(layer, stream=self._stream)

    def finish(self) -> int:
        """Waits for the whole load; returns where the KV that arrived ends (`tokens` when all
        did). Less (a chunk failed its checksum, or was evicted) means the blocks past it hold
        no valid KV: whatever was computed over them is to be thrown away and prefilled again
        from there."""
        if self._batch is None:
            return self.tokens
        try:
            self._batch.wait()
        except Error:
            pass  # a chunk failed: the result says where the KV that arrived ends
        got = self.begin + self._batch.result(0).tokens
        self._batch.close()
        self._batch = None
        return got

    def __enter__(self) -> "PrefixLoad":
        return self

    def __exit__(self, *exc) -> None:
        if self._batch is not None:
            self._batch.close()  # waits for anything in flight
            self._batch = None


class LayerStore:
    """The store of a prompt's whole chunks from token `begin` (the cached prefix) on, while the
    model computes them: ready(layer) once the layer's KV of the prompt is in its blocks (on
    `stream`'s order for CUDA tensors: the call records an event and never blocks), finish()
    after the last layer. The writes of a layer run while later layers compute. Leaving the
    `with` block before every layer was ready (an aborted request) stores nothing."""

    def __init__(self, rt: Runtime, tokens: Any, block_table: Any, begin: int = 0, salt: Optional[bytes] = None,
                 stream: Any = None):
        self._stream = stream
        self._batch = rt.batch("store_by_layer")
        try:
            self._batch.add(tokens, block_table, token_begin=begin, salt=salt)  # the batch keeps them
            self._batch.submit()
        except BaseException:
            self._batch.close()
            raise

    def ready(self, layer: int) -> None:
        self._batch.layer_ready(layer, stream=self._stream)

    def finish(self) -> int:
        """Waits until the last layer is written and the chunks are committed; returns how many
        tokens past `begin` are now in the pool."""
        self._batch.wait()
        stored = self._batch.result(0).tokens
        self._batch.close()
        return stored

    def __enter__(self) -> "LayerStore":
        return self

    def __exit__(self, *exc) -> None:
        self._batch.close()  # a batch not finished: stores nothing


def store(rt: Runtime, tokens: Any, block_table: Any, begin: int = 0, salt: Optional[bytes] = None,
          stream: Any = None) -> int:
    """Stores the prompt's whole chunks from the chunk that holds token `begin` (the end of the
    cached prefix) on; returns how many tokens are now in the pool past `begin`. With CUDA in
    use, first waits for `stream` (default: torch's current stream), on which the model wrote
    the KV: tutti's copy kernels run on a stream of their own."""
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        (stream if stream is not None else torch.cuda.current_stream()).synchronize()
    with rt.batch("store") as b:
        b.add(tokens, block_table, token_begin=begin, salt=salt)
        b.submit()
        b.wait()
        return b.result(0).tokens
