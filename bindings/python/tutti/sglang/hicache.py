# SPDX-License-Identifier: Apache-2.0
"""tutti as SGLang's HiCache storage backend: the tier below SGLang's host KV pool.

SGLang names each page (page_size tokens) by a key that stands for its whole prefix: the
SHA-256 of the previous page's key and the page's tokens, in hex. The backend stores a page as
one tutti chunk (chunk_tokens = page_size): the page's K and V rows of every layer, read from
and written to SGLang's host pool by address, whatever its layout (layer_first, page_first,
page_first_direct, page_head; MLA's K-only pools too). The chunk is filed under the key of a
one-chunk prompt whose salt is SGLang's page key, so a page is found exactly when SGLang's
chain says it is the same prefix, and tutti's checksums and commit records guard it as they
guard any chunk. The stored bytes do not depend on the host pool's layout: an engine restarted
with another --hicache-mem-layout finds its pages again.

SGLang calls batch_exists (how many leading pages are stored), batch_get_v1 (storage -> host
pool) and batch_set_v1 (host pool -> storage), each with up to 128 pages, from its prefetch
and backup threads; every call here is one tutti batch, safe to run concurrently, and the
blocking waits release the GIL.

Options: the tutti options (tutti.h: pool, capacity, backend, ...) in
--hicache-storage-backend-extra-config, next to SGLang's own keys (backend_name, module_path,
class_name, interface_v1, prefetch_threshold, ...). The pool defaults to $TUTTI_POOL or
"tutti.pool"; "{rank}" in its path gives each rank a pool of its own, otherwise the ranks of a
parallel engine share one pool, each with its own share (tutti's ranks/rank options).
"""
import array
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import tutti

try:  # SGLang's own base and config when SGLang is installed; the stand-ins otherwise
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo
    from sglang.srt.metrics.collector import StorageMetrics
    HAVE_SGLANG = True
except ImportError:
    from .standin import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo, StorageMetrics
    HAVE_SGLANG = False

log = logging.getLogger("tutti.sglang")

# The backend's own keys in the extra config, with their defaults.
BACKEND_KEYS = {"lease_ttl_ms": 30_000}

# Keys of the extra config that are SGLang's, not tutti options.
SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold",
               "prefetch_timeout_base", "prefetch_timeout_per_ki_token", "hicache_storage_pass_prefix_keys",
               "tp_lcm_size")


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _rank(config: HiCacheStorageConfig) -> Tuple[int, int, str]:
    """(rank, ranks, shard name): this process among the engine's processes that hold KV."""
    tp, tp_n = config.tp_rank, config.tp_size
    pp, pp_n = config.pp_rank, config.pp_size
    cp, cp_n = config.attn_cp_rank, config.attn_cp_size
    dp, dp_n = getattr(config, "dp_rank", 0), getattr(config, "dp_size", 1) or 1
    rank = ((dp * pp_n + pp) * cp_n + cp) * tp_n + tp
    return rank, dp_n * pp_n * cp_n * tp_n, f"tp{tp}/{tp_n}:pp{pp}/{pp_n}:cp{cp}/{cp_n}"


def options(config: HiCacheStorageConfig) -> Tuple[dict, dict]:
    """(tutti options of one rank, the backend's settings), from SGLang's storage config."""
    extra = dict(config.extra_config or {})
    settings = {k: extra.pop(k, v) for k, v in BACKEND_KEYS.items()}
    if int(settings["lease_ttl_ms"]) <= 0:
        raise ValueError(f"tutti: lease_ttl_ms must be positive, not {settings['lease_ttl_ms']!r}")
    if not _flag(extra.get("interface_v1", 0)):
        raise ValueError('tutti: SGLang must hand pages by host pool index: add "interface_v1": 1 to '
                         "--hicache-storage-backend-extra-config")
    rank, world, shard = _rank(config)
    if config.is_mla_model and world > 1:
        # SGLang writes a rank-replicated (MLA) cache from its first rank alone and reads it
        # from every rank; a tutti share is one rank's, so the others would always miss.
        raise ValueError(f"tutti: an MLA model on {world} ranks is not supported by the HiCache backend "
                         "(SGLang stores from rank 0 alone; tutti keeps each rank's pages apart)")
    opts = {k: v for k, v in extra.items() if k not in SGLANG_KEYS and v is not None}
    pool = str(opts.get("pool") or os.environ.get("TUTTI_POOL") or "tutti.pool")
    if "{rank}" in pool:
        pool = pool.replace("{rank}", str(rank))
    elif world > 1:
        opts["ranks"], opts["rank"] = world, rank
    opts["pool"] = pool
    # Another model or shard never matches; the host pool's layout does not change the bytes.
    opts.setdefault("namespace", f"sglang:{config.model_name or ''}:{shard}")
    return opts, settings


def host_views(host: Any, mla: bool) -> Tuple[list, Optional[list]]:
    """Per layer, K and V views [pages, page_size, heads, head_dim] of SGLang's host KV pool (V
    None for MLA: [pages, page_size, 1, latent]), in each of its layouts:

        MHA layer_first        [2, L, size, H, D]
            page_first         [2, size, L, H, D]
            page_first_direct  [2, pages, L, page_size, H, D]
            page_head          [2, pages, H, page_size, L, D]
        MLA layer_first        [L, size, 1, C]
            page_first         [size, L, 1, C]
            page_first_direct  [pages, L, page_size, 1, C]
    """
    buf, layout, P = getattr(host, "kv_buffer", None), getattr(host, "layout", None), int(host.page_size)
    if buf is None or isinstance(buf, (list, tuple)):
        raise ValueError("tutti: this host KV pool keeps K and V in buffers of their own (kv_buffer absent); "
                         "one kv_buffer tensor (MHA or MLA pools) is supported")
    shape = tuple(buf.shape)
    try:
        if not mla and layout == "layer_first" and buf.dim() == 5 and shape[0] == 2:
            n = shape[2] // P
            return ([buf[0, l, :n * P].view(n, P, *shape[3:]) for l in range(shape[1])],
                    [buf[1, l, :n * P].view(n, P, *shape[3:]) for l in range(shape[1])])
        if not mla and layout == "page_first" and buf.dim() == 5 and shape[0] == 2:
            n = shape[1] // P
            return ([buf[0, :n * P, l].view(n, P, *shape[3:]) for l in range(shape[2])],
                    [buf[1, :n * P, l].view(n, P, *shape[3:]) for l in range(shape[2])])
        if not mla and layout == "page_first_direct" and buf.dim() == 6 and shape[0] == 2 and shape[3] == P:
            return [buf[0, :, l] for l in range(shape[2])], [buf[1, :, l] for l in range(shape[2])]
        if not mla and layout == "page_head" and buf.dim() == 6 and shape[0] == 2 and shape[3] == P:
            return ([buf[0, :, :, :, l].transpose(1, 2) for l in range(shape[4])],
                    [buf[1, :, :, :, l].transpose(1, 2) for l in range(shape[4])])
        if mla and layout == "layer_first" and buf.dim() == 4:
            n = shape[1] // P
            return [buf[l, :n * P].view(n, P, 1, shape[3]) for l in range(shape[0])], None
        if mla and layout == "page_first" and buf.dim() == 4:
            n = shape[0] // P
            return [buf[:n * P, l].view(n, P, 1, shape[3]) for l in range(shape[1])], None
        if mla and layout == "page_first_direct" and buf.dim() == 5 and shape[2] == P:
            return [buf[:, l] for l in range(shape[1])], None
    except RuntimeError as e:  # a view torch cannot take: not the layout it claims
        raise ValueError(f"tutti: host KV pool {list(shape)} is not SGLang's {layout!r} layout: {e}") from e
    raise ValueError(f"tutti: host KV pool of shape {list(shape)} in layout {layout!r} (page size {P}) is not one "
                     "of SGLang's layer_first, page_first, page_first_direct or page_head (MHA) or layer_first, "
                     "page_first or page_first_direct (MLA)")


class TuttiHiCacheStorage(HiCacheStorage):
    """SGLang's HiCache L3 storage on a tutti pool (see the module's doc).

        --enable-hierarchical-cache --hicache-storage-backend dynamic
        --hicache-storage-backend-extra-config '{"backend_name": "tutti",
            "module_path": "tutti.sglang", "class_name": "TuttiHiCacheStorage",
            "interface_v1": 1, "pool": "/nvme/kv.pool", "capacity": "512G"}'
    """

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        self._options, settings = options(storage_config)
        self._ttl_ms = int(settings["lease_ttl_ms"])
        # key: its pins, oldest first, each (expiry, lease): one per batch_exists that found it
        # (the prefetch thread may ask again for a page another request is loading)
        self._pins: Dict[str, List[Tuple[float, tutti.Lease]]] = {}
        self._pins_lock = threading.Lock()
        self._mla = bool(storage_config.is_mla_model)
        # --enable-storage-metrics: pages and GB/s of each call, until get_stats takes them
        self._metrics = StorageMetrics() if storage_config.enable_storage_metrics else None
        self._metrics_lock = threading.Lock()
        self._page_bytes = 0
        self._rt: Optional[tutti.Runtime] = None
        self._page = 0
        self._zeros = array.array("i")
        tutti.log_to_python()

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Opens the pool for SGLang's host KV pool: a page is a chunk, a block of tutti's
        layout, addressed where SGLang's layout puts its rows."""
        super().register_mem_pool_host(mem_pool_host)
        page = int(mem_pool_host.page_size)
        chunk = int(self._options.get("chunk_tokens", page))
        if chunk != page:
            raise ValueError(f"tutti: chunk_tokens {chunk} must be SGLang's page size {page} (a page is a chunk)")
        k, v = host_views(mem_pool_host, self._mla)
        layout = tutti.KvLayout.from_views(k, v)
        self.close()  # a pool registered again: the runtime of the last one gives the pool up
        rt = tutti.Runtime(**{**self._options, "chunk_tokens": page, "partial_tokens": 0})
        try:
            rt.register_kv(layout)
        except Exception:
            rt.close()
            raise
        self._rt, self._page = rt, page
        self._page_bytes = sum(t[0].numel() * t.element_size() for t in k + (v or []))
        self._zeros = array.array("i", bytes(4 * page))
        log.info("tutti: HiCache storage on %s (%s backend), %d layers, pages of %d tokens, host layout %s",
                 self._options["pool"], rt.backend, len(k), page, getattr(mem_pool_host, "layout", "?"))

    def _runtime(self) -> tutti.Runtime:
        if self._rt is None:
            raise RuntimeError("tutti: register_mem_pool_host has not been called")
        return self._rt

    def _blocks(self, keys: List[str], host_indices: Any) -> List[int]:
        """The host pool page of each key: host_indices holds page_size indices per key, the
        page's tokens in order from a multiple of page_size (SGLang's host pool allocates whole
        pages); anything else is refused rather than moved to the wrong place."""
        P = self._page
        idx = host_indices.reshape(-1)
        if idx.numel() != len(keys) * P:
            raise ValueError(f"tutti: {idx.numel()} host indices for {len(keys)} pages of {P} tokens")
        if not keys:
            return []
        pages = idx.reshape(len(keys), P).cpu()
        first = pages[:, :1]
        step = pages - first
        if bool((first % P != 0).any()) or bool((step != step.new_tensor(range(P))).any()):
            raise ValueError("tutti: host indices are not whole pages (page_size indices from a multiple of "
                             "page_size, in order)")
        return [int(x) // P for x in first.view(-1).tolist()]

    def _move(self, op: str, keys: List[str], host_indices: Any) -> List[bool]:
        rt = self._runtime()
        blocks = self._blocks(keys, host_indices)
        if not keys:
            return []
        start = time.perf_counter()
        try:
            with rt.batch(op) as b:
                try:
                    b.add_many([tutti.Request(self._zeros, array.array("i", [blk]), 0, self._page, key.encode())
                                for key, blk in zip(keys, blocks)])
                    b.submit()
                except tutti.Error as e:  # never into SGLang's prefetch or backup thread, which would die
                    log.warning("tutti: %s of %d pages refused: %s", op, len(keys), e)
                    return [False] * len(keys)
                try:
                    b.wait()
                except tutti.Error as e:  # per page below: a page that failed is reported False
                    log.debug("tutti: %s of %d pages: %s", op, len(keys), e)
                done = [b.result(i).tokens == self._page for i in range(len(keys))]
        finally:
            if op == "load":  # the pins of the lookup this load answers, loaded or not
                self._unpin(keys)
        self._measured(op, done.count(True), time.perf_counter() - start)
        return done

    def _measured(self, op: str, pages: int, seconds: float) -> None:
        if self._metrics is None:
            return
        gbps = pages * self._page_bytes / max(seconds, 1e-9) / 1e9
        with self._metrics_lock:
            m = self._metrics
            (m.prefetch_pgs if op == "load" else m.backup_pgs).append(pages)
            (m.prefetch_bandwidth if op == "load" else m.backup_bandwidth).append(gbps)

    def get_stats(self) -> Optional[StorageMetrics]:
        """With --enable-storage-metrics, the pages and GB/s of each get and set since the last
        call (SGLang's histograms); None without."""
        if self._metrics is None:
            return None
        with self._metrics_lock:
            taken, self._metrics = self._metrics, StorageMetrics()
        return taken

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Loads each key's page into the host pool pages of host_indices; True where it landed
        whole and verified (a False page's rows in the host pool are not to be used)."""
        return self._move("load", keys, host_indices)

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Stores the host pool pages of host_indices under their keys; True where the page is
        durable and committed (or was already stored)."""
        return self._move("store", keys, host_indices)

    def exists(self, key: str) -> bool:
        return self._runtime().lookup(self._zeros, key.encode()) == self._page

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading keys are stored. SGLang asks before it prefetches them: the pages
        found stay pinned (never evicted) until batch_get_v1 loads them or lease_ttl_ms pass,
        so eviction in between cannot turn the hit into a miss."""
        rt, now = self._runtime(), time.monotonic()
        found = 0
        for key in keys:
            lease = rt.lookup_lease(self._zeros, key.encode(), self._ttl_ms)
            if lease.tokens != self._page:
                lease.close()
                break
            self._pin(key, lease, now + self._ttl_ms / 1000)
            found += 1
        expired = []
        with self._pins_lock:
            for key in [k for k, pins in self._pins.items() if pins[0][0] <= now]:
                pins = self._pins[key]
                while pins and pins[0][0] <= now:
                    expired.append(pins.pop(0)[1])
                if not pins:
                    del self._pins[key]
        for lease in expired:
            lease.close()
        return found

    def _pin(self, key: str, lease: tutti.Lease, expiry: float) -> None:
        with self._pins_lock:
            self._pins.setdefault(key, []).append((expiry, lease))

    def _unpin(self, keys: List[str], every: bool = False) -> None:
        """Ends the oldest pin of each key (every pin, with `every`)."""
        gone = []
        with self._pins_lock:
            for key in keys:
                pins = self._pins.get(key)
                if not pins:
                    continue
                gone.extend(lease for _, lease in (pins if every else pins[:1]))
                del pins[:len(pins) if every else 1]
                if not pins:
                    del self._pins[key]
        for lease in gone:
            lease.close()

    # SGLang's tensor-by-tensor interface, used without interface_v1 (which the constructor
    # requires): the pages move by host pool address instead.
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        raise NotImplementedError("tutti moves pages by host pool index: batch_get_v1 (interface_v1)")

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        raise NotImplementedError("tutti moves pages by host pool index: batch_get_v1 (interface_v1)")

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        raise NotImplementedError("tutti moves pages by host pool index: batch_set_v1 (interface_v1)")

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        raise NotImplementedError("tutti moves pages by host pool index: batch_set_v1 (interface_v1)")

    def clear(self) -> None:
        """SGLang's cache flush. The pool is kept: its pages are named by their whole prefix,
        so what it holds stays right for any later request; its capacity evicts the rest."""
        log.info("tutti: HiCache clear keeps the pool's pages (content-addressed, never stale)")

    def stats(self) -> dict:
        """tutti's counters for this rank's runtime (tutti_stats)."""
        return self._runtime().stats()

    def close(self) -> None:
        self._unpin(list(self._pins), every=True)
        if self._rt is not None:
            self._rt.close()
            self._rt = None
