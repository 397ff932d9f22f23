# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector: tutti behind vLLM's KV connector API (V1).

vLLM builds the class twice: in the engine core with role SCHEDULER (it decides how much of a
prompt tutti supplies) and in every worker with role WORKER (it moves the KV). Per step:

  scheduler  get_num_new_matched_tokens  lookup_lease: the cached prefix, pinned until the
                                          request ends, minus vLLM's own prefix-cache hit
             update_state_after_alloc     where the load goes (the request's block ids)
             build_connector_meta         the step's loads, and the whole chunks each prefill
                                          completes (saves), with its tail once it is done
  worker     start_load_kv                submits the step's loads (one batch) and its saves
                                          (a store by layer each)
             wait_for_layer_load(layer)   before the layer's attention: its KV is in place;
                                          later layers still load
             save_kv_layer(layer)         after the layer's attention: its blocks hold the
                                          step's KV, tutti writes them behind later layers
             wait_for_save                after the forward: the saves are committed
             get_block_ids_with_load_errors
                                          blocks whose chunk failed (checksum, I/O): vLLM
                                          recomputes them, and nothing computed over them
                                          is saved

tutti stores chunks of `chunk_tokens` (default 256: one large I/O per chunk and layer), and a
prompt's tail past its last whole chunk as a partial chunk in whole blocks (partial_tokens:
vLLM's block size). A load starts where vLLM's own prefix-cache hit ends, inside a chunk or not,
and ends where tutti's hit does; a hit of the whole prompt is reported one token short: vLLM
must compute at least the last token.

The scheduler's lookups reach the worker's runtime in the same process (vLLM with one GPU
runs both in its engine core; so does each engine of data parallelism). With tensor or
pipeline parallelism the workers are other processes: the ranks share one pool, each with its
share of the slots (tutti's ranks and rank options), or each has its own ("{rank}" in the pool
path); each rank answers lookups on a Unix socket (tutti's lookup_socket option; default: the
pool's path plus ".rank<r>.sock", or plus ".sock" for a pool of its own). The scheduler asks every rank of its engine and takes the smallest
hit, pinned on each rank until the request ends; a rank that does not answer (not up yet, or
gone) makes the lookup a miss.

Saves are synchronous by default: wait_for_save waits for the commit, so request_finished never
holds blocks. {"save_async": true} lets a step's saves run on behind the next steps: a request
that had saves keeps its blocks after it finishes until the worker reports them committed
(get_finished's finished_sending), and handle_preemptions waits for the saves of preempted
requests before vLLM reuses their blocks (a vLLM without that hook gets synchronous saves).

Loads ("load_async": "auto") are synchronous and layer by layer where the engine is one rank. A
rank whose load failed poisons what every rank computes in that step (tensor parallelism
all-reduces the attention; a pipeline stage hands its hidden states on), while the other ranks'
own loads went well: with more than one rank, loads are asynchronous by default (the request is
scheduled once every rank reported its load, failures included). "load_async": false keeps them
layer by layer under tensor parallelism alone: the ranks then exchange the blocks they failed to
load through vLLM's tensor-parallel group (CPU) in each step with loads, before any save of the
step commits. A pipeline stage cannot learn of another's failure within the step: with pipeline
parallelism, loads must be asynchronous. "load_async": true loads before a request is
scheduled on one rank too (get_finished reports it).
"""
import array
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import tutti
from .layout import kv_views, layer_index

try:  # vLLM's own base when vLLM is installed; the stand-ins otherwise (tests, no vLLM)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                   KVConnectorRole)
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
    except ImportError:
        from .standin import KVConnectorStats
    HAVE_VLLM = True
except ImportError:
    from .standin import KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole, KVConnectorStats
    HAVE_VLLM = False
try:
    from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVConnectorKVEvents
except ImportError:
    from .standin import BlockRemoved, BlockStored, KVConnectorKVEvents

try:
    import torch
except ImportError:
    torch = None

log = logging.getLogger("tutti.vllm")

# kv_connector_extra_config keys the connector reads itself; every other key is a tutti option
# (tutti.h: pool, capacity, backend, chunk_tokens, ...).
CONNECTOR_KEYS = {"load_async": "auto", "save_async": False, "lease_ttl_ms": 600_000, "lookup_timeout_ms": 5_000}
EVENT_MEDIUM = "tutti"  # the medium of the KV events the connector reports


@dataclass
class TokenRange:
    """Tokens [begin, end) of a request's prompt (token_ids: its first `end` tokens) in its
    blocks (block_ids: those that hold them)."""
    req_id: str
    token_ids: List[int]
    block_ids: List[int]
    begin: int
    end: int
    salt: bytes = b""


@dataclass
class LoadSpec(TokenRange):
    """Load the range into the blocks (before the request is scheduled when is_async)."""
    is_async: bool = False


@dataclass
class SaveSpec(TokenRange):
    """Store the range's whole chunks once the step has computed them."""


@dataclass
class TuttiConnectorMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)
    acked: int = 0  # reports of failed blocks the scheduler had seen when it planned these
    # Requests vLLM preempted in this step (their blocks may be reused by its forward); None:
    # not known (a vLLM without scheduler_output.preempted_req_ids), so every save counts.
    preempted_req_ids: Optional[Set[str]] = None


class TuttiConnectorStats(KVConnectorStats):
    """Counters since the last report, summed over workers by vLLM."""

    def __init__(self, data: Optional[dict] = None):
        super().__init__(data=dict(data or {}))

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: "KVConnectorStats") -> "TuttiConnectorStats":
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, int]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())


class TuttiKVEvents(KVConnectorKVEvents):
    """Chunks tutti stored and removed, from a worker to its scheduler, which publishes them
    with vLLM's own KV events (--kv-events-config) for a router. Only the first rank of an engine
    reports them (ranks hold shards of the same chunks, under keys of their own), so
    aggregating is keeping them all."""

    def __init__(self, events: Optional[list] = None):
        self._events = list(events or [])
        self._workers = 1

    def add_events(self, events: list) -> None:
        self._events.extend(events)

    def aggregate(self) -> "TuttiKVEvents":
        return self

    def increment_workers(self, count: int = 1) -> None:
        self._workers += count

    def get_all_events(self) -> list:
        return list(self._events)

    def get_number_of_workers(self) -> int:
        return self._workers

    def clear_events(self) -> None:
        self._events = []


def _hash64(key: Optional[int]) -> Optional[int]:
    """A tutti key as a vLLM block hash: vLLM's event encoder (msgpack) takes 64-bit ints; the
    low half of the 128-bit key is as well mixed as the whole."""
    return None if key is None else key & 0xFFFF_FFFF_FFFF_FFFF


def _block_stored(e: tutti.KvEvent) -> Any:
    fields = dict(block_hashes=[_hash64(e.key)], parent_block_hash=_hash64(e.parent), token_ids=e.tokens,
                  block_size=len(e.tokens), lora_id=None, medium=EVENT_MEDIUM)
    if "lora_name" in getattr(BlockStored, "__struct_fields__", ()):  # vLLM that names LoRAs in events
        fields["lora_name"] = None
    return BlockStored(**fields)


# Runtimes opened by workers of this process, by pool, for the scheduler side's lookups.
_runtimes: Dict[str, "_Shared"] = {}
_runtimes_lock = threading.Lock()


@dataclass
class _Shared:
    rt: tutti.Runtime
    chunk_tokens: int
    # Requests whose load the worker ran: the scheduler releases their leases (what a load
    # took is in vLLM's blocks; the pool may evict it now).
    loaded: Set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    scheduler_here: bool = False  # a scheduler of this process takes `loaded` (else nobody would)

    def note_loaded(self, rids: Set[str]) -> None:
        with self.lock:
            if self.scheduler_here:
                self.loaded |= rids

    def take_loaded(self) -> Set[str]:
        with self.lock:
            self.scheduler_here = True
            rids, self.loaded = self.loaded, set()
        return rids


def _settings(vllm_config: Any, rank: int = 0, world: int = 1) -> Tuple[dict, dict]:
    """(tutti options, connector settings) from kv_connector_extra_config and vLLM's config."""
    extra = dict(getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {})
    settings = {k: extra.pop(k, v) for k, v in CONNECTOR_KEYS.items()}
    options = {k: v for k, v in extra.items() if v is not None}
    options.setdefault("chunk_tokens", 256)
    options.setdefault("partial_tokens", vllm_config.cache_config.block_size)
    pool = str(options.get("pool") or os.environ.get("TUTTI_POOL") or "tutti.pool")
    shared = world > 1 and "{rank}" not in pool  # one pool, a share per rank (tutti's ranks option)
    if "{rank}" in pool:
        pool = pool.replace("{rank}", str(rank))
    elif world > 1:
        options["ranks"], options["rank"] = world, rank
    options["pool"] = pool
    sock = options.get("lookup_socket")
    if sock is not None:
        sock = str(sock)
        if "{rank}" in sock:
            sock = sock.replace("{rank}", str(rank))
        elif world > 1:
            raise ValueError(f"tutti: {world} ranks cannot share the lookup socket {sock!r}; put {{rank}} in it")
        options["lookup_socket"] = sock
    elif _ranks_per_engine(vllm_config) > 1:  # the scheduler is another process: it asks here
        options["lookup_socket"] = pool.split(",")[0] + (f".rank{rank}.sock" if shared else ".sock")
    if "namespace" not in options:  # chunk keys of another model, dtype or shard never match
        m = vllm_config.model_config
        options["namespace"] = (f"vllm:{getattr(m, 'model', '')}@{getattr(m, 'revision', None) or ''}:"
                                f"{getattr(m, 'dtype', '')}:{getattr(vllm_config.cache_config, 'cache_dtype', '')}:"
                                f"rank{rank}/{world}")
    return options, settings


def _flag(value: Any) -> bool:
    """A boolean setting given as a JSON bool or as a string ("true", "1", "on", ...)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _async_loads(settings: dict, vllm_config: Any) -> bool:
    """Whether loads run before their request is scheduled (module docstring: auto is
    synchronous for an engine of one rank alone)."""
    value = settings.get("load_async")
    pc = getattr(vllm_config, "parallel_config", None)
    if isinstance(value, str) and value.strip().lower() == "auto":
        return _ranks_per_engine(vllm_config) > 1
    if not _flag(value) and (getattr(pc, "pipeline_parallel_size", 1) or 1) > 1:
        raise ValueError("tutti: with pipeline parallelism loads must be asynchronous (load_async true or auto): "
                         "a stage cannot learn within the step that another stage's load failed")
    return _flag(value)


def _tp_cpu_group() -> Any:
    """vLLM's tensor-parallel CPU process group of this worker, or None (no vLLM, not up)."""
    try:
        from vllm.distributed.parallel_state import get_tp_group
        return get_tp_group().cpu_group
    except Exception:
        return None


def _async_saves(settings: dict) -> bool:
    """Whether saves outlive their step: asked for, and safe with this vLLM (its model runner
    calls handle_preemptions before a forward may reuse preempted requests' blocks)."""
    if not _flag(settings.get("save_async")):
        return False
    if HAVE_VLLM and "handle_preemptions" not in vars(KVConnectorBase_V1):
        log.warning("tutti: save_async needs a vLLM that calls handle_preemptions; saves stay synchronous")
        return False
    return True


def _pool_key(options: dict) -> str:
    return ",".join(os.path.abspath(p) if "://" not in p and ":" not in p else p
                    for p in str(options["pool"]).split(",")) + f"#{options.get('rank', 0)}"


def _ints(values: Any) -> array.array:
    a = array.array("i", values)
    assert a.itemsize == 4
    return a


def _salt(request: Any) -> bytes:
    """What besides the tokens decides a prompt's KV: vLLM's cache salt and the LoRA adapter."""
    parts = []
    cache_salt = getattr(request, "cache_salt", None)
    if cache_salt:
        parts.append(f"salt={cache_salt}")
    lora = getattr(request, "lora_request", None)
    if lora is not None:
        parts.append(f"lora={getattr(lora, 'lora_name', '')}#{getattr(lora, 'lora_int_id', '')}")
    return "\0".join(parts).encode()


def _has_media(request: Any) -> bool:
    """Images, audio or video in the prompt (vLLM's field names across versions)."""
    return any(getattr(request, a, None) for a in ("mm_features", "mm_positions", "mm_hashes", "mm_inputs"))


def _group0(block_ids: Any) -> List[int]:
    """Block ids of the (single) KV cache group: vLLM passes a tuple of per-group lists."""
    if block_ids and isinstance(block_ids[0], (list, tuple)):
        return list(block_ids[0])
    return list(block_ids or [])


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _RemoteLease:
    """A hit pinned on every rank of a tensor/pipeline-parallel engine: the smallest of theirs."""

    def __init__(self):
        self.tokens = 0
        self.held: List[Tuple[tutti.LookupClient, int]] = []

    def close(self) -> None:
        for client, lease in self.held:
            try:
                client.release(lease)
            except tutti.Error:
                pass  # the rank went away, and its leases with it
        self.held = []


class _Ranks:
    """The workers of one engine, asked through their lookup sockets. Each rank stores and
    loads its own shard, so a chunk is a hit only where every rank holds it. The ranks are
    asked one after another; parallel=True asks them at once, from a thread each (then a lookup
    would wait for the slowest rank, not for their sum). That paid nothing on the 2-core build
    machine, where the ranks' processes share two cores (python -m tutti.bench.lookup --ranks
    4: 649 against 565 us at 32K tokens, 1270 against 1290 us at 128K); not measured where
    each rank has cores of its own."""

    def __init__(self, sockets: List[str], timeout_ms: int, parallel: bool = False):
        self.sockets, self.timeout_ms = sockets, timeout_ms
        self._clients: Dict[str, tutti.LookupClient] = {}
        self._warned = False
        self._pool = (ThreadPoolExecutor(len(sockets), thread_name_prefix="tutti-lookup")
                      if parallel and len(sockets) > 1 else None)

    def _ask(self, path: str, tokens: Any, salt: bytes, ttl_ms: int) -> Any:
        """(client, hit, lease id) from the rank at `path`, or the tutti.Error it failed with."""
        try:
            client = self._clients.get(path)
            if client is None:
                client = self._clients[path] = tutti.LookupClient(path, self.timeout_ms)
            n, lid = client.lookup_lease(tokens, salt, ttl_ms)
            return client, n, lid
        except tutti.Error as e:
            return e

    def lookup_lease(self, tokens: Any, salt: bytes, ttl_ms: int) -> _RemoteLease:
        def ask(path: str) -> Any:
            return self._ask(path, tokens, salt, ttl_ms)
        answers = list(self._pool.map(ask, self.sockets)) if self._pool else [ask(p) for p in self.sockets]
        lease = _RemoteLease()
        lease.held = [(a[0], a[2]) for a in answers if not isinstance(a, tutti.Error)]
        failed = [(p, a) for p, a in zip(self.sockets, answers) if isinstance(a, tutti.Error)]
        if failed:
            if not self._warned:
                self._warned = True
                log.warning("tutti: rank at %s cannot be asked (%s): its lookups count as misses until it "
                            "answers", failed[0][0], failed[0][1])
            lease.close()
            return _RemoteLease()
        lease.tokens = min(a[1] for a in answers)
        return lease

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for client in self._clients.values():
            client.close()
        self._clients = {}


@dataclass
class _Query:
    """A scheduler lookup: the lease that pins the hit, and how it was split."""
    num_tokens: int
    lease: Any  # tutti.Lease, or a _RemoteLease
    salt: bytes
    since: float  # a lease older than half its time-to-live is taken again
    local: int = 0


@dataclass
class _Tracked:
    """A request being prefilled: its prompt, blocks, and where its unsaved chunks start."""
    token_ids: List[int]
    block_ids: List[int]
    saved: int
    salt: bytes


class _Load:
    """One load batch; `got[i]`, once known, is where spec i's arrived KV ends."""

    def __init__(self, batch: Optional[tutti.Batch], specs: List[LoadSpec]):
        self.batch, self.specs = batch, specs
        self.got: Optional[List[int]] = None if batch is not None else [s.begin for s in specs]
        self.gave_up = False  # a wait ran past load_timeout_ms: every chunk failed


class _Save:
    """One request's store by layer. `held`: its blocks meet a load of this step (its own, or
    another request's whose blocks vLLM's prefix cache shares), so no layer is declared ready
    until that load is known good: a failed chunk poisons everything computed over it."""

    def __init__(self, batch: tutti.Batch, spec: SaveSpec, held: bool):
        self.batch, self.spec, self.held = batch, spec, held
        self.blocks = set(spec.block_ids)
        self.declared: Set[int] = set()
        self.pending: List[int] = []
        self.dropped = False


class TuttiConnector(KVConnectorBase_V1):
    """tutti as a vLLM KV connector: kv_connector "TuttiConnector", kv_connector_module_path
    "tutti.vllm"."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before the kv_cache_config argument
            super().__init__(vllm_config, role)
        tutti.log_to_python(logging.getLogger("tutti"))  # tutti's own warnings, beside vLLM's
        self._config = vllm_config
        self._cache_config = kv_cache_config
        self._block_size = vllm_config.cache_config.block_size
        kv_role = getattr(vllm_config.kv_transfer_config, "kv_role", "kv_both")
        self._loads_on = kv_role in ("kv_both", "kv_consumer")
        self._saves_on = kv_role in ("kv_both", "kv_producer")
        self._stats: Dict[str, int] = {}
        if role == KVConnectorRole.SCHEDULER:
            self._options, self._settings = _settings(vllm_config, *_parallel_rank(vllm_config, worker=False))
            self._queries: Dict[str, _Query] = {}
            self._hits: Dict[str, int] = {}
            self._requests: Dict[str, Any] = {}
            self._pending: Dict[str, LoadSpec] = {}
            self._tracked: Dict[str, _Tracked] = {}
            self._sent: Dict[str, LoadSpec] = {}  # loads handed to workers, until the request ends
            self._loading: Dict[str, Any] = {}  # the _Query whose hit a sent load takes, until it ran
            self._cap: Dict[str, int] = {}  # where a request's failed load broke off
            self._poison: Dict[str, int] = {}  # a request's KV past here was computed over a failed block
            self._acked = 0  # worker reports of failed blocks seen
            self._warned_alone = False
            self._events: List[Any] = []  # KV events from the workers, until take_events
            self._save_async = _async_saves(self._settings)
            self._load_async = _async_loads(self._settings, vllm_config)
            self._saved: Set[str] = set()  # save_async: requests with saves, whose blocks wait for them
            self._ranks: Optional[_Ranks] = None  # tensor/pipeline parallelism: the workers' sockets
            ranks = _engine_ranks(vllm_config)
            if len(ranks) > 1:
                world = _parallel_rank(vllm_config, worker=False)[1]
                self._ranks = _Ranks([_settings(vllm_config, r, world)[0]["lookup_socket"] for r in ranks],
                                     int(self._settings["lookup_timeout_ms"]))
        else:
            self._rt: Optional[tutti.Runtime] = None
            self._key: Optional[str] = None
            self._layers: Dict[str, int] = {}
            self._cuda = False
            self._sync: Optional[_Load] = None
            self._async: List[_Load] = []
            self._parked: List[tutti.Batch] = []  # loads given up on, their reads still in flight
            self._saves: List[_Save] = []
            self._waited: Set[int] = set()
            self._invalid: Set[int] = set()
            self._warned_unwaited = False
            self._saves_opened = False
            self._reports = 0  # get_block_ids_with_load_errors calls that reported blocks
            self._bad: Dict[int, int] = {}  # block id -> the report that carries its failure
            self._events_on = False  # this rank reports KV events
            _, settings = _settings(vllm_config)
            self._save_async = _async_saves(settings)
            # Synchronous loads under tensor parallelism: the ranks share their failures.
            tp = getattr(getattr(vllm_config, "parallel_config", None), "tensor_parallel_size", 1) or 1
            self._tp_share = tp > 1 and not _async_loads(settings, vllm_config)
            self._warned_no_group = False
            self._saving: List[_Save] = []  # save_async: declared whole, not yet committed
            self._saved_rids: Set[str] = set()  # requests with saves (the scheduler holds their blocks)
            self._finishing: Set[str] = set()  # of those, finished: reported once their saves are in

    # ---- shared ---------------------------------------------------------------------------

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict) -> bool:
        return True  # loads wait, and saves start, inside each layer's attention

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict] = None) -> Optional[KVConnectorStats]:
        return TuttiConnectorStats(data)

    def _count(self, key: str, n: int = 1) -> None:
        self._stats[key] = self._stats.get(key, 0) + n

    def get_kv_connector_stats(self) -> Optional[KVConnectorStats]:
        if not any(self._stats.values()):
            return None
        stats, self._stats = TuttiConnectorStats(self._stats), {}
        return stats

    def get_kv_connector_kv_cache_events(self) -> Optional[TuttiKVEvents]:
        """The chunks tutti stored and removed since the last call: a chunk is a block of
        chunk_tokens tokens (fewer for a prompt's partial tail) whose hash is tutti's key (its
        low 64 bits)."""
        if self.role != KVConnectorRole.WORKER or self._rt is None or not self._events_on:
            return None
        raw, dropped = self._rt.events()
        if dropped:
            log.warning("tutti: %d KV events were dropped (more were pending than the option kv_events keeps); "
                        "a router's view of this engine's tutti cache misses them", dropped)
        events = [_block_stored(e) if e.type == "stored" else BlockRemoved(block_hashes=[_hash64(e.key)], medium=EVENT_MEDIUM)
                  for e in raw]
        return TuttiKVEvents(events) if events else None

    # ---- scheduler side -------------------------------------------------------------------

    def _shared(self) -> Optional[_Shared]:
        with _runtimes_lock:
            shared = _runtimes.get(_pool_key(self._options))
        if shared is None and not self._warned_alone:
            self._warned_alone = True
            log.warning("tutti: no worker in this process opened the pool %s, so the scheduler cannot look "
                        "prompts up and tutti will not load; saves go on", self._options["pool"])
        return shared

    def _chunk_tokens(self) -> int:
        shared = self._shared() if self._ranks is None else None
        return shared.chunk_tokens if shared is not None else int(self._options["chunk_tokens"])

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """Tokens tutti can load past vLLM's own hit of `num_computed_tokens`, at least one
        token left to compute. Asking again for the same request reuses its lookup."""
        if (not self._loads_on or getattr(request, "prompt_token_ids", None) is None or _has_media(request)
                or getattr(request, "skip_reading_prefix_cache", False)):
            return 0, False  # media: their KV depends on more than the token ids
        shared = self._shared() if self._ranks is None else None
        if shared is None and self._ranks is None:
            return 0, False
        rid, n = request.request_id, request.num_tokens
        q = self._queries.get(rid)
        ttl = int(self._settings["lease_ttl_ms"])
        if q is None or q.num_tokens != n or (ttl and time.monotonic() - q.since > ttl / 2000):
            if q is not None:
                q.lease.close()
            salt = _salt(request)
            tokens = _ints(request.all_token_ids)
            lease = (shared.rt.lookup_lease(tokens, salt, ttl_ms=ttl) if shared is not None
                     else self._ranks.lookup_lease(tokens, salt, ttl))
            q = self._queries[rid] = _Query(n, lease, salt, time.monotonic())
            self._count("lookups")
            self._count("lookup_hit_tokens", lease.tokens)
        self._hits[rid] = q.lease.tokens
        q.local = num_computed_tokens
        hit = min(q.lease.tokens, n - 1, self._cap.get(rid, n))
        if hit <= num_computed_tokens:
            return 0, False
        return hit - num_computed_tokens, self._load_async

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        rid = request.request_id
        self._requests[rid] = request
        q = self._queries.get(rid)
        if num_external_tokens == 0 or q is None:
            return
        end = q.local + num_external_tokens
        ids = _group0(blocks.get_block_ids() if hasattr(blocks, "get_block_ids") else blocks)
        # The whole prompt: a load that ends inside a partial chunk finds it by its tokens (each
        # rank's may be longer than the hit all ranks share).
        self._pending[rid] = LoadSpec(rid, list(request.all_token_ids), ids[:_ceil_div(end, self._block_size)],
                                      q.local, end, q.salt, self._load_async)
        self._count("load_tokens_planned", num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> TuttiConnectorMetadata:
        self._release_loaded()
        preempted = getattr(scheduler_output, "preempted_req_ids", None)
        md = TuttiConnectorMetadata(loads=list(self._pending.values()), acked=self._acked,
                                    preempted_req_ids=set(preempted) if preempted is not None else None)
        self._sent.update(self._pending)
        for rid in self._pending:
            self._loading[rid] = self._queries.get(rid)
        self._pending.clear()
        for rid in scheduler_output.finished_req_ids or ():
            self._forget(rid)
        if not self._saves_on:
            return md
        chunk = self._chunk_tokens()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            rid, prompt = new.req_id, list(new.prompt_token_ids or [])
            req = self._requests.get(rid)
            if _has_media(new) or (req is not None and _has_media(req)):
                continue
            salt = _salt(req if req is not None else new)
            # In the pool already: what the lookup found and vLLM took (a failed load took less).
            already = min(self._hits.get(rid, 0), new.num_computed_tokens, len(prompt)) // chunk * chunk
            t = self._tracked[rid] = _Tracked(prompt, _group0(new.block_ids), already, salt)
            self._plan_save(md, rid, t, new.num_computed_tokens, scheduled.get(rid, 0), chunk)
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None)
        if resumed is None:  # vLLM before resumed_req_ids
            resumed = {r for r, f in zip(cached.req_ids, getattr(cached, "resumed_from_preemption", ())) if f}
        for i, rid in enumerate(cached.req_ids):
            t = self._tracked.get(rid)
            if t is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                t.block_ids = _group0(new_ids) if rid in resumed else t.block_ids + _group0(new_ids)
            start = cached.num_computed_tokens[i]
            # Recomputing from `start` (preempted, or a load failed): chunks past it were
            # never saved, or are saved again at no cost (a chunk already present is skipped).
            t.saved = min(t.saved, start // chunk * chunk)
            self._plan_save(md, rid, t, start, scheduled.get(rid, 0), chunk)
        return md

    def _plan_save(self, md: TuttiConnectorMetadata, rid: str, t: _Tracked, start: int, n: int, chunk: int) -> None:
        """Saves the whole chunks that computing tokens [start, start + n) completes, and the
        prompt's tail past them once the prefill is done (tutti stores it as a partial chunk)."""
        poison = self._poison.get(rid)
        if poison is not None:
            if start > poison:  # vLLM went on over a failed block (it does not always
                return          # recompute): nothing past it is ever saved
            del self._poison[rid]  # recomputing from before it
        end = min(start + n, len(t.token_ids))
        if end < len(t.token_ids):
            end = end // chunk * chunk  # mid-prefill: a partial chunk now would be stored again whole
        if end > t.saved and len(t.block_ids) * self._block_size >= end:
            md.saves.append(SaveSpec(rid, t.token_ids[:end], t.block_ids[:_ceil_div(end, self._block_size)],
                                     t.saved, end, t.salt))
            self._saved.add(rid)
            t.saved = end

    def update_connector_output(self, connector_output: Any) -> None:
        """Blocks a worker could not load: their request asks again from where its load broke
        off (a damaged chunk is forgotten by tutti; an I/O error may persist), never again
        for the same range, so a failing chunk cannot trap it in a loop. KV events are kept
        for take_events."""
        events = getattr(connector_output, "kv_cache_events", None)
        if isinstance(events, TuttiKVEvents):
            self._events.extend(events.aggregate().get_all_events())
        invalid = getattr(connector_output, "invalid_block_ids", None)
        if not invalid:
            return
        self._acked += 1
        for rid, t in self._tracked.items():  # its own failed load, or blocks shared with one
            bad = next((i for i, b in enumerate(t.block_ids) if b in invalid), None)
            if bad is not None:
                self._poison[rid] = min(self._poison.get(rid, bad * self._block_size), bad * self._block_size)
        for rid, spec in self._sent.items():
            bad = [i for i in range(spec.begin // self._block_size, len(spec.block_ids)) if spec.block_ids[i] in invalid]
            if bad:
                self._cap[rid] = min(self._cap.get(rid, spec.end), bad[0] * self._block_size)
                q = self._queries.pop(rid, None)
                if q is not None:
                    q.lease.close()

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Optional[dict]]:
        """Synchronous saves are committed within their step: the blocks are free now. With
        save_async, a request that had saves keeps its blocks until the workers report them
        committed (finished_sending)."""
        rid = request.request_id
        self._forget(rid)
        if rid in self._saved:
            self._saved.discard(rid)
            return self._save_async, None
        return False, None

    def _release_loaded(self) -> None:
        """Ends the leases of requests whose load a worker of this process has run. (Workers in
        other processes hold theirs until the request ends.)"""
        with _runtimes_lock:
            shared = _runtimes.get(_pool_key(self._options))
        if shared is None or self._ranks is not None:
            return
        for rid in shared.take_loaded():
            q = self._loading.pop(rid, None)
            if q is not None and self._queries.get(rid) is q:  # not looked up again since
                del self._queries[rid]
                q.lease.close()
                self._count("leases_released_after_load")

    def _forget(self, rid: str) -> None:
        self._loading.pop(rid, None)
        q = self._queries.pop(rid, None)
        if q is not None:
            q.lease.close()
        self._hits.pop(rid, None)
        self._requests.pop(rid, None)
        self._tracked.pop(rid, None)
        self._sent.pop(rid, None)
        self._cap.pop(rid, None)
        self._poison.pop(rid, None)
        spec = self._pending.get(rid)
        if spec is not None and not spec.is_async:
            del self._pending[rid]  # an async load still runs: vLLM waits for its finished_recving

    def take_events(self):
        """The chunks tutti stored and removed since the last call, as vLLM's BlockStored and
        BlockRemoved (medium "tutti"), for vLLM's KV event publisher."""
        events, self._events = self._events, []
        yield from events

    # ---- worker side ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        rank, world = _parallel_rank(self._config, worker=True)
        options, _ = _settings(self._config, rank, world)
        head_dim = None
        try:
            head_dim = self._config.model_config.get_head_size()
        except Exception:  # a config without it: the shape decides
            pass
        # KV events, when vLLM publishes them: from the engine's first rank (the others hold
        # shards of the same chunks).
        events_config = getattr(self._config, "kv_events_config", None)
        if getattr(events_config, "enable_kv_cache_events", False) and rank == _parallel_rank(self._config, False)[0]:
            options.setdefault("kv_events", 1 << 16)
        self._events_on = int(options.get("kv_events", 0)) > 0
        drafter = _drafter_layers(self._config, kv_caches)
        if drafter:
            log.info("tutti: %d layers of the speculative drafter are not cached (%s ...)", len(drafter), drafter[0])
            kv_caches = {name: t for name, t in kv_caches.items() if name not in drafter}
        names, k, v = kv_views(kv_caches, head_dim, getattr(self._cache_config, "num_blocks", None))
        self._layers = {name: i for i, name in enumerate(names)}
        self._cuda = k[0].is_cuda
        rt = tutti.Runtime(**options)
        try:
            rt.register_kv(tutti.KvLayout.from_views(k, v))
        except BaseException:
            rt.close()
            raise
        self._rt = rt
        self._key = _pool_key(options)
        with _runtimes_lock:
            _runtimes[self._key] = _Shared(rt, int(options["chunk_tokens"]))
        log.info("tutti: %d layers of %s on %s (backend %s, chunk_tokens %s)", len(names), list(k[0].shape),
                 options["pool"], rt.backend, options["chunk_tokens"])

    def _stream(self) -> Any:
        return torch.cuda.current_stream() if self._cuda else None

    def _batch(self, op: str, specs: List[Any]) -> tutti.Batch:
        b = self._rt.batch(op)
        try:
            for s in specs:
                b.add(_ints(s.token_ids), _ints(s.block_ids), token_begin=s.begin, token_end=s.end, salt=s.salt)
            b.submit()
        except BaseException:
            b.close()
            raise
        return b

    def _submit_load(self, specs: List[LoadSpec]) -> _Load:
        try:
            return _Load(self._batch("load", specs), specs)
        except tutti.Error as e:
            log.error("tutti: a load of %d requests was refused: %s", len(specs), e)
            return _Load(None, specs)  # nothing arrives: every block of it is reported

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        self._saves_opened = False
        if self.role == KVConnectorRole.WORKER:
            # A failed block stays bad here until the scheduler has seen its report (it may plan
            # a step ahead of the outputs); from then on it plans no save over it itself. (With
            # several ranks, synchronous loads share their failures, so every rank reports the
            # same blocks and counts its reports alike; an asynchronous load's request is not
            # scheduled before every rank has reported it.)
            acked = getattr(connector_metadata, "acked", 0)
            self._bad = {b: r for b, r in self._bad.items() if r > acked}
            if self._save_async:  # the scheduler holds these requests' blocks until reported
                self._saved_rids.update(s.req_id for s in getattr(connector_metadata, "saves", ()))

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        if not self.has_connector_metadata():
            return
        md = self._get_connector_metadata()
        if self._rt is None:  # loads nothing; under tensor parallelism still shares its failures
            if self._tp_share and any(not s.is_async for s in md.loads):
                self._end_sync_load()
                self._sync = _Load(None, [s for s in md.loads if not s.is_async])
            return
        self._end_sync_load()  # normally ended by the last step's wait_for_save
        self._reap_parked()
        self._waited.clear()
        sync = [s for s in md.loads if not s.is_async]
        if sync:
            self._sync = self._submit_load(sync)
        if any(s.is_async for s in md.loads):
            self._async.append(self._submit_load([s for s in md.loads if s.is_async]))
        loading = set()
        for spec in sync:
            loading.update(spec.block_ids[spec.begin // self._block_size:])
        self._open_saves(md, loading)

    def _open_saves(self, md: TuttiConnectorMetadata, loading: Set[int]) -> None:
        """The step's saves, a store by layer each: once per step, by start_load_kv or, where
        vLLM starts loads only after launching the forward (steps without sync loads), by the
        first save_kv_layer. `loading`: the blocks this step's sync loads fill."""
        if self._saves_opened:
            return
        self._saves_opened = True
        for spec in md.saves:
            if any(b in self._bad for b in spec.block_ids):
                self._count("saves_dropped")  # computed over a failed load
                continue
            try:
                held = any(b in loading for b in spec.block_ids)
                self._saves.append(_Save(self._batch("store_by_layer", [spec]), spec, held))
            except tutti.Error as e:
                self._count("save_errors")
                log.error("tutti: a save was refused: %s", e)

    def wait_for_layer_load(self, layer_name: str) -> None:
        layer = self._layers.get(layer_name)
        if layer is None or self._sync is None:
            return
        self._waited.add(layer)
        if self._sync.batch is None:
            return
        try:
            self._sync.batch.wait_layer(layer, stream=self._stream())
        except tutti.Error as e:  # its chunks are reported after the step
            if e.code == tutti.tutti_c.TUTTI_EIO and not self._sync.gave_up:  # past load_timeout_ms
                self._sync.gave_up = True
                self._count("load_timeouts")
                log.warning("tutti: %s", e.message)
            log.debug("tutti: waiting for layer %d: %s", layer, e)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        layer = self._layers.get(layer_name)
        if layer is None or self._rt is None:
            return
        if not self._saves_opened and self.has_connector_metadata():
            self._open_saves(self._get_connector_metadata(), set())
        load = self._sync
        if load is not None and (load.got is not None or load.batch.poll()[1]):
            self._note_failures(load)  # done already: held saves learn whether to go on
        for save in self._saves:
            if save.dropped:
                continue
            if save.held and load is not None and load.got is None:
                save.pending.append(layer)
            elif save.blocks & self._bad.keys():
                self._drop(save)
            else:
                self._declare(save, save.pending + [layer])


    def _drop(self, save: _Save) -> None:
        save.dropped = True
        save.batch.close()  # never declared whole: stores nothing
        self._count("saves_dropped")

    def _declare(self, save: _Save, layers: List[int], final: bool = False) -> None:
        """Declares layers ready, all but the last one until `final` (wait_for_save, once every
        failure of the step is known): a save commits only after its last layer, so until then
        dropping it stores nothing."""
        save.held, save.pending = False, []
        last = len(self._layers) - 1
        for layer in layers:
            if layer not in save.declared and (final or layer != last):
                save.declared.add(layer)
                try:
                    save.batch.layer_ready(layer, stream=self._stream())
                except tutti.Error as e:  # never into vLLM's forward: the save is lost
                    self._count("save_errors")
                    log.warning("tutti: a save failed: %s", e)
                    self._drop(save)
                    return

    def wait_for_save(self) -> None:
        """Declares the step's saves whole (once every failure of the step is known) and waits
        for their commit; with save_async they commit behind the next steps instead."""
        self._end_sync_load()  # its failures join self._bad (already, if vLLM asked first)
        for save in self._saves:
            if not save.dropped and save.blocks & self._bad.keys():
                self._drop(save)
            if save.dropped:
                continue
            # Layers vLLM did not hand over (hooks skipped): the forward is done by now.
            self._declare(save, [layer for layer in range(len(self._layers)) if layer not in save.declared], final=True)
            if save.dropped:
                continue
            if self._save_async:
                self._saving.append(save)
            else:
                self._end_save(save)
        self._saves = []
        self._reap_saves()
        self._count("saves_behind_step", len(self._saving))  # committing behind the next step

    def _end_save(self, save: _Save) -> None:
        """Waits for a save's commit and counts what it stored."""
        try:
            save.batch.wait()
        except tutti.Error as e:
            self._count("save_errors")
            log.warning("tutti: a save failed: %s", e)
        self._count("saved_tokens", save.batch.result(0).tokens)
        save.batch.close()

    def _reap_saves(self, wait_for: Optional[Set[str]] = None, wait_all: bool = False) -> None:
        """Ends the async saves that committed; waits for those of the requests `wait_for`
        (or for all of them)."""
        still = []
        for save in self._saving:
            if wait_all or (wait_for is not None and save.spec.req_id in wait_for) or save.batch.poll()[1]:
                self._end_save(save)
            else:
                still.append(save)
        self._saving = still

    def _collect(self, load: _Load) -> None:
        """Waits for a load batch, and notes where each request's arrived KV ends."""
        if load.got is not None:
            return
        if load.gave_up:  # nothing of it arrived; its reads end behind the next steps
            load.got = [s.begin for s in load.specs]
            self._parked.append(load.batch)
            load.batch = None
            return
        try:
            load.batch.wait()
        except tutti.Error:
            pass  # per request below
        load.got = [s.begin + load.batch.result(i).tokens for i, s in enumerate(load.specs)]
        if load.batch.poll()[1]:
            load.batch.close()
        else:  # the wait gave up (load_timeout_ms): its reads end behind the next steps
            self._parked.append(load.batch)
        load.batch = None

    def _lost(self, s: LoadSpec, got: int) -> List[int]:
        """The blocks of a load's range past where its arrived KV ends."""
        return s.block_ids[got // self._block_size:_ceil_div(s.end, self._block_size)]

    def _lost_blocks(self, load: _Load) -> Set[int]:
        """The blocks of a collected load's chunks that did not arrive (a whole load may end
        inside its last block: that block is good)."""
        return {b for s, got in zip(load.specs, load.got) if got < s.end for b in self._lost(s, got)}

    def _mark_bad(self, blocks: Set[int]) -> None:
        for b in blocks:
            self._bad.setdefault(b, self._reports + 1)  # goes out with the next report

    def _note_failures(self, load: _Load) -> None:
        """Waits for a load; the blocks of chunks that did not arrive become bad."""
        self._collect(load)
        self._mark_bad(self._lost_blocks(load))

    def _report(self, load: _Load) -> None:
        """Reports the blocks of chunks that did not arrive to vLLM; the scheduler of this
        process may release the load's leases."""
        self._note_failures(load)
        with _runtimes_lock:
            shared = _runtimes.get(self._key) if self._key is not None else None
        if shared is not None:
            shared.note_loaded({s.req_id for s in load.specs})
        for s, got in zip(load.specs, load.got):
            self._count("loaded_tokens", got - s.begin)
            if got < s.end:
                self._invalid.update(self._lost(s, got))
                self._count("failed_tokens", s.end - got)

    def _end_sync_load(self) -> None:
        """Ends the step's load and reports what did not arrive."""
        load, self._sync = self._sync, None
        if load is None:
            return
        self._collect(load)
        if len(self._waited) < len(self._layers):
            if not self._warned_unwaited:
                self._warned_unwaited = True
                log.warning("tutti: a forward ran without waiting for every layer's load (CUDA graphs without "
                            "piecewise attention?); its loaded blocks are reported as failed and recomputed")
            load.got = [s.begin for s in load.specs]
        if self._tp_share:
            self._share_failures(load)
        self._report(load)

    def _share_failures(self, load: _Load) -> None:
        """Tensor parallelism, synchronous loads: every rank computed the step over every rank's
        KV, so a block one rank failed to load is bad on all of them. The ranks exchange their
        failed blocks (one all-gather on vLLM's TP CPU group, in each step with loads, which
        every rank has alike); without the group, every block of the load counts as failed."""
        own = self._lost_blocks(load)
        group = _tp_cpu_group()
        try:
            if group is None:
                raise RuntimeError("vLLM's tensor-parallel group is not reachable")
            import torch.distributed as dist
            gathered: List[Any] = [None] * dist.get_world_size(group)
            dist.all_gather_object(gathered, sorted(own), group=group)
            others = set().union(*map(set, gathered)) - own
        except Exception as e:  # safe: nothing of the load is used, nothing over it saved
            if not self._warned_no_group:
                self._warned_no_group = True
                log.error("tutti: the tensor-parallel ranks cannot share their load failures (%s): synchronous "
                          "loads are reported failed and recomputed; use load_async", e)
            load.got = [s.begin for s in load.specs]
            return
        self._mark_bad(others)
        self._invalid.update(others)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """Async loads that arrived (finished_recving); with save_async, finished requests whose
        saves all committed (finished_sending: vLLM frees their blocks now)."""
        sending: Set[str] = set()
        if self._save_async:
            self._reap_saves()
            self._finishing |= set(finished_req_ids or ()) & self._saved_rids
            busy = {save.spec.req_id for save in self._saving}
            sending = {rid for rid in self._finishing if rid not in busy}
            self._finishing -= sending
            self._saved_rids -= sending
        done = set()
        for load in list(self._async):
            if load.got is not None or load.batch.poll()[1]:
                self._async.remove(load)
                self._report(load)
                done.update(s.req_id for s in load.specs)
        return (sending or None), (done or None)

    def _reap_parked(self, wait_all: bool = False) -> None:
        """Frees the loads given up on whose reads have ended (all of them, waiting, at shutdown)."""
        still = []
        for batch in self._parked:
            if wait_all or batch.poll()[1]:
                batch.close()
            else:
                still.append(batch)
        self._parked = still

    def get_block_ids_with_load_errors(self) -> Set[int]:
        self._end_sync_load()
        invalid, self._invalid = self._invalid, set()
        if invalid:
            self._reports += 1
        return invalid

    def handle_preemptions(self, kv_connector_metadata: Any = None) -> None:
        """Before a forward that may reuse preempted requests' blocks: their async saves must
        have read them. (vLLM passes this step's metadata, or in older versions the preempted
        request ids; when the ids are not known, every async save is waited for.)"""
        if not self._saving:
            return
        if isinstance(kv_connector_metadata, (set, frozenset)):
            preempted: Optional[Set[str]] = set(kv_connector_metadata)
        else:
            preempted = getattr(kv_connector_metadata, "preempted_req_ids", None)
        if preempted is None:
            self._reap_saves(wait_all=True)
        elif preempted:
            self._reap_saves(wait_for=preempted)

    def shutdown(self) -> None:
        if self.role == KVConnectorRole.SCHEDULER:
            for rid in list(self._queries):
                self._forget(rid)
            if self._ranks is not None:
                self._ranks.close()
            return
        for save in self._saves:
            save.batch.close()
        self._saves = []
        self._reap_saves(wait_all=True)  # declared whole: they commit
        for load in self._async + ([self._sync] if self._sync else []):
            if load.batch is not None:
                load.batch.close()
        self._sync, self._async = None, []
        self._reap_parked(wait_all=True)
        if self._rt is not None:
            with _runtimes_lock:
                shared = _runtimes.get(self._key)
                if shared is not None and shared.rt is self._rt:
                    del _runtimes[self._key]
            self._rt.close()
            self._rt = None


def _drafter_layers(vllm_config: Any, kv_caches: Dict[str, Any]) -> List[str]:
    """The KV caches of a speculative drafter (EAGLE heads and MTP layers, numbered after the
    target's layers; a separate draft model's, under `draft_model.`). tutti caches the target's
    layers alone: vLLM waits for and hands over a drafter's layers only in some versions, and
    its drafter writes them after the target's forward, so they are neither loaded nor stored
    (a cache hit then leaves the drafter's KV of the prefix to the drafter: fewer accepted
    tokens, never a wrong one)."""
    if getattr(vllm_config, "speculative_config", None) is None:
        return []
    hf = getattr(vllm_config.model_config, "hf_config", None)
    target = getattr(hf, "num_hidden_layers", None)
    out = []
    for name in kv_caches:
        try:
            past = target is not None and layer_index(name) >= target
        except ValueError:
            past = False
        if name.startswith("draft_model.") or past:
            out.append(name)
    return out


def _ranks_per_engine(vllm_config: Any) -> int:
    pc = getattr(vllm_config, "parallel_config", None)
    return (getattr(pc, "tensor_parallel_size", 1) or 1) * (getattr(pc, "pipeline_parallel_size", 1) or 1)


def _engine_ranks(vllm_config: Any) -> List[int]:
    """The ranks of the workers of the scheduler's engine (its data-parallel rank's)."""
    first = _parallel_rank(vllm_config, worker=False)[0]
    return list(range(first, first + _ranks_per_engine(vllm_config)))


def _parallel_rank(vllm_config: Any, worker: bool) -> Tuple[int, int]:
    """(rank, world size) over data, pipeline and tensor parallelism; (0, 1) outside vLLM. A
    scheduler stands for the first worker of its engine (its data-parallel rank)."""
    pc = getattr(vllm_config, "parallel_config", None)
    dp, dp_size = getattr(pc, "data_parallel_rank", 0) or 0, getattr(pc, "data_parallel_size", 1) or 1
    tp_size, pp_size = getattr(pc, "tensor_parallel_size", 1) or 1, getattr(pc, "pipeline_parallel_size", 1) or 1
    local = 0
    if worker:
        try:
            from vllm.distributed.parallel_state import get_pp_group, get_tp_group
            local = get_pp_group().rank_in_group * tp_size + get_tp_group().rank_in_group
        except Exception:  # no vLLM, or its distributed state is not up
            local = 0
    return dp * tp_size * pp_size + local, dp_size * tp_size * pp_size
