#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sample: keep a prompt's KV cache in a tutti pool and stream it back layer by layer.

Opens a pool in a temporary directory, registers a small paged KV cache (numpy, host memory),
stores one prompt's KV, looks the prompt up, loads it back into other blocks layer by layer and
checks every byte. Run with the built package on PYTHONPATH (ctest does).
"""
import sys
import tempfile

import numpy as np

import tutti

LAYERS, BLOCKS, BLOCK_TOKENS, KV_HEADS, HEAD_DIM = 4, 128, 16, 8, 128


def main() -> int:
    rng = np.random.default_rng(0)
    # vLLM-style: per layer one [2, blocks, block_tokens, kv_heads, head_dim] fp16 tensor.
    kv = [rng.integers(0, 1 << 16, (2, BLOCKS, BLOCK_TOKENS, KV_HEADS, HEAD_DIM), dtype=np.uint16) for _ in range(LAYERS)]
    prompt = rng.integers(0, 128_000, 1024, dtype=np.int32)
    stored_in = np.arange(0, 64, dtype=np.int32)      # the blocks the prompt was computed into
    loaded_into = np.arange(64, 128, dtype=np.int32)  # fresh blocks to load it back into

    with tempfile.TemporaryDirectory() as d, tutti.Runtime(pool=f"{d}/kv.pool", capacity="1G") as rt:
        rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BLOCK_TOKENS, KV_HEADS, HEAD_DIM, 2, k=kv))
        with rt.batch("store") as b:
            b.add(prompt, stored_in)
            b.submit()
            b.wait()
        hit = rt.lookup(prompt)
        print(f"stored {len(prompt)} tokens with backend {rt.backend}; lookup finds {hit} cached tokens")
        with rt.batch("load") as b:
            b.add(prompt[:hit], loaded_into)
            b.submit()
            for layer in range(LAYERS):
                b.wait_layer(layer)  # the engine would run this layer's attention now
                same = np.array_equal(kv[layer][:, loaded_into], kv[layer][:, stored_in])
                print(f"layer {layer}: {'in place, bytes match' if same else 'BYTES DIFFER'}")
                if not same:
                    return 1
            b.wait()
        s = rt.stats()
        print(f"read {s['bytes_read'] / 2**20:.1f} MiB in {s['ios']} I/Os; ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
