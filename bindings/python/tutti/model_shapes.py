# SPDX-License-Identifier: Apache-2.0
"""Model shapes the benchmarks build (transformers LlamaConfig fields); importing it needs nothing."""
from typing import Dict

# Shapes of the public checkpoints (weights are random here: nothing is downloaded).
MODEL_SHAPES: Dict[str, dict] = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=128256),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=32, vocab_size=1024),
}
