# SPDX-License-Identifier: Apache-2.0
"""TuttiHiCacheStorage driven as SGLang's HiCache controller drives an L3 backend: built by its
dynamic factory (module path, class name, (storage_config, {})), handed the host KV pool, then
batch_exists / batch_set_v1 / batch_get_v1 with page keys chained as SGLang chains them, over
real pools and host pools in each of SGLang's layouts. Every page loaded is compared with the
page stored, read back through index arithmetic of its own (not the backend's views).

SGLang is not installed here: its base class and config are tutti.sglang's stand-ins, and the
host pool is a stand-in with SGLang's kv_buffer shapes (see tutti/sglang/hicache.py)."""
import hashlib
import importlib
import struct
import threading
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

import tutti  # noqa: E402
from fixture import damage  # noqa: E402
from tutti.sglang.hicache import HiCacheStorageConfig  # noqa: E402

MHA = ["layer_first", "page_first", "page_first_direct", "page_head"]
MLA = ["layer_first", "page_first", "page_first_direct"]
LAYERS, HEADS, DIM, LATENT, PAGE = 3, 2, 16, 24, 8


class HostPool:
    """SGLang's host KV pool as a backend sees it: kv_buffer in `layout`, page_size."""

    def __init__(self, layout, mla=False, pages=12, seed=None):
        self.layout, self.page_size, self.mla = layout, PAGE, mla
        L, P, H, D, n = LAYERS, PAGE, HEADS, DIM, pages * PAGE
        shape = ({"layer_first": (L, n, 1, LATENT), "page_first": (n, L, 1, LATENT),
                  "page_first_direct": (pages, L, P, 1, LATENT)} if mla else
                 {"layer_first": (2, L, n, H, D), "page_first": (2, n, L, H, D),
                  "page_first_direct": (2, pages, L, P, H, D), "page_head": (2, pages, H, P, L, D)})[layout]
        if seed is None:
            self.kv_buffer = torch.zeros(shape, dtype=torch.bfloat16)
        else:
            g = torch.Generator().manual_seed(seed)
            self.kv_buffer = torch.randn(shape, generator=g).to(torch.bfloat16)
        self.dtype = self.kv_buffer.dtype

    def rows(self, p):
        """Page p's rows as [K (and V), layers, page_size, heads, dim]."""
        b, P = self.kv_buffer, PAGE
        if self.mla:
            return {"layer_first": lambda: b[:, p * P:(p + 1) * P],
                    "page_first": lambda: b[p * P:(p + 1) * P].transpose(0, 1),
                    "page_first_direct": lambda: b[p]}[self.layout]().unsqueeze(0)
        return {"layer_first": lambda: b[:, :, p * P:(p + 1) * P],
                "page_first": lambda: b[:, p * P:(p + 1) * P].transpose(1, 2),
                "page_first_direct": lambda: b[:, p],
                "page_head": lambda: b[:, p].permute(0, 3, 2, 1, 4)}[self.layout]()


def page_keys(tokens, prior=""):
    """SGLang's page keys: SHA-256 of the previous key's digest and the page's tokens as
    little-endian uint32, in hex, one per whole page."""
    keys, h = [], bytes.fromhex(prior)
    for i in range(0, len(tokens) - len(tokens) % PAGE, PAGE):
        h = hashlib.sha256(h + struct.pack(f"<{PAGE}I", *tokens[i:i + PAGE])).digest()
        keys.append(h.hex())
    return keys


def prompt(seed, pages):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 32000, (pages * PAGE,), generator=g).tolist()


def indices(pages):
    """host_indices of these host pool pages, as SGLang's controller passes them."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE, dtype=torch.int64) for p in pages]) if pages else \
        torch.empty(0, dtype=torch.int64)


def config(tmp_path, mla=False, tp_rank=0, tp_size=1, **extra):
    ec = {"backend_name": "tutti", "module_path": "tutti.sglang", "class_name": "TuttiHiCacheStorage",
          "interface_v1": 1, "prefetch_threshold": 64, "pool": str(tmp_path / "kv.pool"), "capacity": "64M"}
    ec.update(extra)
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
                                is_page_first_layout=False, model_name="meta-llama/Llama-3.1-8B",
                                extra_config={k: v for k, v in ec.items() if v is not None})


def attach(cfg, host):
    """What SGLang's StorageBackendFactory does for --hicache-storage-backend dynamic, then the
    controller's register_mem_pool_host."""
    ec = cfg.extra_config
    cls = getattr(importlib.import_module(ec["module_path"]), ec["class_name"])
    backend = cls(cfg, {})
    backend.register_mem_pool_host(host)
    return backend


def assert_pages(got_pool, got_pages, want_pool, want_pages):
    for g, w in zip(got_pages, want_pages):
        assert torch.equal(got_pool.rows(g), want_pool.rows(w)), f"host page {g} differs from stored page {w}"


@pytest.mark.parametrize("mla,src,dst", [(False, a, b) for a, b in zip(MHA, MHA[1:] + MHA[:1])] +
                         [(False, "page_first", "page_first")] +
                         [(True, a, b) for a, b in zip(MLA, MLA[1:] + MLA[:1])])
def test_pages_stored_from_one_layout_load_into_another(tmp_path, mla, src, dst):
    """An engine stores pages from its host pool; a restarted one, with another host layout,
    finds them and loads them into other host pages, every row as stored."""
    keys = page_keys(prompt(1, 5))
    a = HostPool(src, mla, seed=7)
    first = attach(config(tmp_path, mla), a)
    assert first.batch_exists(keys) == 0
    assert first.batch_set_v1(keys, indices([3, 7, 1, 9, 4])) == [True] * 5
    assert first.batch_exists(keys) == 5
    first.close()

    b = HostPool(dst, mla)
    second = attach(config(tmp_path, mla), b)
    later = page_keys(prompt(1, 5) + prompt(2, 2))
    assert later[:5] == keys and second.batch_exists(later) == 5  # the prefix, not the new pages
    assert second.batch_get_v1(keys, indices([0, 2, 5, 6, 8])) == [True] * 5
    assert_pages(b, [0, 2, 5, 6, 8], a, [3, 7, 1, 9, 4])
    for untouched in (1, 3, 4, 7, 9, 10, 11):
        assert not b.rows(untouched).any(), f"host page {untouched} was written"
    assert second.batch_set_v1(keys[:2], indices([0, 2])) == [True, True]  # already stored: fine
    second.close()


def test_exists_counts_leading_pages_and_a_missing_page_loads_false(tmp_path):
    keys = page_keys(prompt(3, 4))
    a = HostPool("page_first", seed=3)
    s = attach(config(tmp_path), a)
    assert s.batch_set_v1([keys[0], keys[1], keys[3]], indices([0, 1, 3])) == [True] * 3
    assert s.batch_exists(keys) == 2 and not s.exists(keys[2]) and s.exists(keys[3])
    b = HostPool("page_first")
    s.register_mem_pool_host(b)  # SGLang registers its pool once; again means a new pool
    assert s.batch_get_v1(keys, indices([4, 5, 6, 7])) == [True, True, False, True]
    assert_pages(b, [4, 5, 7], a, [0, 1, 3])
    assert s.batch_exists([]) == 0 and s.batch_get_v1([], indices([])) == []
    s.close()


def test_pages_that_fail_their_checksum_load_false_never_wrong(tmp_path):
    keys = page_keys(prompt(4, 6))
    a = HostPool("layer_first", seed=4)
    s = attach(config(tmp_path), a)
    assert s.batch_set_v1(keys, indices(range(6))) == [True] * 6
    s.close()
    damage(tmp_path / "kv.pool", range(0, 64, 2), "layer 1")  # every other slot
    b = HostPool("layer_first")
    s = attach(config(tmp_path), b)
    got = s.batch_get_v1(keys, indices(range(6, 12)))
    assert got.count(False) >= 2 and got.count(True) >= 2, got
    assert_pages(b, [6 + i for i, ok in enumerate(got) if ok], a, [i for i, ok in enumerate(got) if ok])
    # tutti forgets a page once a load meets its damage: it is a miss from then on
    assert [s.exists(k) for k in keys] == got
    s.close()


def test_ranks_share_one_pool_each_with_its_own_shard(tmp_path):
    """Tensor parallelism: each rank's host pool holds its heads of the same pages, under the
    same keys; each rank loads its own shard back."""
    keys = page_keys(prompt(5, 3))
    shards = [HostPool("page_first", seed=10 + r) for r in range(2)]
    ranks = [attach(config(tmp_path, tp_rank=r, tp_size=2), shards[r]) for r in range(2)]
    assert ranks[0].batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    assert ranks[1].batch_exists(keys) == 0  # rank 1 has not stored its shard yet
    assert ranks[1].batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    back = [HostPool("page_first") for _ in range(2)]
    for r in range(2):
        ranks[r].register_mem_pool_host(back[r])
        assert ranks[r].batch_get_v1(keys, indices([5, 6, 7])) == [True] * 3
        assert_pages(back[r], [5, 6, 7], shards[r], [0, 1, 2])
    for r in ranks:
        r.close()


def test_prefetch_and_backup_threads_at_once(tmp_path):
    """SGLang's prefetch thread loads while its backup thread stores: both land whole."""
    a = HostPool("page_first_direct", pages=24, seed=6)
    s = attach(config(tmp_path), a)
    old, new = page_keys(prompt(6, 8)), page_keys(prompt(7, 8))
    assert s.batch_set_v1(old, indices(range(8))) == [True] * 8
    out = {}
    threads = [threading.Thread(target=lambda: out.setdefault("set", s.batch_set_v1(new, indices(range(8, 16))))),
               threading.Thread(target=lambda: out.setdefault("get", s.batch_get_v1(old, indices(range(16, 24)))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"set": [True] * 8, "get": [True] * 8}
    assert_pages(a, range(16, 24), a, range(8))
    assert s.batch_exists(new) == 8
    s.close()


@pytest.mark.parametrize("ttl_ms", [60_000, 50])
def test_pages_found_stay_pinned_until_loaded(tmp_path, ttl_ms):
    """What batch_exists found is not evicted by the stores that follow, until batch_get_v1
    has loaded it or lease_ttl_ms have passed; then it is evictable again."""
    a = HostPool("page_first", pages=64, seed=9)
    s = attach(config(tmp_path, capacity="3M", lease_ttl_ms=ttl_ms), a)
    slots = s.stats()["slots_total"]
    assert 64 < slots < 96  # the premise: 32 old and 64 new pages do not both fit
    old, new, newer = (page_keys(prompt(seed, n)) for seed, n in ((10, 32), (11, 64), (12, 64)))
    assert s.batch_set_v1(old, indices(range(32))) == [True] * 32
    assert s.batch_exists(old) == 32
    if ttl_ms < 1000:
        time.sleep(3 * ttl_ms / 1000)
        s.batch_set_v1(new, indices(range(64)))
        assert sum(s.exists(k) for k in old) < 32  # the pins expired: evicted for room
        s.close()
        return
    assert s.batch_set_v1(new, indices(range(64))).count(True) == slots - 32  # no room past the pins
    assert all(s.exists(k) for k in old)
    assert s.batch_get_v1(old, indices(range(32, 64))) == [True] * 32  # stores only read `a`
    assert_pages(a, range(32, 64), a, range(32))
    s.batch_set_v1(newer, indices(range(64)))
    assert sum(s.exists(k) for k in old) < 32  # loaded, so unpinned: evicted for room
    s.close()


def test_a_page_found_twice_stays_pinned_until_loaded_twice(tmp_path):
    """Two prefetches of one prefix (two requests): the first one's load must not unpin what
    the second one's batch_exists found and still has to load."""
    a = HostPool("page_first", pages=64, seed=9)
    s = attach(config(tmp_path, capacity="3M"), a)
    slots = s.stats()["slots_total"]
    old, new, newer = (page_keys(prompt(seed, n)) for seed, n in ((10, 32), (11, 64), (12, 64)))
    assert s.batch_set_v1(old, indices(range(32))) == [True] * 32
    assert s.batch_exists(old) == 32 and s.batch_exists(old) == 32
    assert s.batch_get_v1(old, indices(range(32, 64))) == [True] * 32  # the first request's
    assert s.batch_set_v1(new, indices(range(64))).count(True) == slots - 32  # still no room past the pins
    assert s.batch_get_v1(old, indices(range(32, 64))) == [True] * 32  # the second request's
    assert_pages(a, range(32, 64), a, range(32))
    s.batch_set_v1(newer, indices(range(64)))
    assert sum(s.exists(k) for k in old) < 32  # loaded twice, so unpinned: evicted for room
    s.close()


def test_storage_metrics_count_each_call_once(tmp_path):
    """--enable-storage-metrics: get_stats hands SGLang the pages and GB/s of each call since
    the last, then starts again; without it, None."""
    a = HostPool("page_first", seed=2)
    cfg = config(tmp_path)
    cfg.enable_storage_metrics = True
    s = attach(cfg, a)
    keys = page_keys(prompt(13, 4))
    assert s.batch_set_v1(keys, indices(range(4))) == [True] * 4
    assert s.batch_get_v1(keys[:3] + page_keys(prompt(14, 1)), indices(range(4, 8))) == [True] * 3 + [False]
    m = s.get_stats()
    assert (m.backup_pgs, m.prefetch_pgs) == ([4], [3])
    assert len(m.backup_bandwidth) == len(m.prefetch_bandwidth) == 1
    assert m.backup_bandwidth[0] > 0 and m.prefetch_bandwidth[0] > 0
    again = s.get_stats()
    assert (again.backup_pgs, again.prefetch_pgs, again.prefetch_bandwidth) == ([], [], [])
    s.close()
    plain = attach(config(tmp_path), a)
    assert plain.get_stats() is None
    plain.close()


def test_what_it_refuses(tmp_path):
    with pytest.raises(ValueError, match="interface_v1"):
        attach(config(tmp_path, interface_v1=None), HostPool("page_first"))
    with pytest.raises(ValueError, match="MLA model on 2 ranks"):
        attach(config(tmp_path, mla=True, tp_size=2), HostPool("page_first", mla=True))
    with pytest.raises(ValueError, match="lease_ttl_ms must be positive"):
        attach(config(tmp_path, lease_ttl_ms=0), HostPool("page_first"))
    with pytest.raises(ValueError, match="chunk_tokens 16 must be SGLang's page size 8"):
        attach(config(tmp_path, chunk_tokens=16), HostPool("page_first"))
    weird = HostPool("page_first")
    weird.layout = "page_first_kv_split"
    with pytest.raises(ValueError, match="not one of SGLang's"):
        attach(config(tmp_path), weird)
    s = attach(config(tmp_path), HostPool("page_first", seed=1))
    keys = page_keys(prompt(8, 2))
    with pytest.raises(ValueError, match="not whole pages"):
        s.batch_set_v1(keys, indices([0, 1]) + 1)
    with pytest.raises(ValueError, match="not whole pages"):
        s.batch_get_v1(keys, indices([1, 0]).flip(0))
    with pytest.raises(ValueError, match="16 host indices for 1 pages"):
        s.batch_get_v1(keys[:1], indices([0, 1]))
    # a page past the host pool's end: the call fails whole, without raising into SGLang's thread
    assert s.batch_get_v1(keys[:1], indices([12])) == [False]
    with pytest.raises(NotImplementedError, match="interface_v1"):
        s.get(keys[0])
    assert s.batch_exists(keys) == 0  # nothing was stored by the refused calls
    s.close()
