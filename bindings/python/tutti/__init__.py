# SPDX-License-Identifier: Apache-2.0
"""tutti: SSD-backed KV caches for LLM serving, loaded back layer by layer.

A thin Pythonic layer over the generated module `tutti.tutti_c` (every function of tutti.h).
Token ids and block tables are passed as any int32 buffer (numpy arrays, array.array) or
tensor (torch: data_ptr()) without copying; they must stay alive and unchanged until the batch
is done, which Batch ensures by holding them.

    with tutti.Runtime(pool="/nvme/kv.pool", capacity="64G") as rt:
        rt.register_kv(tutti.KvLayout.paged(layers, blocks, 16, kv_heads, head_dim, 2, k=kv_tensors))
        hit = rt.lookup(tokens)
        with rt.batch("load") as b:
            b.add(tokens, block_table)
            b.submit()
            for layer in range(layers):
                b.wait_layer(layer)           # or b.wait_layer(layer, stream=torch_stream)
            b.wait()
"""

import logging
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from . import tutti_c as _c

__all__ = ["Error", "Runtime", "KvLayout", "Batch", "Request", "Result", "LookupClient", "KvEvent", "version",
           "log_to_python", "MEMORY_HOST", "MEMORY_CUDA", "HISTOGRAMS"]

MEMORY_HOST = _c.TUTTI_MEMORY_HOST
MEMORY_CUDA = _c.TUTTI_MEMORY_CUDA
KV_K_ONLY = _c.TUTTI_KV_K_ONLY  # tutti_kv_layout.flags: MLA, one latent per token


class Error(Exception):
    """A tutti call failed: `code` is the tutti_error, `name` its name, `message` the detail."""

    def __init__(self, code: int, message: str = ""):
        self.code = code
        self.name = _c.tutti_strerror(code)
        self.message = message
        super().__init__(f"{self.name}: {message}" if message else self.name)


def _check(rc: int) -> None:
    if rc != 0:
        raise Error(rc, _c.tutti_last_error())


def _split(ret):
    """SWIG returns [rc, out...] for calls with out-parameters."""
    rc, *out = ret
    _check(rc)
    return out[0] if len(out) == 1 else out


def version() -> str:
    return _c.tutti_version_string()


_LEVELS = {_c.TUTTI_LOG_ERROR: logging.ERROR, _c.TUTTI_LOG_WARN: logging.WARNING, _c.TUTTI_LOG_INFO: logging.INFO,
           _c.TUTTI_LOG_DEBUG: logging.DEBUG}


def log_to_python(logger: Optional[logging.Logger] = None) -> None:
    """Routes tutti's log (chunks discarded for a failed checksum, torn records found at open,
    lookup clients hung up on, the backend chosen) to `logger` (default: logging.getLogger
    ("tutti")), at the levels it lets through now. tutti calls it from its own threads."""
    logger = logger or logging.getLogger("tutti")
    effective = logger.getEffectiveLevel()
    level = max((t for t, py in _LEVELS.items() if py >= effective), default=-1)
    _c.tutti_set_log_callback(lambda lvl, msg: logger.log(_LEVELS.get(lvl, logging.INFO), msg), level)


def _checked_address(obj: Any, need: int, what: str) -> int:
    """The address of a KV tensor or buffer that must hold `need` bytes (an int: unchecked)."""
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
        raise ValueError(f"{what} is not contiguous: tutti addresses it as one flat range")
    address, nbytes = _c.tutti_py_address(obj)
    if nbytes < need:
        raise ValueError(f"{what} holds {nbytes} bytes; the layout addresses {need} in it")
    return address


class KvLayout:
    """The engine's paged KV cache: shape, strides and per-layer base addresses."""

    def __init__(self, raw):
        self._raw = raw

    @classmethod
    def paged(cls, layers: int, blocks: int, block_tokens: int, kv_heads: int, head_dim: int, elem_bytes: int,
              k: Sequence[Any], v: Optional[Sequence[Any]] = None, v_offset: Optional[int] = None,
              hnd: bool = False, memory: Optional[int] = None, device: Optional[int] = None) -> "KvLayout":
        """Blocks of [block_tokens, kv_heads, head_dim] (NHD, vLLM) or [kv_heads, block_tokens,
        head_dim] (HND). `k`: per layer, its K tensor (or address); `v` the same for V, or None
        when each layer is one fused [2, blocks, ...] tensor whose V starts `v_offset` bytes in
        (default: blocks * block_stride). Tensors and buffers are checked to hold what the
        layout addresses in them, and kept alive as long as the layout (and a Runtime it is
        registered with); bare addresses are the caller's to keep valid."""
        raw = _c.tutti_kv_layout()
        _check(_c.tutti_kv_layout_init(raw, layers, blocks, block_tokens, kv_heads, head_dim, elem_bytes, int(hnd)))
        # Memory and device: as the tensors say (given, they must agree); bare addresses: host.
        cuda = {bool(t.is_cuda) for t in list(k) + list(v or []) if hasattr(t, "is_cuda")}
        if len(cuda) > 1:
            raise ValueError("the KV tensors are partly in CUDA memory, partly in host memory")
        if cuda:
            said = MEMORY_CUDA if cuda.pop() else MEMORY_HOST
            if memory is not None and memory != said:
                raise ValueError(f"memory={memory} but the KV tensors are in {'CUDA' if said == MEMORY_CUDA else 'host'} memory")
            memory = said
            if memory == MEMORY_CUDA and device is None:
                device = k[0].device.index or 0
        raw.memory = MEMORY_HOST if memory is None else memory
        raw.device = device or 0
        if v is None:
            raw.v_offset = blocks * raw.block_stride if v_offset is None else v_offset
        side = blocks * raw.block_stride  # one K (or V) of a layer
        k_bases = [_checked_address(t, side + (raw.v_offset if v is None else 0), f"layer {i}'s K")
                   for i, t in enumerate(k)]
        v_bases = None if v is None else [_checked_address(t, side, f"layer {i}'s V") for i, t in enumerate(v)]
        raw.set_bases(k_bases, v_bases)
        layout = cls(raw)
        layout._buffers = (list(k), None if v is None else list(v))
        return layout

    @classmethod
    def from_views(cls, k: Sequence[Any], v: Optional[Sequence[Any]]) -> "KvLayout":
        """Per layer, K and V as torch tensors of shape [blocks, block_tokens, kv_heads,
        head_dim] with any strides but a contiguous head_dim: views into whatever the engine
        allocated (vLLM's [2, blocks, ...], [blocks, 2, ...] or [blocks, heads, tokens, 2 *
        head_dim] caches, a layer's slice of one shared buffer). v None: K only, one latent per
        token (MLA: [blocks, block_tokens, 1, latent]; TUTTI_KV_K_ONLY). Every view must have
        the same shape, dtype, device and strides, and lie inside its tensor's storage; the
        tensors are kept alive with the layout."""
        k_only = v is None
        v = [] if k_only else list(v)
        views = list(k) + v
        if not k or (len(k) != len(v) and not k_only):
            raise ValueError(f"k and v must name the same, nonzero number of layers ({len(k)} and {len(v)})")
        first = views[0]
        if first.dim() != 4:
            raise ValueError(f"a KV view must be [blocks, block_tokens, kv_heads, head_dim], not {list(first.shape)}")
        for i, t in enumerate(views):
            what = f"layer {i % len(k)}'s {'KV'[i // len(k)]}"
            if (t.shape, t.stride(), t.dtype, t.device) != (first.shape, first.stride(), first.dtype, first.device):
                raise ValueError(f"{what} is {list(t.shape)} {t.dtype} on {t.device} with strides {t.stride()}; "
                                 f"layer 0's K is {list(first.shape)} {first.dtype} on {first.device} with strides "
                                 f"{first.stride()}: every view must match")
            if t.stride(3) != 1 and t.shape[3] > 1:
                raise ValueError(f"{what}: head_dim is not contiguous (stride {t.stride(3)})")
            span = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
            storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
            if span * t.element_size() > storage.nbytes() or min(t.stride()) < 0:
                raise ValueError(f"{what} reaches past its tensor's storage")
        blocks, block_tokens, heads, head_dim = first.shape
        e = first.element_size()
        raw = _c.tutti_kv_layout()
        _check(_c.tutti_kv_layout_init(raw, len(k), blocks, block_tokens, heads, head_dim, e, 0))
        raw.block_stride, raw.token_stride, raw.head_stride = (s * e for s in first.stride()[:3])
        raw.memory = MEMORY_CUDA if first.is_cuda else MEMORY_HOST
        raw.device = first.device.index or 0 if first.is_cuda else 0
        raw.set_bases([t.data_ptr() for t in k], None if k_only else [t.data_ptr() for t in v])
        if k_only:
            raw.flags = KV_K_ONLY
        layout = cls(raw)
        layout._buffers = views
        return layout

    @property
    def block_stride(self) -> int:
        return self._raw.block_stride

    def __getattr__(self, name):  # the C struct's fields, read-only
        return getattr(self._raw, name)


# tutti_stats' counters as SWIG wraps them (a property per field), in header order: a counter
# added to tutti.h reaches stats() without a change here.
_STATS_FIELDS = [f for f, v in vars(_c.tutti_stats).items()
                 if isinstance(v, property) and f not in ("this", "thisown", "struct_size")]


class _Handle:
    """Owns one C handle: closed by close(), by the end of a with block, or when collected."""

    _what = "handle"
    _raw = None  # also for an object whose __init__ failed before it set one

    def __init__(self):
        self._raw = None

    def _destroy(self, raw) -> None:
        raise NotImplementedError

    _closing = threading.Lock()  # two threads closing one handle: one of them destroys it

    def close(self) -> None:
        with _Handle._closing:
            raw, self._raw = self._raw, None
        if raw is not None:
            self._destroy(raw)

    def _handle(self):
        if self._raw is None:
            raise Error(_c.TUTTI_ESTATE, f"the {self._what} is closed")
        return self._raw

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


# tutti_histogram_kind, by the names Runtime.histogram takes.
HISTOGRAMS = {"layer_wait": _c.TUTTI_HISTOGRAM_LAYER_WAIT, "load": _c.TUTTI_HISTOGRAM_LOAD,
              "store": _c.TUTTI_HISTOGRAM_STORE}


@dataclass
class KvEvent:
    """A chunk the pool gained ("stored": with its tokens and the key of the chunk before it in
    its prompt, None for the prompt's first) or lost ("removed"). Keys are 128-bit ints, the
    ones lookups chain."""
    type: str
    key: int
    parent: Optional[int] = None
    tokens: Optional[list] = None

    @classmethod
    def _of(cls, raw) -> "KvEvent":
        kind, klo, khi, plo, phi, tokens = raw
        if kind == _c.TUTTI_KV_STORED:
            return cls("stored", khi << 64 | klo, (phi << 64 | plo) or None, tokens)
        return cls("removed", khi << 64 | klo)


def _host_ints(x: Any) -> Any:
    """A tensor as tutti reads it: contiguous int32 in host memory (a copy where it is not, which
    a request keeps: tutti reads the memory itself, so a strided view or a CUDA tensor would
    hand it other numbers or a device address). Every call that takes tokens or block ids."""
    if hasattr(x, "data_ptr") and hasattr(x, "is_contiguous"):
        if getattr(x, "is_cuda", False) or str(getattr(x, "dtype", "")) != "torch.int32" or not x.is_contiguous():
            return x.cpu().int().contiguous()
    return x


@dataclass
class Request:
    tokens: Any
    block_table: Any
    token_begin: int = 0
    token_end: Optional[int] = None  # None: the whole prompt; 0 (a lookup's miss): nothing
    salt: Optional[bytes] = None

    def __post_init__(self):
        self.tokens, self.block_table = _host_ints(self.tokens), _host_ints(self.block_table)


@dataclass
class Result:
    status: int
    chunks: int
    chunks_ok: int
    tokens: int


class Batch(_Handle):
    """Load or store requests layer by layer. Use as a context manager (destroyed on exit)."""

    _what = "batch"

    def __init__(self, rt: "Runtime", op: str):
        super().__init__()
        ops = {"load": _c.TUTTI_OP_LOAD, "store": _c.TUTTI_OP_STORE, "store_by_layer": _c.TUTTI_OP_STORE_BY_LAYER}
        if op not in ops:
            raise ValueError(f"op must be 'load', 'store' or 'store_by_layer', not {op!r}")
        self._rt = rt
        self._requests = []  # kept alive: tutti reads their buffers until the batch is done
        self._raw = _split(_c.tutti_batch_create(rt._raw, ops[op]))

    def add(self, tokens, block_table, token_begin: int = 0, token_end: Optional[int] = None, salt: Optional[bytes] = None) -> int:
        """Adds one request; returns its index."""
        return self.add_many([Request(tokens, block_table, token_begin, token_end, salt)])

    def add_many(self, requests: Sequence[Request]) -> int:
        reqs = list(requests)  # (once: a generator gives its requests once)
        _check(_c.tutti_batch_add(self._handle(), reqs))
        first = len(self._requests)
        self._requests.extend(reqs)
        return first

    def submit(self) -> None:
        _check(_c.tutti_batch_submit(self._handle()))

    def wait_layer(self, layer: int, stream: Any = None) -> None:
        """Blocks until `layer` is in place; with `stream` (a CUDA stream: an int address or an
        object with .cuda_stream, e.g. torch.cuda.Stream), enqueues the wait on it instead."""
        if stream is None:
            _check(_c.tutti_batch_wait_layer(self._handle(), layer))
        else:
            _check(_c.tutti_batch_wait_layer_async(self._handle(), layer, getattr(stream, "cuda_stream", stream)))

    def layer_ready(self, layer: int, stream: Any = None) -> None:
        """A 'store_by_layer' batch, after submit: the blocks of `layer` now hold what it stores
        (in CUDA memory: in the order of `stream`, as for wait_layer; None: the default stream).
        Never blocks."""
        _check(_c.tutti_batch_layer_ready(self._handle(), layer, getattr(stream, "cuda_stream", stream)))

    def poll(self) -> Tuple[int, bool]:
        """(layers done in order from layer 0, whether the whole batch is done); never blocks."""
        layers, done = _split(_c.tutti_batch_poll(self._handle()))
        return layers, done

    def wait(self) -> None:
        _check(_c.tutti_batch_wait(self._handle()))

    def result(self, request: int = 0) -> Result:
        r = _split(_c.tutti_batch_result(self._handle(), request))
        return Result(r.status, r.chunks, r.chunks_ok, r.tokens)

    def chunk_status(self, request: int = 0, cap: int = 1 << 16) -> list:
        return _split(_c.tutti_batch_chunk_status(self._handle(), request, cap))

    def _destroy(self, raw) -> None:
        _c.tutti_batch_destroy(raw)  # waits for anything in flight
        self._requests = []


class Lease(_Handle):
    """What Runtime.lookup_lease found (`tokens`), pinned until closed (or the end of a with
    block), or until its ttl_ms have passed. It may outlive its runtime."""

    _what = "lease"

    def __init__(self, raw, tokens: int, rt: "Runtime"):
        super().__init__()
        self._raw, self.tokens, self._rt = raw, tokens, rt

    def _destroy(self, raw) -> None:
        _c.tutti_lease_release(raw)


class LookupClient(_Handle):
    """A connection to the lookup service of a runtime in another process (opened with
    lookup_socket=PATH): how an engine's scheduler asks what the workers' pools hold. A call
    that finds that runtime closed or dead raises Error with code TUTTI_EIO (count it as a
    miss); the next call connects again. `timeout_ms` bounds each call's wait (0: none).
    Calls release the GIL and may come from several threads (they are taken in turn)."""

    _what = "lookup client"

    def __init__(self, socket_path: str, timeout_ms: int = 10000):
        super().__init__()
        self.socket_path = socket_path
        self._raw = _split(_c.tutti_lookup_client_open(str(socket_path), timeout_ms))

    def lookup(self, tokens, salt: Optional[bytes] = None) -> int:
        """Runtime.lookup in the serving runtime."""
        hit, _ = _split(_c.tutti_lookup_client_query(self._handle(), _host_ints(tokens), salt, 0, False))
        return hit

    def lookup_lease(self, tokens, salt: Optional[bytes] = None, ttl_ms: int = 0) -> Tuple[int, int]:
        """Runtime.lookup_lease in the serving runtime: (cached tokens, lease id). The lease ends
        with release(id), ttl_ms (0: none), or this client's connection."""
        hit, lease = _split(_c.tutti_lookup_client_query(self._handle(), _host_ints(tokens), salt, ttl_ms, True))
        return hit, lease

    def release(self, lease: int) -> None:
        """Ends a lease of this client (one that already ended: nothing)."""
        _check(_c.tutti_lookup_client_release(self._handle(), lease))

    def _destroy(self, raw) -> None:
        _c.tutti_lookup_client_close(raw)


class Runtime(_Handle):
    """A pool and a registered KV cache. Options are tutti.h's keys (pool, capacity, chunk_tokens,
    backend, ...); values are converted with str(). Unset keys come from TUTTI_* variables."""

    _what = "runtime"

    def __init__(self, **options):
        super().__init__()
        opts = _split(_c.tutti_options_create())
        try:
            for key, value in options.items():
                if value is not None:
                    _check(_c.tutti_options_set(opts, key, str(value)))
            self._raw = _split(_c.tutti_runtime_open(opts))
        finally:
            _c.tutti_options_destroy(opts)
        self._layout = None

    @property
    def backend(self) -> str:
        return _c.tutti_runtime_backend(self._handle())

    def register_kv(self, layout: KvLayout) -> None:
        _check(_c.tutti_runtime_register_kv(self._handle(), layout._raw))
        self._layout = layout

    def lookup(self, tokens, salt: Optional[bytes] = None) -> int:
        """How many leading tokens are cached: whole chunks, then the longest partial chunk
        that follows them (a multiple of partial_tokens)."""
        return _split(_c.tutti_lookup(self._handle(), _host_ints(tokens), salt))

    def lookup_lease(self, tokens, salt: Optional[bytes] = None, ttl_ms: int = 0) -> Lease:
        """lookup, and what it found stays pinned (never evicted) until the lease is closed or
        ttl_ms have passed (0: no expiry), so a load submitted meanwhile cannot miss it."""
        hit, raw = _split(_c.tutti_lookup_lease(self._handle(), _host_ints(tokens), salt, ttl_ms))
        return Lease(raw, hit, self)

    def batch(self, op: str) -> Batch:
        return Batch(self, op)

    def stats(self) -> dict:
        """Every counter of tutti_stats (tutti.h), by its field name."""
        s = _split(_c.tutti_runtime_stats(self._handle()))
        return {f: getattr(s, f) for f in _STATS_FIELDS}

    def layer_wait_ns(self) -> list:
        return _split(_c.tutti_runtime_layer_wait_ns(self._handle(), 4096))

    def histogram(self, kind: str) -> dict:
        """A latency histogram since the runtime opened: kind "layer_wait" (each wait for a
        layer: the bubble), "load" (each load batch, submit to in place) or "store" (each store
        batch, submit to commit). {"count", "sum_s", "buckets": [(upper bound in seconds,
        samples up to it)]}: cumulative, as Prometheus has them; the last bound is inf."""
        if kind not in HISTOGRAMS:
            raise ValueError(f"histogram kind {kind!r} is not one of {', '.join(HISTOGRAMS)}")
        count, sum_ns, buckets = _split(_c.tutti_runtime_histogram(self._handle(), HISTOGRAMS[kind]))
        bounds = [2.0 ** i * 1e-6 for i in range(len(buckets) - 1)] + [float("inf")]
        cumulative, total = [], 0
        for bound, n in zip(bounds, buckets):
            total += n
            cumulative.append((bound, total))
        return {"count": count, "sum_s": sum_ns / 1e9, "buckets": cumulative}

    def events(self, max_events: int = 4096) -> Tuple[list, int]:
        """KV events since the last call (option kv_events), oldest first, at most max_events:
        ([KvEvent], how many were dropped because more than kv_events were pending)."""
        raw, dropped = _split(_c.tutti_runtime_events(self._handle(), max_events))
        return [KvEvent._of(e) for e in raw], dropped

    def _destroy(self, raw) -> None:
        _c.tutti_runtime_close(raw)
