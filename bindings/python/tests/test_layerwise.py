# SPDX-License-Identifier: Apache-2.0
"""Layer-wise prefix loading into a real (if small) model: logits computed over a prefix that
tutti loads layer by layer equal a full recompute of the prompt, with the same weights."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

import tutti  # noqa: E402
from tutti.layerwise import LayerStore, PagedKv, PrefixLoad, store  # noqa: E402
from tutti.reference_llama import LlamaShape, ReferenceLlama  # noqa: E402
from fixture import damage  # noqa: E402

SHAPE = LlamaShape(layers=4, hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=256, vocab=512)
BT, CT, BLOCKS = 16, 32, 64


def runtime(path, kv):
    rt = tutti.Runtime(pool=str(path / "pool"), capacity="64M", chunk_tokens=CT)
    rt.register_kv(kv.layout())
    return rt


def new_kv():
    return PagedKv(SHAPE.layers, BLOCKS, BT, SHAPE.kv_heads, SHAPE.head_dim, torch.float32)


def stored_prompt(tmp_path, seed, chunks, extra):
    """A model, a prompt of `chunks` whole chunks and `extra` tokens, its full prefill (whose
    whole chunks are then stored), and a second engine's block table (other block ids)."""
    model = ReferenceLlama(SHAPE, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, SHAPE.vocab, (chunks * CT + extra,), generator=gen, dtype=torch.int32)
    nblk = (tokens.shape[0] + BT - 1) // BT
    perm = torch.randperm(BLOCKS, generator=gen).to(torch.int32)
    kv = new_kv()
    full = model.prefill(tokens, kv, perm[:nblk])
    rt = runtime(tmp_path, kv)
    assert store(rt, tokens, perm[:nblk]) == chunks * CT
    rt.close()
    return model, tokens, full, perm[nblk:2 * nblk]


def test_loaded_prefix_gives_the_logits_of_a_full_recompute(tmp_path):
    model, tokens, full, second = stored_prompt(tmp_path, 1, 3, 7)

    # A second engine (fresh blocks, other block ids) loads the prefix layer by layer and
    # computes only the rest; each layer waits for its prefix right before attention.
    kv2 = new_kv()
    rt = runtime(tmp_path, kv2)
    waited = []
    with PrefixLoad(rt, tokens, second) as load:
        assert load.tokens == 3 * CT

        def before_attention(layer):
            load.wait(layer)
            waited.append(layer)

        suffix = model.prefill(tokens, kv2, second, prefix=load.tokens, before_attention=before_attention)
        assert load.finish() == 3 * CT
    rt.close()
    assert waited == list(range(SHAPE.layers))
    assert suffix.shape[0] == tokens.shape[0] - 3 * CT
    torch.testing.assert_close(suffix, full[3 * CT:], rtol=1e-4, atol=1e-4)
    assert torch.equal(suffix.argmax(-1), full[3 * CT:].argmax(-1))  # the same greedy tokens


def test_a_prompt_stored_layer_by_layer_while_it_is_computed(tmp_path):
    """The prefill declares each layer ready right after writing its KV: the store runs behind
    the compute, commits after the last layer, and a second engine that loads the prefix gets
    the logits of a full recompute. Leaving before the last layer stores nothing."""
    model = ReferenceLlama(SHAPE, seed=5)
    gen = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, SHAPE.vocab, (3 * CT + 5,), generator=gen, dtype=torch.int32)
    nblk = (tokens.shape[0] + BT - 1) // BT
    perm = torch.randperm(BLOCKS, generator=gen).to(torch.int32)
    kv = new_kv()
    rt = runtime(tmp_path, kv)
    with LayerStore(rt, tokens, perm[:nblk]) as st:
        st.ready(0)
        assert rt.lookup(tokens) == 0
    assert rt.lookup(tokens) == 0  # left after one layer of four: nothing stored
    with LayerStore(rt, tokens, perm[:nblk]) as st:
        full = model.prefill(tokens, kv, perm[:nblk], before_attention=st.ready)  # called after each write
        assert st.finish() == 3 * CT
    rt.close()

    kv2 = new_kv()
    rt = runtime(tmp_path, kv2)
    second = perm[nblk:2 * nblk]
    with PrefixLoad(rt, tokens, second) as load:
        assert load.tokens == 3 * CT
        suffix = model.prefill(tokens, kv2, second, prefix=load.tokens, before_attention=load.wait)
        assert load.finish() == 3 * CT
    rt.close()
    torch.testing.assert_close(suffix, full[3 * CT:], rtol=1e-4, atol=1e-4)


def test_recomputed_head_and_loaded_tail_give_the_logits_of_a_full_recompute(tmp_path):
    """The load-or-recompute split: the head of the cached prefix is computed again (a first
    pass) while its tail loads, then the rest of the prompt is computed over both."""
    model, tokens, full, second = stored_prompt(tmp_path, 7, 4, 9)
    kv2 = new_kv()
    rt = runtime(tmp_path, kv2)
    head = CT
    with PrefixLoad(rt, tokens, second, begin=head) as load:
        assert (load.begin, load.tokens) == (head, 4 * CT)
        model.prefill(tokens[:head], kv2, second)  # the head, while the tail loads
        suffix = model.prefill(tokens, kv2, second, prefix=load.tokens, before_attention=load.wait)
        assert load.finish() == 4 * CT
    rt.close()
    torch.testing.assert_close(suffix, full[4 * CT:], rtol=1e-4, atol=1e-4)
    # A load capped below the hit brings no more than asked.
    rt = runtime(tmp_path, new_kv())
    with PrefixLoad(rt, tokens, second, end=2 * CT) as load:
        assert load.tokens == 2 * CT
        assert load.finish() == 2 * CT
    rt.close()


def test_a_whole_cached_prompt_leaves_its_last_token_to_compute(tmp_path):
    """A prompt of whole chunks, all cached: the load stops one token short, so the prefill
    has the last token to compute and its logits are the full recompute's."""
    model, tokens, full, second = stored_prompt(tmp_path, 11, 2, 0)
    kv2 = new_kv()
    rt = runtime(tmp_path, kv2)
    with PrefixLoad(rt, tokens, second) as load:
        assert load.tokens == 2 * CT - 1
        last = model.prefill(tokens, kv2, second, prefix=load.tokens, before_attention=load.wait)
        assert load.finish() == 2 * CT - 1
    rt.close()
    torch.testing.assert_close(last, full[-1:], rtol=1e-4, atol=1e-4)


def test_a_damaged_chunk_ends_the_load_where_it_starts(tmp_path):
    """finish() says where the KV that arrived ends (it does not raise): past a chunk that
    fails its checksum the blocks hold nothing valid; before it, the prompt's KV."""
    model, tokens, full, second = stored_prompt(tmp_path, 13, 4, 3)
    damage(tmp_path / "pool", [2], "layer 1")  # the third chunk's slot
    kv2 = new_kv()
    rt = runtime(tmp_path, kv2)
    with PrefixLoad(rt, tokens, second) as load:
        assert load.tokens == 4 * CT
        for layer in range(SHAPE.layers):
            load.wait(layer)
        got = load.finish()
    rt.close()
    assert got == 2 * CT
    again = new_kv()
    model.prefill(tokens, again, second)
    for layer in range(SHAPE.layers):
        k, v = kv2.read(layer, second, got)
        k0, v0 = again.read(layer, second, got)
        torch.testing.assert_close(k, k0, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v, v0, rtol=1e-5, atol=1e-5)


def test_a_miss_loads_nothing_and_computes_everything(tmp_path):
    model = ReferenceLlama(SHAPE, seed=3)
    tokens = torch.arange(2 * CT, dtype=torch.int32)
    kv = new_kv()
    rt = runtime(tmp_path, kv)
    table = torch.arange(2 * CT // BT, dtype=torch.int32)
    with PrefixLoad(rt, tokens, table) as load:
        assert load.tokens == 0
        logits = model.prefill(tokens, kv, table, prefix=load.tokens, before_attention=load.wait)
        assert load.finish() == 0
    rt.close()
    assert logits.shape == (2 * CT, SHAPE.vocab)


def test_wrong_kv_would_show(tmp_path):
    """The comparison above can fail: a prefix whose KV is not the prompt's changes the logits."""
    model = ReferenceLlama(SHAPE, seed=4)
    tokens = torch.arange(2 * CT + 5, dtype=torch.int32)
    table = torch.arange(BLOCKS, dtype=torch.int32)[: (tokens.shape[0] + BT - 1) // BT]
    kv = new_kv()
    full = model.prefill(tokens, kv, table)
    for layer in range(SHAPE.layers):
        kv.kv[layer][:, table[0].long()] += 0.5  # disturb the first block of the prefix
    suffix = model.prefill(tokens, kv, table, prefix=2 * CT)
    assert not torch.allclose(suffix, full[2 * CT:], rtol=1e-4, atol=1e-4)


def test_layer_by_layer_into_cuda_memory(tmp_path):
    """The same protocol with the KV cache and the model on the GPU; each layer's wait is
    stream-ordered, so the attention queued after it reads the loaded prefix."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    model = ReferenceLlama(SHAPE, seed=5, device="cuda")
    gen = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, SHAPE.vocab, (4 * CT + 3,), generator=gen, dtype=torch.int32)
    nblk = (tokens.shape[0] + BT - 1) // BT
    perm = torch.randperm(BLOCKS, generator=gen).to(torch.int32)

    def cuda_kv():
        return PagedKv(SHAPE.layers, BLOCKS, BT, SHAPE.kv_heads, SHAPE.head_dim, torch.float32, "cuda")

    kv = cuda_kv()
    first = perm[:nblk].cuda()
    full = model.prefill(tokens, kv, first)
    torch.cuda.synchronize()
    rt = runtime(tmp_path, kv)
    assert store(rt, tokens, first) == 4 * CT
    rt.close()

    kv2 = cuda_kv()
    second = perm[nblk:2 * nblk].cuda()
    rt = runtime(tmp_path, kv2)
    stream = torch.cuda.current_stream()
    with PrefixLoad(rt, tokens, second, stream=stream) as load:
        assert load.tokens == 4 * CT
        suffix = model.prefill(tokens, kv2, second, prefix=load.tokens, before_attention=load.wait)
        torch.cuda.synchronize()
        assert load.finish() == 4 * CT
    rt.close()
    torch.testing.assert_close(suffix, full[4 * CT:], rtol=1e-4, atol=1e-4)
