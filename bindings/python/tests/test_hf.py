# SPDX-License-Identifier: Apache-2.0
"""tutti inside Hugging Face transformers, on the GPU: a Llama built from a config (random
weights) computes a prompt's suffix over a prefix that tutti loads layer by layer into its paged
KV cache, and gets the logits of a full recompute. Skips without transformers or a GPU (CI has
neither; tools/device-run runs it on the H200 machine)."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")
pytest.importorskip("transformers", reason="transformers is not installed here")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import tutti  # noqa: E402
from tutti import hf  # noqa: E402
from tutti.layerwise import LayerStore, PagedKv, PrefixLoad, store  # noqa: E402

BT, CT = 16, 256


@pytest.mark.parametrize("backend", ["posix", "gpu-uring", "dram"])
def test_layerwise_prefix_gives_the_logits_of_a_full_recompute(tmp_path, backend):
    model = hf.build("tiny", seed=1)
    c = model.config
    n, prefix = 8 * CT + 77, 6 * CT
    tokens = torch.randint(0, c.vocab_size, (n,), generator=torch.Generator().manual_seed(2), dtype=torch.int32)
    nb = (n + BT - 1) // BT
    kv = PagedKv(c.num_hidden_layers, nb, BT, c.num_key_value_heads, c.head_dim, torch.bfloat16, "cuda")
    table = torch.arange(nb, dtype=torch.int32)

    full = hf.prefill(model, tokens, hf.PagedCache(c, kv, table))       # also fills the blocks
    floor = hf.prefill(model, tokens, hf.PagedCache(c, kv, table, prefix=prefix))
    pool = f"/dev/shm/tutti-test-hf-{tmp_path.name}.pool" if backend == "dram" else str(tmp_path / "pool")
    try:
        rt = tutti.Runtime(pool=pool, capacity="256M", chunk_tokens=CT, backend=backend)
        rt.register_kv(kv.layout())
        assert store(rt, tokens, table) == 8 * CT
        for t in kv.kv:  # nothing of the prefix is left in HBM
            t.zero_()
        stream = torch.cuda.current_stream()
        with PrefixLoad(rt, tokens, table, stream=stream, end=prefix) as load:
            assert load.tokens == prefix
            cache = hf.PagedCache(c, kv, table, prefix=load.tokens, wait=load.wait, events=True)
            loaded = hf.prefill(model, tokens, cache)
            assert load.finish() == prefix
        rt.close()
    finally:
        if backend == "dram":
            os.remove(pool)
    torch.cuda.synchronize()
    assert len(cache.bubbles_ms()) == c.num_hidden_layers
    assert torch.equal(loaded, floor)  # the loaded bytes are the computed ones
    assert loaded.argmax() == full.argmax()
    assert torch.nn.functional.cosine_similarity(loaded, full, dim=0) > 0.995  # bf16, other kernels


@pytest.mark.parametrize("backend", ["posix", "dram"])
def test_stored_while_computed_then_loaded(tmp_path, backend):
    """The prefill declares each layer ready as transformers writes its KV (on the model's
    stream: tutti's writer waits for it by event); what a load brings back afterwards gives the
    in-HBM floor's logits bit for bit."""
    model = hf.build("tiny", seed=4)
    c = model.config
    n, prefix = 6 * CT + 9, 5 * CT
    tokens = torch.randint(0, c.vocab_size, (n,), generator=torch.Generator().manual_seed(5), dtype=torch.int32)
    nb = (n + BT - 1) // BT
    kv = PagedKv(c.num_hidden_layers, nb, BT, c.num_key_value_heads, c.head_dim, torch.bfloat16, "cuda")
    table = torch.arange(nb, dtype=torch.int32)
    pool = f"/dev/shm/tutti-test-hf-st-{tmp_path.name}.pool" if backend == "dram" else str(tmp_path / "pool")
    try:
        rt = tutti.Runtime(pool=pool, capacity="256M", chunk_tokens=CT, backend=backend)
        rt.register_kv(kv.layout())
        stream = torch.cuda.current_stream()
        with LayerStore(rt, tokens, table, stream=stream) as st:
            hf.prefill(model, tokens, hf.PagedCache(c, kv, table, written=st.ready))
            assert st.finish() == 6 * CT
        floor = hf.prefill(model, tokens, hf.PagedCache(c, kv, table, prefix=prefix))
        for t in kv.kv:
            t.zero_()
        with PrefixLoad(rt, tokens, table, stream=stream, end=prefix) as load:
            loaded = hf.prefill(model, tokens, hf.PagedCache(c, kv, table, prefix=load.tokens, wait=load.wait))
            assert load.finish() == prefix
        rt.close()
    finally:
        if backend == "dram":
            os.remove(pool)
    torch.cuda.synchronize()
    assert torch.equal(loaded, floor)


def test_zeroed_prefix_would_show():
    """The comparison above can fail: without the prefix KV the logits differ."""
    model = hf.build("tiny", seed=1)
    c = model.config
    n, prefix = 4 * CT, 3 * CT
    tokens = torch.randint(0, c.vocab_size, (n,), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    kv = PagedKv(c.num_hidden_layers, n // BT, BT, c.num_key_value_heads, c.head_dim, torch.bfloat16, "cuda")
    table = torch.arange(n // BT, dtype=torch.int32)
    hf.prefill(model, tokens, hf.PagedCache(c, kv, table))
    floor = hf.prefill(model, tokens, hf.PagedCache(c, kv, table, prefix=prefix))
    for t in kv.kv:
        t[:, : prefix // BT].zero_()
    assert not torch.equal(hf.prefill(model, tokens, hf.PagedCache(c, kv, table, prefix=prefix)), floor)
