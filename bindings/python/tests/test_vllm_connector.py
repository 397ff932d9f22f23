# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector driven through vLLM's call sequence (tests/vllm_replay.py) over real pools and
a real paged KV cache in each of vLLM's layouts: what one engine stored, a second engine loads
layer by layer into other blocks, through partial hits, vLLM's own prefix cache, chunked
prefill, preemption, aborts, async loads and damaged pools, and every KV position its
attention reads is checked."""
import random
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

import tutti  # noqa: E402
from tutti.vllm import TuttiConnector  # noqa: E402
from tutti.vllm.connector import _ints as conn_ints  # noqa: E402
from tutti.vllm.connector import _Load, _settings  # noqa: E402
from tutti.vllm.layout import kv_views, layer_index, split_kv  # noqa: E402
from fixture import damage, pool_slots  # noqa: E402
from vllm_replay import (LAYOUTS, Engine, KVCacheBlocks, Request, WrongKV, allocate, chain,  # noqa: E402
                         expected_kv, vllm_config)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def prompts(seed, docs=3, per_doc=3, doc_len=40, tail=(3, 17), vocab=500):
    """Requests over a few shared documents: each prompt is a document and its own question."""
    rng = random.Random(seed)
    out = []
    for d in range(docs):
        doc = [rng.randrange(vocab) for _ in range(doc_len)]
        for q in range(per_doc):
            out.append(Request(f"s{seed}-d{d}-q{q}", doc + [rng.randrange(vocab) for _ in range(rng.randint(*tail))]))
    return out


def serve(tmp_path, reqs, **kw):
    e = Engine(tmp_path, **kw)
    try:
        for r in reqs:
            e.add(r)
        e.run()
    finally:
        e.close()
    assert all(r.status == "FINISHED" for r in reqs)
    return e


def stored_then_served(tmp_path, second, first_seed=1, **kw):
    """A first engine serves prompts (tutti stores them); a second one, on the same pool with
    a fresh KV cache, serves `second`."""
    first = serve(tmp_path, prompts(first_seed), **kw)
    assert first.stats.get("saved_tokens", 0) > 0
    return serve(tmp_path, second, **kw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_second_engine_loads_what_the_first_stored(tmp_path, layout, device):
    e = stored_then_served(tmp_path, prompts(1) + prompts(2, docs=1), layout=layout, device=device,
                           local_cache=False)
    assert e.stats["loaded_tokens"] > 0
    assert e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0


@pytest.mark.parametrize("device", DEVICES)
def test_async_saves_hold_blocks_until_committed(tmp_path, device):
    """save_async: a finished request's blocks stay the connector's until get_finished reports
    its saves committed, and what they stored loads back right in a second engine."""
    first = serve(tmp_path, prompts(1), save_async=True, device=device, local_cache=False)
    assert first.held_for_saves == len(prompts(1)) and not first.sending
    assert first.stats["saved_tokens"] > 0 and len(first.free) == 95  # every block came back
    assert first.stats["saves_behind_step"] > 0  # a step ended before its saves committed
    e = serve(tmp_path, prompts(1) + prompts(2, docs=1), save_async=True, device=device, local_cache=False)
    assert e.stats["loaded_tokens"] > 0 and e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0
    sync = serve(tmp_path, prompts(3, docs=1), device=device, local_cache=False)
    assert sync.held_for_saves == 0  # synchronous saves never hold blocks


@pytest.mark.parametrize("defer_finalize", [False, True])
def test_a_speculative_drafters_layers_are_neither_waited_for_nor_stored(tmp_path, defer_finalize):
    # vLLM up to 0.17 skips the connector's hooks in the drafter's forward; 0.18 calls them, and
    # finalizes after the drafter. Either way the target's loads are whole and right, and tutti
    # caches the target's layers alone.
    kw = dict(local_cache=False, drafter_layers=1, defer_finalize=defer_finalize)
    e = Engine(tmp_path, **kw)
    try:
        assert len(e.worker._layers) == e.layers
    finally:
        e.close()
    e = stored_then_served(tmp_path, prompts(1) + prompts(2, docs=1), **kw)
    assert e.stats["loaded_tokens"] > 0
    assert e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0


def test_partial_hits_chunked_prefill_and_vllms_own_prefix_cache(tmp_path):
    # A 24-token budget splits every prompt over several steps; vLLM's own cache serves the
    # second and third question of a document, tutti the first.
    e = stored_then_served(tmp_path, prompts(1, per_doc=4, tail=(20, 40)), budget=24)
    assert e.stats["loaded_tokens"] > 0 and e.wrong_positions == 0


@pytest.mark.parametrize("save_async", [False, True])
def test_preemption_under_block_pressure(tmp_path, save_async):
    reqs = prompts(1, docs=4, per_doc=2, doc_len=60)
    for r in reqs:
        r.max_tokens = 8
    e = stored_then_served(tmp_path, reqs, blocks=48, budget=32, local_cache=False, save_async=save_async)
    assert any(r.num_preemptions for r in reqs), "no request was preempted: the test lost its point"
    assert e.stats["loaded_tokens"] > 0 and e.wrong_positions == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("late_start", [False, True])
def test_async_loads_report_through_get_finished(tmp_path, device, late_start):
    e = stored_then_served(tmp_path, prompts(1), load_async=True, device=device, local_cache=False,
                           late_start=late_start)
    assert e.stats["loaded_tokens"] > 0 and e.wrong_positions == 0


@pytest.mark.parametrize("save_async", [False, True])
def test_aborts_while_loading_and_while_prefilling(tmp_path, save_async):
    serve(tmp_path, prompts(1), local_cache=False)
    reqs = prompts(1)

    def abort(engine):
        if engine.steps == 0:
            engine.abort(reqs[0].request_id)  # still waiting
        if engine.steps == 1:
            for r in reqs:
                if r.status in ("WAITING_FOR_REMOTE_KVS", "RUNNING"):
                    engine.abort(r.request_id)
                    break

    e = Engine(tmp_path, load_async=True, budget=16, local_cache=False, save_async=save_async)
    for r in reqs:
        e.add(r)
    e.run(on_step=abort)
    e.close()
    assert sum(r.aborted for r in reqs) == 2 and all(r.status == "FINISHED" for r in reqs)
    assert len(e.free) == 95, "an aborted request's blocks were never freed"


def test_loads_start_where_vllms_hit_ends_inside_a_chunk(tmp_path):
    # chunk 16 over blocks of 4: the second question of a document has a local hit of 40
    # tokens (10 blocks), inside the third chunk; tutti continues it from there, to the end of
    # what the first engine stored of the question (a partial chunk).
    e = stored_then_served(tmp_path, prompts(1), chunk_tokens=16)
    assert any(begin % 16 for begin, _ in e.loads), "no load started inside a chunk: the test lost its point"
    assert e.stats["loaded_tokens"] > 0 and e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0


def test_a_prompt_served_again_loads_all_but_its_last_token(tmp_path):
    # Whole prompts again, on a fresh engine: tutti holds each one's tail as a partial chunk
    # (whole blocks of 4), so every load reaches its prompt's last whole block.
    reqs = prompts(1)
    assert any(len(r.prompt_token_ids) % 4 == 0 for r in reqs), "no prompt of whole blocks: the last check lost its point"
    e = stored_then_served(tmp_path, [Request(r.request_id + "-again", list(r.prompt_token_ids)) for r in reqs],
                           local_cache=False)
    for r, (begin, n) in zip(reqs, e.loads):
        size = len(r.prompt_token_ids)
        assert begin == 0 and n == min(size // 4 * 4, size - 1), (size, n)
    assert len(e.loads) == len(reqs) and e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0
    # A load that ends inside its last block (a prompt of whole blocks) arrived whole: no block
    # of it is held as failed, which would drop later saves over that block id.
    assert not e.worker._bad and e.stats.get("saves_dropped", 0) == 0


@pytest.mark.parametrize("load_async,save_async", [(False, False), (True, False), (False, True)])
def test_chunks_that_fail_their_checksum_are_recomputed_never_used(tmp_path, load_async, save_async):
    serve(tmp_path, prompts(1), local_cache=False)
    damage(tmp_path / "kv.pool", range(0, 64, 3), "layer 1")  # every third slot
    e = serve(tmp_path, prompts(1), local_cache=False, load_async=load_async, save_async=save_async)
    assert e.stats["failed_tokens"] > 0 and e.reported_invalid > 0
    assert e.stats["loaded_tokens"] > 0  # the chunks before a damaged one still load
    assert load_async or e.wrong_positions > 0  # a sync load's attention did meet the damage
    # tutti forgets a damaged chunk once a load meets it, and the recompute stores it again:
    # the pool heals (a damaged chunk behind a failed one is only met in a later round).
    for _ in range(8):
        again = serve(tmp_path, prompts(1), local_cache=False, load_async=load_async, save_async=save_async)
        assert again.stats.get("failed_tokens", 0) < e.stats["failed_tokens"]
        e = again
        if not e.stats.get("failed_tokens"):
            break
    assert e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0


def refuse_sync_loads(monkeypatch, count):
    """The next `count` sync load batches are refused (as by an I/O setup error): nothing
    arrives and the connector reports every block; the pool itself stays intact."""
    submit, left = TuttiConnector._submit_load, [count]

    def refused(self, specs):
        if left[0] > 0 and not any(s.is_async for s in specs):
            left[0] -= 1
            return _Load(None, specs)
        return submit(self, specs)

    monkeypatch.setattr(TuttiConnector, "_submit_load", refused)


@pytest.mark.parametrize("order,save_async", [("cache_at_alloc", False), ("defer_finalize", False),
                                              ("cache_at_alloc", True)])
def test_nothing_computed_over_a_failed_load_is_saved(tmp_path, monkeypatch, order, save_async):
    # cache_at_alloc: a second question of the document shares the failing request's blocks
    # in the same step (its load is refused). defer_finalize: load errors are asked for
    # before wait_for_save, and the loads (from a damaged pool) are still in flight at the
    # last save_kv_layer. A third engine then reads back everything the second stored: a
    # wrong byte it is not told of fails the replay.
    serve(tmp_path, prompts(1, per_doc=1), local_cache=False)
    if order == "cache_at_alloc":
        refuse_sync_loads(monkeypatch, 2)
    else:
        damage(tmp_path / "kv.pool", range(64), 7)
        monkeypatch.setattr(tutti.Batch, "poll", lambda self: (0, False))
    e = serve(tmp_path, prompts(1), budget=48, save_async=save_async, **{order: True})
    assert e.reported_invalid > 0 and e.stats["saves_dropped"] > 0
    monkeypatch.undo()
    serve(tmp_path, prompts(1), local_cache=False)


def test_a_step_planned_before_a_failure_was_reported_saves_nothing(tmp_path, monkeypatch):
    # vLLM's async scheduling plans step k+1 before step k's output comes back: the request
    # whose load fails in step k goes on prefilling in k+1, over KV that never arrived.
    # (chunks of one block: step k+1 completes chunks, whose saves are planned)
    head = prompts(1, docs=1, per_doc=1, doc_len=80, tail=(1, 1))[0].prompt_token_ids
    serve(tmp_path, [Request("p", head)], local_cache=False, chunk_tokens=4)
    full = head[:80] + [7] * 41
    refuse_sync_loads(monkeypatch, 1)
    e = Engine(tmp_path, budget=20, local_cache=False, chunk_tokens=4)
    r = Request("r", list(full))
    e.add(r)
    step_k = e.schedule()
    r.num_computed_tokens += step_k.num_scheduled_tokens["r"]  # vLLM advances at schedule time
    step_k1 = e.schedule()
    assert step_k.kv_connector_metadata.loads and step_k1.kv_connector_metadata.saves
    assert e.execute(step_k).invalid_block_ids
    with pytest.raises(WrongKV):  # the replay's own check: k+1 reads what never arrived
        e.execute(step_k1)
    e.close()
    assert e.stats.get("saved_tokens", 0) == 0 and e.stats["saves_dropped"] == 2
    monkeypatch.undo()
    again = serve(tmp_path, [Request("r2", list(full))], local_cache=False, chunk_tokens=4)
    assert again.stats["loaded_tokens"] == 80 and again.wrong_positions == 0


def test_loads_under_load_timeout_ms_land_every_byte(tmp_path):
    e = stored_then_served(tmp_path, prompts(1), local_cache=False, load_timeout_ms=60000)
    assert e.stats["loaded_tokens"] > 0 and e.stats.get("failed_tokens", 0) == 0 and e.wrong_positions == 0


def test_a_load_that_gave_up_is_recomputed_and_never_waited_for(tmp_path, monkeypatch):
    # As with option load_timeout_ms when the reads stall: wait_layer gives up (TUTTI_EIO), and
    # no byte of the batch reaches the blocks afterwards (that fence: tests/integrity/stall.c).
    # The step must not wait for the batch again: its blocks are reported and recomputed, and
    # the batch is freed behind the next steps.
    serve(tmp_path, prompts(1), local_cache=False)
    wait, gave_up = tutti.Batch.wait, []

    def late(self, layer, stream=None):
        if self not in gave_up:  # its bytes land now or never (here: now; the fence: never)
            wait(self)
            gave_up.append(self)
        raise tutti.Error(tutti.tutti_c.TUTTI_EIO, f"the load gave up at layer {layer}, not landed within "
                                                   "load_timeout_ms (200 ms)")

    def wait_unless_given_up(self):
        assert self not in gave_up, "the connector waited for a load it gave up on"
        return wait(self)

    monkeypatch.setattr(tutti.Batch, "wait_layer", late)
    monkeypatch.setattr(tutti.Batch, "wait", wait_unless_given_up)
    e = serve(tmp_path, prompts(1), local_cache=False)
    assert gave_up and e.stats["load_timeouts"] == len(gave_up)
    assert e.reported_invalid > 0 and e.stats.get("loaded_tokens", 0) == 0 and e.wrong_positions == 0


def test_the_harness_catches_a_connector_that_hides_failed_loads(tmp_path, monkeypatch):
    serve(tmp_path, prompts(1), local_cache=False)
    damage(tmp_path / "kv.pool", range(64), 7)
    monkeypatch.setattr(TuttiConnector, "get_block_ids_with_load_errors",
                        lambda self: (TuttiConnector._end_sync_load(self), set())[1])
    with pytest.raises(WrongKV):
        serve(tmp_path, prompts(1), local_cache=False)


def test_roles_consumer_loads_only_and_producer_stores_only(tmp_path):
    e = serve(tmp_path, prompts(1), kv_role="kv_consumer")
    assert e.stats.get("saved_tokens", 0) == 0
    e = serve(tmp_path, prompts(1), kv_role="kv_producer")
    assert e.stats["saved_tokens"] > 0 and e.stats.get("loaded_tokens", 0) == 0
    e = serve(tmp_path, prompts(1), kv_role="kv_consumer", local_cache=False)
    assert e.stats["loaded_tokens"] > 0 and e.wrong_positions == 0


def test_salted_and_other_model_prompts_never_share_kv(tmp_path):
    def first_questions():  # stored by the first engine; no two share a document
        return prompts(1)[::3]

    serve(tmp_path, prompts(1), local_cache=False)
    salted = first_questions()
    for r in salted:
        r.cache_salt = "tenant-b"
    assert serve(tmp_path, salted, local_cache=False).stats.get("loaded_tokens", 0) == 0
    other_model = serve(tmp_path, first_questions(), local_cache=False, namespace="vllm:another-model")
    assert other_model.stats.get("loaded_tokens", 0) == 0
    assert serve(tmp_path, first_questions(), local_cache=False).stats["loaded_tokens"] > 0


def test_prompts_with_media_or_prompt_logprobs_neither_load_nor_save(tmp_path):
    serve(tmp_path, prompts(1), local_cache=False)
    media, logprobs = prompts(1), prompts(1)
    for r in media:
        r.mm_features = ["an image at tokens 3-9"]  # same token ids, other pixels
    for r in logprobs:
        r.skip_reading_prefix_cache = True
    e = serve(tmp_path, media, local_cache=False)
    assert e.stats.get("loaded_tokens", 0) == 0 and e.stats.get("saved_tokens", 0) == 0
    e = serve(tmp_path, logprobs, local_cache=False)
    assert e.stats.get("loaded_tokens", 0) == 0


# ---- the pieces ------------------------------------------------------------------------------

def test_layer_index():
    assert layer_index("model.layers.17.self_attn.attn") == 17
    assert layer_index("3") == 3
    for bad in ("model.layers.self_attn", "model.layers.1.experts.2.attn"):
        with pytest.raises(ValueError):
            layer_index(bad)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kv_views_match_each_layout(layout):
    caches, views = allocate(layout, 3, 10, 4, 2, 8, "cpu")
    names, k, v = kv_views(dict(reversed(list(caches.items()))), head_dim=8, num_blocks=10)
    assert names == list(caches)
    for i, (wk, wv) in enumerate(views):
        if layout == "MLA":  # a latent per token: one head of heads * dim
            assert k[i].shape == (10, 4, 1, 16) and v is None and k[i].data_ptr() == wk.data_ptr()
            continue
        assert k[i].shape == (10, 4, 2, 8)
        assert (k[i].data_ptr(), k[i].stride()) == (wk.data_ptr(), wk.stride())
        assert (v[i].data_ptr(), v[i].stride()) == (wv.data_ptr(), wv.stride())
    layout_ = tutti.KvLayout.from_views(k, v)
    assert layout_.block_stride == k[0].stride(0) * 2 and layout_.token_stride == k[0].stride(1) * 2
    assert layout_.flags == (tutti.KV_K_ONLY if layout == "MLA" else 0)


def test_unknown_layouts_are_refused_by_name():
    k, v = split_kv(torch.zeros(10, 4, 576))  # MLA: K only
    assert k.shape == (10, 4, 1, 576) and v is None
    with pytest.raises(ValueError, match="is MLA, another layer is not"):
        kv_views({"a.0.attn": torch.zeros(2, 10, 4, 2, 8), "a.1.attn": torch.zeros(10, 4, 576)})
    with pytest.raises(ValueError, match="unrecognized"):
        split_kv(torch.zeros(3, 3, 4, 2, 8))
    with pytest.raises(ValueError, match="both layer 1"):
        kv_views({"a.1.attn": torch.zeros(2, 4, 4, 2, 8), "b.1.attn": torch.zeros(2, 4, 4, 2, 8)})


def test_views_are_checked_against_their_storage():
    t = torch.zeros(2, 4, 4, 2, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="every view must match"):
        tutti.KvLayout.from_views([t[0]], [t[1, :, :2]])
    with pytest.raises(ValueError, match="head_dim is not contiguous"):
        tutti.KvLayout.from_views([t[0].transpose(2, 3).transpose(2, 3)[..., ::2]], [t[1][..., ::2]])


def test_ranks_share_a_pool_or_have_one_each():
    config = vllm_config(16, {"pool": "/tmp/kv.pool"}, 128)
    options, _ = _settings(config, rank=1, world=2)
    assert options["pool"] == "/tmp/kv.pool" and (options["rank"], options["ranks"]) == (1, 2)
    config.parallel_config = SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1)
    assert _settings(config, rank=1, world=2)[0]["lookup_socket"] == "/tmp/kv.pool.rank1.sock"
    config = vllm_config(16, {"pool": "/tmp/kv{rank}.pool"}, 128)
    options, _ = _settings(config, rank=1, world=2)
    assert options["pool"] == "/tmp/kv1.pool" and options["namespace"].endswith("rank1/2")
    assert "ranks" not in options
    assert options["chunk_tokens"] == 256 and options["partial_tokens"] == 16  # tails in whole blocks
    assert "lookup_socket" not in options  # data parallelism: each engine looks up in-process
    config.parallel_config = SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1)
    assert _settings(config, rank=1, world=2)[0]["lookup_socket"] == "/tmp/kv1.pool.sock"
    config.kv_transfer_config.kv_connector_extra_config["lookup_socket"] = "/run/tutti/lookup.sock"
    with pytest.raises(ValueError, match="rank"):
        _settings(config, rank=1, world=2)
    config.kv_transfer_config.kv_connector_extra_config["lookup_socket"] = "/run/tutti/lookup{rank}.sock"
    assert _settings(config, rank=1, world=2)[0]["lookup_socket"] == "/run/tutti/lookup1.sock"


@pytest.mark.parametrize("load_async", [False, True])
def test_a_lease_ends_once_its_load_ran(tmp_path, load_async):
    """The scheduler pins a hit until the worker has loaded it, not until the request ends: a
    request still decoding does not keep its prefix from being evicted."""
    doc = prompts(1, docs=1, per_doc=1, doc_len=64, tail=(3, 3))[0]
    opts = dict(capacity="1300K", chunk_tokens=16, local_cache=False, load_async=load_async)  # ~10 slots
    serve(tmp_path, [doc], **opts)
    e = Engine(tmp_path, **opts)
    try:
        rt = e.worker._rt
        hit = rt.lookup(conn_ints(doc.prompt_token_ids))
        assert hit == 64
        req = Request("long", list(doc.prompt_token_ids), max_tokens=40)
        e.add(req)
        # Until the first decoded token; steps that only wait for the async load sleep (on a busy
        # machine 200 of them, unbounded by time, could pass before the load landed).
        deadline = time.monotonic() + 60
        while req.num_computed_tokens <= len(req.prompt_token_ids):
            assert time.monotonic() < deadline, "the request made no progress"
            if not e.step():
                time.sleep(0.001)
        assert e.stats["loaded_tokens"] == 64 and req.status == "RUNNING"
        e.step()  # the next step's metadata: the lease is released
        assert "long" not in e.sched._queries
        # Other prompts fill the pool while the request still decodes: its prefix may go.
        others = prompts(7, docs=6, per_doc=1, doc_len=64)
        for other in others:
            table = list(range(60, 60 + 17))
            with rt.batch("store") as b:
                b.add(conn_ints(other.prompt_token_ids[:64]), conn_ints(table))
                b.submit()
                b.wait()
        assert rt.lookup(conn_ints(doc.prompt_token_ids)) < hit, "the loaded prefix stayed pinned"
        assert req.status == "RUNNING"
        e.run()
        assert req.status == "FINISHED" and e.wrong_positions == 0
    finally:
        e.close()
    assert e.stats["leases_released_after_load"] == 1


def test_kv_events_reach_vllms_publisher(tmp_path):
    """With vLLM's KV events on, every chunk tutti stored is published as a BlockStored whose
    tokens are the chunk of a prompt that was served (its parent the chunk before it), and every
    chunk evicted as a BlockRemoved of a block published before."""
    from tutti.vllm.connector import EVENT_MEDIUM, BlockRemoved, BlockStored
    reqs = prompts(1, docs=6, per_doc=2, doc_len=60)
    e = serve(tmp_path, reqs, publish_events=True, capacity="1300K", chunk_tokens=16)  # ~10 slots
    by_key, present, removed = {}, set(), 0
    for ev in e.published:  # in the order vLLM would publish them
        (key,) = ev.block_hashes
        assert ev.medium == EVENT_MEDIUM and 0 <= key < 1 << 64  # vLLM's msgpack encoder takes 64-bit ints
        if isinstance(ev, BlockRemoved):
            assert key in present, "a chunk removed that was not there"
            present.discard(key)
            removed += 1
            continue
        assert isinstance(ev, BlockStored) and key not in present, "a chunk stored twice"
        assert ev.block_size == len(ev.token_ids) <= 16
        head = list(by_key[ev.parent_block_hash]) if ev.parent_block_hash is not None else []
        by_key[key] = head + ev.token_ids  # the prompt up to this chunk's end
        assert any(r.prompt_token_ids[:len(by_key[key])] == by_key[key] for r in reqs), "tokens of no prompt"
        present.add(key)
    assert removed and present, "the pool was meant to evict"


def test_kv_events_are_off_without_vllms_kv_events(tmp_path):
    e = serve(tmp_path, prompts(1, docs=1))
    assert e.published == []


# Two tensor-parallel ranks of one engine, each with its shard of a 37-token prompt's KV (rank
# r's heads hold other values than rank 0's); rank 1 stored fewer tokens of it.
TP = SimpleNamespace(bs=4, layers=3, heads=2, dim=8, blocks=64, tokens=list(range(100, 137)), stored={0: 36, 1: 24},
                     table=list(range(1, 11)), new_blocks=list(range(20, 30)))


def _tp_config(path, **extra):
    config = vllm_config(TP.bs, {"pool": str(path), "capacity": "16M", **extra}, TP.dim)
    config.parallel_config = SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1,
                                             data_parallel_rank=0, data_parallel_size=1)
    return config


def _tp_shard(rank, layer, side, n):
    h = torch.tensor(chain(TP.tokens), dtype=torch.long)
    return expected_kv(h[:n], layer, side, TP.heads, TP.dim) + 1021 * rank


def _tp_where(blocks):
    """The (block, offset) of each of the prompt's tokens in `blocks`."""
    pos = torch.arange(len(TP.tokens))
    return torch.tensor(blocks)[pos // TP.bs], pos % TP.bs


def _tp_worker_stores(conn, config, rank):
    """Rank `rank`'s worker: registers its KV cache and stores its shard, then clears the blocks."""
    w = TuttiConnector(config, conn.KVConnectorRole.WORKER, SimpleNamespace(num_blocks=TP.blocks))
    caches, views = allocate("2BNHD", TP.layers, TP.blocks, TP.bs, TP.heads, TP.dim, "cpu")
    w.register_kv_caches(caches)
    assert w._rt is not None
    for layer in range(TP.layers):
        for side in range(2):
            views[layer][side][_tp_where(TP.table)] = _tp_shard(rank, layer, side, len(TP.tokens))
    with w._rt.batch("store") as b:
        b.add(conn._ints(TP.tokens), conn._ints(TP.table), token_end=TP.stored[rank])
        b.submit()
        b.wait()
    for layer in range(TP.layers):
        for side in range(2):
            views[layer][side].zero_()
    return w, views


def _tp_step(w, md):
    """A step of rank `w` over the scheduler's metadata: its loads (an asynchronous one until
    get_finished reports it), a save per layer where the metadata has one; the blocks it
    reports it could not load."""
    w.bind_connector_metadata(md)
    w.start_load_kv(SimpleNamespace(attn_metadata={}))
    for layer in range(TP.layers):
        w.wait_for_layer_load(f"model.layers.{layer}.self_attn.attn")
        w.save_kv_layer(f"model.layers.{layer}.self_attn.attn", None, None)
    w.wait_for_save()
    deadline = time.monotonic() + 60
    while any(s.is_async for s in md.loads) and "r" not in (w.get_finished(set())[1] or ()):
        assert time.monotonic() < deadline, "the asynchronous load never finished"
        time.sleep(0.01)
    invalid = w.get_block_ids_with_load_errors()
    w.clear_connector_metadata()
    return invalid


def _tp_worker_loads(w, views, md, rank, hit):
    """Runs the scheduler's metadata on rank `rank`'s worker; '' if it loaded its own bytes."""
    if _tp_step(w, md):
        return f"rank {rank}: load errors"
    for layer in range(TP.layers):
        for side in range(2):
            got = views[layer][side][_tp_where(TP.new_blocks)]
            if not torch.equal(got[:hit], _tp_shard(rank, layer, side, hit)):
                return f"rank {rank} layer {layer}: other bytes than its own"
            if got[hit:].any():
                return f"rank {rank} layer {layer}: rows past the hit were written"
    return ""


def _tp_schedule(conn, config, hit, load_async=True, save=False):
    """The scheduler's side: the hit of both ranks, and the metadata that loads it (and, with
    `save`, computes and saves the rest of the prompt in the same step)."""
    sched = TuttiConnector(config, conn.KVConnectorRole.SCHEDULER, SimpleNamespace(num_blocks=TP.blocks))
    req = Request("r", TP.tokens)
    assert sched.get_num_new_matched_tokens(req, 0) == (hit, load_async)  # the smaller of the ranks' hits
    sched.update_state_after_alloc(req, KVCacheBlocks(TP.new_blocks), hit)
    new = [SimpleNamespace(req_id="r", prompt_token_ids=TP.tokens, block_ids=(TP.new_blocks,), num_computed_tokens=hit)]
    so = SimpleNamespace(finished_req_ids=set(), scheduled_new_reqs=new if save else [],
                         num_scheduled_tokens={"r": len(TP.tokens) - hit} if save else {},
                         scheduled_cached_reqs=SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                                                               resumed_req_ids=set()))
    md = sched.build_connector_meta(so)
    assert bool(md.saves) == save
    return sched, req, md


@pytest.mark.parametrize("pool", ["kv.pool", "kv{rank}.pool"])
def test_tensor_parallel_ranks_are_asked_through_their_sockets(tmp_path, monkeypatch, pool):
    """Two ranks of one engine, sharing one pool or with one each: the scheduler asks both
    through their lookup sockets, takes the smaller hit, and each rank loads its own bytes. A
    rank that went away makes the lookup a miss, not an error."""
    from tutti.vllm import connector as conn
    config = _tp_config(tmp_path / pool)
    socks = [tmp_path / (f"kv.pool.rank{r}.sock" if pool == "kv.pool" else f"kv{r}.pool.sock") for r in range(2)]
    workers = []
    for rank in range(2):
        monkeypatch.setattr(conn, "_parallel_rank", lambda cfg, worker, r=rank: (r if worker else 0, 2))
        workers.append(_tp_worker_stores(conn, config, rank))
    assert socks[0].exists() and socks[1].exists()

    monkeypatch.setattr(conn, "_parallel_rank", lambda cfg, worker: (0, 2))
    sched, req, md = _tp_schedule(conn, config, 24)
    both = conn._Ranks([str(s) for s in socks], 5000, parallel=True)
    lease = both.lookup_lease(conn._ints(TP.tokens), b"", 0)  # asked at once: the same hit
    assert lease.tokens == 24 and len(lease.held) == 2
    lease.close()
    both.close()
    for rank, (w, views) in enumerate(workers):
        assert _tp_worker_loads(w, views, md, rank, 24) == ""
    sched.request_finished(req, TP.new_blocks)

    workers[1][0].shutdown()  # rank 1 goes away: its socket with it
    assert sched.get_num_new_matched_tokens(Request("r2", TP.tokens), 0) == (0, False)
    sched.shutdown()
    workers[0][0].shutdown()


def _tp_rank_process(rank, pool, extra, store, orders, results):
    """A rank's worker in a process of its own, as vLLM runs them: it stores its shard, then
    runs the steps the scheduler's metadata (pickled, as vLLM sends it) asks for. With `store`
    (a file), the ranks form a gloo process group, which stands for vLLM's TP CPU group."""
    from tutti.vllm import connector as conn
    conn._parallel_rank = lambda cfg, worker: (rank if worker else 0, 2)
    try:
        if store:
            torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
            conn._tp_cpu_group = lambda: torch.distributed.group.WORLD
        w, views = _tp_worker_stores(conn, _tp_config(pool, **extra), rank)
        results.put((rank, "stored"))
        while True:
            order = orders.get()
            if order is None:  # the scheduler is done with its leases
                break
            md, hit, check = order
            if check:
                results.put((rank, _tp_worker_loads(w, views, md, rank, hit) or "loaded"))
            else:
                invalid = _tp_step(w, md)
                results.put((rank, (sorted(invalid), w._stats.get("saves_dropped", 0),
                                    w._stats.get("saved_tokens", 0))))
        w.shutdown()
    except Exception as e:  # reported to the test, which fails with it
        results.put((rank, f"rank {rank}: {type(e).__name__}: {e}"))


class _TpProcesses:
    """Two rank processes on one pool, started together (one creates the pool, the other
    waits), each owning its share."""

    def __init__(self, tmp_path, extra, group):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.pool = tmp_path / "kv.pool"
        store = str(tmp_path / "gloo.store") if group else ""
        self.results = ctx.Queue()
        self.orders = [ctx.Queue() for _ in range(2)]
        self.procs = [ctx.Process(target=_tp_rank_process, args=(r, str(self.pool), extra, store, self.orders[r],
                                                                 self.results)) for r in range(2)]
        for p in self.procs:
            p.start()

    def both(self, order=None):
        """Each rank's answer to `order` (or to starting up)."""
        if order is not None:
            for q in self.orders:
                q.put(order)
        return [a for _, a in sorted(self.results.get(timeout=120) for _ in range(2))]

    def end(self):
        for q in self.orders:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        return [p.exitcode for p in self.procs]


@pytest.mark.parametrize("load_async", [True, False])
def test_tensor_parallel_ranks_in_processes_share_one_pool(tmp_path, monkeypatch, load_async):
    """vLLM's process layout: the scheduler in the test's process, two worker processes on one
    pool; each loads its own shard back from the pool they share, asynchronously (the default
    with more than one rank) or layer by layer with the ranks sharing their failures."""
    from tutti.vllm import connector as conn
    extra = {} if load_async else {"load_async": False}
    ranks = _TpProcesses(tmp_path, extra, group=not load_async)
    try:
        assert ranks.both() == ["stored", "stored"]
        monkeypatch.setattr(conn, "_parallel_rank", lambda cfg, worker: (0, 2))
        sched, req, md = _tp_schedule(conn, _tp_config(ranks.pool, **extra), 24, load_async)
        assert ranks.both((md, 24, True)) == ["loaded", "loaded"]
        sched.request_finished(req, TP.new_blocks)
        sched.shutdown()
    finally:
        exits = ranks.end()
    assert exits == [0, 0]


def test_a_load_failed_on_one_tensor_parallel_rank_stops_every_ranks_saves(tmp_path, monkeypatch):
    """Layer by layer under tensor parallelism: rank 1's chunk fails its checksum, rank 0's
    loads. Both computed the step over rank 1's missing KV (vLLM all-reduces the attention), so
    rank 0 must not commit its save either: both report rank 1's blocks, both drop the save."""
    from tutti.vllm import connector as conn
    ranks = _TpProcesses(tmp_path, {"load_async": False}, group=True)
    try:
        assert ranks.both() == ["stored", "stored"]
        data, slot_bytes = pool_slots(ranks.pool)
        slots = (ranks.pool.stat().st_size - data) // slot_bytes
        damage(ranks.pool, range(slots // 2, slots), "layer 1")  # rank 1's share
        monkeypatch.setattr(conn, "_parallel_rank", lambda cfg, worker: (0, 2))
        sched, req, md = _tp_schedule(conn, _tp_config(ranks.pool, load_async=False), 24, False, save=True)
        (inv0, dropped0, saved0), (inv1, dropped1, saved1) = ranks.both((md, 24, False))
        assert inv1 and inv0 == inv1, (inv0, inv1)  # rank 0 reports rank 1's failure too
        assert (dropped0, saved0) == (1, 0) and (dropped1, saved1) == (1, 0)
        sched.request_finished(req, TP.new_blocks)
        sched.shutdown()
    finally:
        exits = ranks.end()
    assert exits == [0, 0]


def test_pipeline_parallel_loads_must_be_asynchronous():
    from tutti.vllm import connector as conn
    config = _tp_config("unused.pool", load_async=False)
    config.parallel_config.pipeline_parallel_size = 2
    with pytest.raises(ValueError, match="pipeline parallelism"):
        conn._async_loads({"load_async": False}, config)
    assert conn._async_loads({"load_async": "auto"}, config)
    config.parallel_config.pipeline_parallel_size, config.parallel_config.tensor_parallel_size = 1, 1
    assert not conn._async_loads({"load_async": "auto"}, config)
