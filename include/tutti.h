/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti.h — the stable C ABI of tutti, an SSD-backed KV-cache runtime for LLM serving.
 *
 * Conventions (read these first):
 *  1. Handles are opaque. Every `*_create`/`*_open` has a `*_destroy`/`*_close` that accepts NULL.
 *     The caller owns what it creates; tutti never keeps a pointer to caller memory beyond the
 *     call, except (a) the KV-cache addresses given to tutti_runtime_register_kv and (b) the token
 *     ids and block tables of requests added to a batch, which must stay valid until the batch
 *     has completed (tutti_batch_wait returned, or tutti_batch_destroy).
 *  2. Functions return 0 (TUTTI_OK) or a negative tutti_error. tutti_strerror(code) names the
 *     code; tutti_last_error() returns a message for the last failure on the calling thread.
 *     With TUTTI_DEBUG=1 in the environment the message ends with the place in tutti's source
 *     that failed, e.g. " [lib/pool/pool.cpp:123]".
 *  3. A NULL handle or a NULL required pointer is TUTTI_EINVAL, never a crash.
 *  4. Thread safety: a runtime may be used from several threads at once. A batch belongs to one
 *     thread at a time; different batches may be driven concurrently.
 *  5. Structs that may grow start with `struct_size`; set it to sizeof(the struct). Options grow
 *     as string keys (tutti_options_set), each with a TUTTI_* environment variable.
 *  6. Nothing here blocks on I/O unless its name says wait, close or destroy, except
 *     tutti_runtime_register_kv, which opens (or creates and pre-allocates) the pool files.
 *     Submitting never waits for the disk: durability work runs on tutti's own threads.
 */
#ifndef TUTTI_H
#define TUTTI_H

#include <stddef.h>
#include <stdint.h>

#if defined(TUTTI_BUILDING) && defined(__GNUC__)
#define TUTTI_API __attribute__((visibility("default")))
#else
#define TUTTI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version -------------------------------------------------------------------------- */

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 7
#define TUTTI_VERSION_PATCH 0
#define TUTTI_VERSION_NUMBER \
  (TUTTI_VERSION_MAJOR * 10000 + TUTTI_VERSION_MINOR * 100 + TUTTI_VERSION_PATCH)

/* The version of the library actually loaded (compare with TUTTI_VERSION_NUMBER). */
TUTTI_API unsigned tutti_version_number(void);
TUTTI_API const char* tutti_version_string(void);

/* ---- Errors --------------------------------------------------------------------------- */

typedef enum tutti_error {
  TUTTI_OK = 0,
  /* An argument is invalid: a NULL handle or required pointer, an option key or value tutti does
   * not know, a layout with zero or overflowing sizes, a block id outside [0, num_blocks), a
   * token range past the prompt, an op outside tutti_op, the same pool path twice. Nothing
   * was changed. */
  TUTTI_EINVAL = -1,
  /* Host memory (or pinned / staging memory) could not be allocated. */
  TUTTI_ENOMEM = -2,
  /* The storage under the pool failed a read or write (errno and path in tutti_last_error()),
   * or a dram pool file was truncated by another process under tutti's mapping. The chunks
   * it touched fail; others in the batch are unaffected. */
  TUTTI_EIO = -3,
  /* Creating a pool: the disk has no room for it (the new file is removed again). Storing: no
   * slot can be freed, because every one holds a chunk a batch in flight depends on. */
  TUTTI_ENOSPC = -4,
  /* A chunk to load is not in the pool (never stored, or evicted after the lookup; or a range
   * that ends past what a partial chunk holds); a chunk to store was being stored by another
   * batch that failed. A miss, never an I/O error. */
  TUTTI_ENOENT = -5,
  /* register_kv: the pool was created for another KV shape (layers, heads, head_dim,
   * elem_bytes, chunk_tokens), or a striped pool's files disagree. */
  TUTTI_ELAYOUT = -6,
  /* On-disk data failed a check: a chunk-layer whose bytes do not match the checksum stored
   * with them (that chunk fails; its bytes are never handed back as loaded), or, at
   * register_kv, a file whose superblock is damaged, of an unknown format, impossible in size,
   * shorter than it says, or not a tutti pool at all (tutti fsck tells more). */
  TUTTI_ECORRUPT = -7,
  /* The call is not valid now: a second register_kv, a batch before register_kv, adding to a
   * batch after its submit or submitting it twice, waiting before submit, results before tutti_batch_wait, anything
   * that moves data after tutti_runtime_close. */
  TUTTI_ESTATE = -8,
  /* Not in this build or on this machine: CUDA memory without CUDA, a backend that cannot
   * work here (io_uring refused, no NVMe namespace, no tutti_kmod, cuFile missing, a dram pool
   * not on tmpfs), direct_to_blocks=on for an unaligned layout. The message says why. */
  TUTTI_EUNSUPPORTED = -9,
  /* A pool path cannot be opened or created: permissions, a missing directory, a read-only
   * file system, a missing file with create=0. */
  TUTTI_EACCES = -10,
  /* A bug in tutti; please report it with tutti_last_error(). */
  TUTTI_EINTERNAL = -11,
  /* A pool file is open in another runtime, in this process or another (pools are locked).
   * Reported at once while that runtime lives; the lock of one just killed is waited for up
   * to a second, until the kernel has released it. */
  TUTTI_EBUSY = -12
} tutti_error;

/* ---- Log ---------------------------------------------------------------------------------
 * Events no call returns (chunks discarded for a failed checksum, torn commit records found at
 * register_kv, a lookup client hung up on, the backend chosen) go to one process-wide
 * callback, for messages up to `level` (TUTTI_LOG_ERROR .. TUTTI_LOG_DEBUG). Quiet by default:
 * without a callback, the variable TUTTI_LOG=error|warn|info|debug (or TUTTI_DEBUG) prints them
 * to stderr. The callback runs on any of tutti's threads, possibly several at once, and must
 * not block for long; a call already under way when it is replaced (fn NULL: none) may still
 * reach the old one. The message lives for the call. Since 0.5.0. */
enum {
  TUTTI_LOG_ERROR = 0,
  TUTTI_LOG_WARN = 1,
  TUTTI_LOG_INFO = 2,
  TUTTI_LOG_DEBUG = 3
};
typedef void (*tutti_log_fn)(int level, const char* message, void* user);
TUTTI_API void tutti_set_log_callback(tutti_log_fn fn, void* user, int level);

/* A static, human-readable name for a code. Never NULL. */
TUTTI_API const char* tutti_strerror(int code);
/* The message of the last failed call on this thread ("" if none). Valid until the next call.
 * TUTTI_DEBUG set to anything but 0 (read at each failure) appends " [<source file>:<line>]". */
TUTTI_API const char* tutti_last_error(void);

/* ---- Options ---------------------------------------------------------------------------
 * Keys (value strings; sizes accept K/M/G/T suffixes, powers of 1024). Every key has an
 * environment variable TUTTI_<KEY in upper case> that sets its default; tutti_options_set wins.
 * (TUTTI_DEBUG is no option: it adds the failing source line to tutti_last_error, and
 * tutti_runtime_register_kv prints to stderr the backend and layer paths it chose, and why.)
 *   pool             URI of a pool file; repeat to stripe over several SSDs.
 *                    file:///abs/path/pool?size=64G, or a plain path. A directory means
 *                    <dir>/tutti.pool. Default (TUTTI_POOL): ./tutti.pool
 *   capacity         total size of newly created pool files (split evenly) when a URI has no
 *                    ?size=. Default 8G. An existing pool keeps its size.
 *   chunk_tokens     tokens per stored chunk, whatever the engine's block size (a chunk may
 *                    start inside a block; since 0.6.0). Default 256.
 *   partial_tokens   a store whose range ends inside a chunk also stores that chunk's tokens,
 *                    rounded down to a multiple of this, as a partial chunk: a slot of its own
 *                    under a key of its own, found by lookups and loads of a prompt that has
 *                    all of its tokens. 0 (or >= chunk_tokens): whole chunks only. Default 16.
 *                    Since 0.6.0. (io_mode=per-block-baseline: whole chunks only, and loads
 *                    of whole chunks: TUTTI_EUNSUPPORTED for other ranges.)
 *   backend          auto | uring | posix | gpu-uring | cufile | dram | passthru | nvme.
 *                    Default auto: uring where io_uring works, except for pools on tmpfs:
 *                    dram, faster there (posix with io_mode=per-block-baseline or a
 *                    dram_tier; before 0.7 always posix), and for pools on an NVMe namespace
 *                    with a KV cache in host memory: nvme where it works, else passthru.
 *                    gpu-uring: loads into CUDA memory whose io_uring submissions the GPU
 *                    writes and whose completions it polls. cufile: loads into CUDA memory
 *                    through NVIDIA cuFile. (Both: stores through uring.)
 *                    dram: a pool on tmpfs, mapped; CUDA memory is copied to and from it by
 *                    kernels, with no I/O. passthru: loads as NVMe Read commands through
 *                    io_uring on the namespace's /dev/ngXnY (pool on an NVMe namespace; the
 *                    filesystem stays mounted; stores through uring). nvme: loads as NVMe
 *                    Read commands on queue pairs of tutti_kmod (kmod/), on a controller that
 *                    shares the pool's namespace; SGLs scatter straight into the blocks
 *                    (stores through uring). TUTTI_EUNSUPPORTED with
 *                    the reason where one cannot work (tutti info lists them).
 *   namespace        salt mixed into every chunk key (model id, tenant). Default "".
 *   io_mode          object (one I/O per chunk and layer; default) | per-block-baseline (one I/O
 *                    per block and K/V through staging: the page-granular path of other SSD
 *                    tiers, kept only for comparison).
 *   direct_to_blocks auto | on | off. Read/write straight between the SSD and the KV blocks with
 *                    vectored I/O when the layout is aligned (auto, default); off always stages.
 *   verify           on | unsafe-off. on (default): every chunk-layer loaded is checked against
 *                    the checksum stored with it, where its bytes land (by the I/O thread in
 *                    host memory; by a checksum kernel on the GPU in CUDA memory); a mismatch
 *                    fails that chunk with TUTTI_ECORRUPT, and tutti forgets it (later
 *                    lookups end before it, so the engine recomputes it and a store writes
 *                    it anew; since 0.4.0). unsafe-off skips the checks: a damaged pool then
 *                    hands back wrong KV as success.
 *   dram_tier        bytes of host memory above the pool (default 0: none) that keep the
 *                    chunk-layers most recently stored or loaded: a load of one still there
 *                    is a memcpy, not an I/O. Write-through; the pool stays the truth. With the
 *                    CPU producers (uring, posix, passthru, nvme), also into CUDA memory.
 *   staging          bytes of aligned staging memory (default 256M; less is rounded up to one
 *                    chunk-layer). A load into CUDA memory holds each chunk-layer's buffer
 *                    until a copy kernel moved it into the blocks; what does not fit goes in
 *                    waves. Only gpu-uring holds whole layers of the batch (up to lookahead of
 *                    them), and refuses a staging smaller than one. Stores have staging of
 *                    their own, half as much, so a load never waits for a store's buffers.
 *   device_staging   bytes of GPU memory, half for loads and half for stores, that bytes
 *                    between host memory (staging of uring, posix, passthru, nvme and
 *                    gpu-uring; the dram pool) and CUDA memory cross through on the GPU's copy
 *                    engines; the copy kernels then move them between it and the blocks at HBM
 *                    speed, so the model's kernels keep their SMs while bytes cross PCIe.
 *                    Loads use theirs in two halves: the DMA into one overlaps the scatter out
 *                    of the other. auto (default): 64M, or two chunk-layers if more. A size: at
 *                    least two chunk-layers. 0: the copy kernels read and write host memory
 *                    over PCIe themselves (their warps wait on PCIe, occupying SMs).
 *   load_priority    normal | high: the CUDA stream priority of a load's copy and checksum
 *                    kernels and of gpu-uring's read kernels. normal (default): CUDA's
 *                    default, which an engine's streams have unless it chose otherwise. high:
 *                    the device's highest, so their thread blocks go to the SMs before the
 *                    engine's waiting ones (with device_staging=0 that includes copy kernels
 *                    whose warps wait on PCIe). DMAs on the copy engines are not affected.
 *   stream_wait      host | gpu: how tutti_batch_wait_layer_async waits outside CUDA graph
 *                    capture. host (default): the call returns once the layer's copies are
 *                    queued on tutti's stream (the stream then waits for them by event) or
 *                    the layer is in place. gpu: it returns at once, and a one-warp kernel
 *                    spins on the stream until the layer is in place; the spinning kernel can
 *                    deadlock the device (see tutti_batch_wait_layer_async).
 *   lookahead        layers kept in flight ahead of the consumer (default 4).
 *   nvme_controller  nvme: tutti_kmod's controller number (default 0).
 *   nvme_data_pointer  nvme: auto (SGLs where the controller has them) | sgl | prp.
 *   rings            io_uring rings, each with its own thread (default 4; gpu-uring: at most 8,
 *                    each with a SQPOLL thread).
 *   queue_depth      I/Os in flight per ring (default 64).
 *   async_reads      auto | on | off: uring and gpu-uring hand reads to io_uring's worker
 *                    threads (IOSQE_ASYNC) instead of doing them in the ring's own thread (or
 *                    SQPOLL thread). auto (default): for pool files whose bytes the CPU copies
 *                    in the submitting thread: tmpfs, ramfs, and block devices that are memory
 *                    (zram, which also decompresses there; brd; pmem).
 *   store_sums       gpu | cpu: who computes the checksums of a store from CUDA memory for its
 *                    commit records. gpu (default): the gather's checksum kernel hashes the
 *                    blocks it gathers, and the CPU only adds up its terms; cpu: the thread
 *                    that writes it (the scheduler thread for dram) reads the stored bytes
 *                    again (dram stores from HBM then run at a fifth of the speed).
 *   threads          posix, dram and cufile worker threads (default auto: the CPUs the process
 *                    may run on, less 4 left to the engine's own threads, from 4 to 16).
 *   store_nice       CPU nice value (0-19, default 19) of the threads that write stores:
 *                    loads have threads (posix, uring, dram) of their own, at the process's
 *                    priority, so neither a load nor the engine's threads wait for a store's
 *                    CPU work (a zram or software-RAID write compresses or computes parity in
 *                    the thread that writes).
 *   store_slack      layers (default 0: off). A store's layers wait while a load is in flight;
 *                    with store_slack N > 0 one of them at a time is also written while every
 *                    load in flight has at least N layers in place beyond the one its engine
 *                    computes (where its thread waits in tutti_batch_wait_layer, or in CUDA
 *                    memory where its stream has passed its tutti_batch_wait_layer_async); a
 *                    load whose engine waits for the whole batch, or has not waited yet, has
 *                    none. Measured (docs/ttft.md): from a DRAM pool a store finishes sooner at
 *                    no cost to the load; from zram, whose writes take the CPU the load's
 *                    reads need, N = 2 slowed the load. Since 0.7.0.
 *   store_yield_ms   how long (ms, 0-1000, default 0: not at all) each write of a store that
 *                    is not staged yet waits while a load is in flight (the scheduler already
 *                    holds a store's next layers back then), so the rest of the layer being
 *                    issued when the load came leaves the device to it; writes already staged
 *                    go on. A wait is bounded: with loads always in flight, stores still move.
 *                    Since 0.7.0.
 *   load_timeout_ms  how long (ms, default 0: as long as the reads take) a load's waits wait
 *                    for a layer: tutti_batch_wait_layer for its own, tutti_batch_wait for each
 *                    in turn. When it passes the load gives up: every chunk of the batch fails
 *                    (TUTTI_EIO: the wait returns it, tutti_batch_result says so at once, later
 *                    waits return it too), and no byte read after that reaches the blocks, so
 *                    the engine may recompute into them at once. The reads in flight still end
 *                    in their own time (tutti_batch_poll says when; tutti_batch_destroy waits
 *                    for them). Loads under it go through staging
 *                    (a read straight into the blocks could not be called back): one more copy.
 *                    In CUDA memory the give-up also waits for the copies already queued on
 *                    tutti's stream and releases the stream waits on the batch
 *                    (tutti_batch_wait_layer_async waits on the host, at most that long, and
 *                    returns TUTTI_EIO; a wait inside CUDA graph capture is refused:
 *                    TUTTI_EUNSUPPORTED). Not with backend gpu-uring (TUTTI_EUNSUPPORTED from
 *                    tutti_runtime_register_kv). Since 0.7.0.
 *   sqpoll_idle_ms   gpu-uring: ms without submissions before a SQPOLL thread sleeps
 *                    (default 2); it spins while awake.
 *   sqpoll_shared    gpu-uring: 1 (default) = every ring shares the first ring's SQPOLL
 *                    thread (IORING_SETUP_ATTACH_WQ): one spinning thread instead of one per
 *                    ring; 0 = one each. Measured on the H200 machine's disk at 32K tokens:
 *                    SQPOLL CPU per layer 81-90 ms with one thread per ring, 5 ms shared,
 *                    at the same GB/s.
 *   gpu_uring_completions  gpu | cpu: who reaps gpu-uring's completions. gpu (default):
 *                    each layer's read kernel polls the rings' completion queues, so a
 *                    block of it stays on an SM until the layer's reads are over; cpu: the
 *                    kernel ends once the SQEs are published and gpu-uring's copier thread
 *                    waits for the completions in io_uring_enter. Since 0.7.0.
 *   create           1 | 0. Create missing pool files (default 1).
 *   ranks, rank      one pool for the ranks of a tensor-parallel engine (one process and one
 *                    runtime per rank, each with its own shard of the KV): with ranks=N > 1,
 *                    the pool's slots are split into N equal shares, and the runtime with
 *                    rank=R (0 .. N-1) owns share R alone: its stores, evictions and recovery
 *                    never touch another rank's, and R is mixed into its chunk keys. The ranks
 *                    may start together: one creates the pool and the others wait for it. N is
 *                    fixed when the pool is created: another N fails with TUTTI_ELAYOUT, as
 *                    does a runtime without ranks; two runtimes with one R, TUTTI_EBUSY.
 *                    Default 1 and 0 (a pool of one runtime). Since 0.7.0.
 *   kv_events        how many KV events (chunks stored and removed) the runtime keeps for
 *                    tutti_runtime_events; 0 (default): none are kept. Since 0.7.0.
 *   lookup_socket    a Unix socket path where the runtime answers lookups of other processes
 *                    (tutti_lookup_client_open), from tutti_runtime_register_kv (which opens
 *                    it, like the pool files) until close. A stale socket there (its runtime
 *                    died) is replaced; one a live runtime serves fails with TUTTI_EBUSY,
 *                    anything else there with TUTTI_EINVAL. Made owner-only (0600). Default:
 *                    none. Since 0.5.0.
 *   remote           a shared tier below the pool, on a Redis Cluster: redis://host:port
 *                    [,host:port...] (any of its nodes; default: none). Lookups go on in it
 *                    past the pool's hit; loads take the chunks the pool lacks from it layer
 *                    by layer, each value checked against the key it was read under and its
 *                    checksum (a value that fails, or a node that does not answer in time,
 *                    makes its chunk a miss: TUTTI_ENOENT), and copy them into the pool in
 *                    the background; chunks stored in the pool are written to it in the
 *                    background. A cluster that cannot be reached leaves the runtime on its
 *                    pool alone, with a warning (tutti_set_log_callback), and is tried again
 *                    every second. Leases do not pin its chunks. TUTTI_EUNSUPPORTED from
 *                    tutti_runtime_register_kv in a build without hiredis. Since 0.7.0.
 *   remote_timeout_ms  the deadline of every call to the remote tier (default 200).
 *   remote_admit     all (default) | twice: the chunks written to the remote tier: every one
 *                    stored, or those a lookup found again after they were stored.
 *   remote_min_tokens  prefixes shorter than this are not written to the remote tier
 *                    (default 0).
 *   remote_promote   1 (default) | 0: copy chunks loaded from the remote tier into the pool.
 *   remote_connections  threads that load from the remote tier, each with a connection to
 *                    every node it asks (default 1).
 */
typedef struct tutti_options tutti_options;

TUTTI_API int tutti_options_create(tutti_options** out);
TUTTI_API void tutti_options_destroy(tutti_options* opts);
TUTTI_API int tutti_options_set(tutti_options* opts, const char* key, const char* value);

/* ---- Runtime -------------------------------------------------------------------------- */

typedef struct tutti_runtime tutti_runtime;

/* Validates options and pool paths (unset keys: TUTTI_* variables, then defaults). The pool
 * files are opened (or created) when the KV cache is registered, because their layout
 * fingerprint is the model's KV shape. A pool is locked by the runtime that opened it:
 * a second runtime's tutti_runtime_register_kv on the same files gets TUTTI_EBUSY until the
 * first is closed. */
TUTTI_API int tutti_runtime_open(const tutti_options* opts, tutti_runtime** out);
/* Waits until every submitted batch has ended (loads landed, stores committed or failed), then
 * closes the pool files and releases their locks, so the pool may be opened again at once,
 * in this process too. A batch still alive afterwards keeps its results (tutti_batch_wait,
 * _result, _chunk_status) and must still be destroyed; tutti_batch_submit on it returns
 * TUTTI_ESTATE. Accepts NULL. */
TUTTI_API void tutti_runtime_close(tutti_runtime* rt);

/* The backend in use, e.g. "uring": a static string (`auto` is settled when the KV cache is
 * registered). */
TUTTI_API const char* tutti_runtime_backend(const tutti_runtime* rt);

/* ---- The engine's paged KV cache ------------------------------------------------------
 * One layer holds num_blocks blocks of block_tokens tokens; each token has num_kv_heads rows
 * of head_dim elements of elem_bytes each, for K and for V. A row (head_dim * elem_bytes) is
 * contiguous; everything else is described by byte strides, which covers:
 *   separate K/V tensors [num_blocks, block_tokens, heads, head_dim] (NHD): k_base[l], v_base[l]
 *   a fused vLLM tensor [2, num_blocks, block_tokens, heads, head_dim]: k_base[l] = data,
 *     v_base = NULL, v_offset = num_blocks * block_stride
 *   HND ([.., heads, block_tokens, head_dim]): head_stride = block_tokens * row,
 *     token_stride = row.
 * The pool's fingerprint is (num_layers, num_kv_heads, head_dim, elem_bytes, chunk_tokens, K only). */
typedef enum tutti_memory {
  TUTTI_MEMORY_HOST = 0, /* host memory (also "host memory standing in for the GPU") */
  TUTTI_MEMORY_CUDA = 1  /* CUDA device memory; TUTTI_EUNSUPPORTED in a build without CUDA */
} tutti_memory;

/* tutti_kv_layout.flags. Since 0.6.0. */
enum {
  /* K only, no V: one latent vector per token (MLA: num_kv_heads 1, head_dim the latent's
   * elements, e.g. 576 for DeepSeek-V3). v_base and v_offset are ignored; a chunk-layer on
   * disk is its K alone. Part of the pool's fingerprint. */
  TUTTI_KV_K_ONLY = 1
};

typedef struct tutti_kv_layout {
  uint32_t struct_size; /* sizeof(tutti_kv_layout) */
  uint32_t num_layers;
  uint32_t num_blocks;   /* blocks per layer */
  uint32_t block_tokens; /* tokens per block */
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t elem_bytes; /* 2 for bf16/fp16 */
  uint32_t memory;     /* tutti_memory */
  int32_t device;      /* CUDA device ordinal (ignored for host memory) */
  uint32_t flags;      /* TUTTI_KV_K_ONLY, or 0 (other bits: TUTTI_EINVAL). Since 0.6.0 */
  uint64_t block_stride; /* bytes between consecutive blocks */
  uint64_t token_stride; /* bytes between consecutive tokens of a block */
  uint64_t head_stride;  /* bytes between consecutive heads of a token */
  void* const* k_base;   /* [num_layers] address of block 0's K, per layer */
  void* const* v_base;   /* [num_layers] address of block 0's V, or NULL: k_base + v_offset */
  uint64_t v_offset;     /* used when v_base is NULL (fused tensors) */
} tutti_kv_layout;

/* Fills strides for a contiguous NHD layout ([blocks, block_tokens, heads, head_dim]) or HND
 * ([blocks, heads, block_tokens, head_dim]), leaves addresses to the caller. hnd is 0 or 1. */
TUTTI_API int tutti_kv_layout_init(tutti_kv_layout* layout, uint32_t num_layers,
                                   uint32_t num_blocks, uint32_t block_tokens,
                                   uint32_t num_kv_heads, uint32_t head_dim, uint32_t elem_bytes,
                                   int hnd);

/* Registers the engine's KV cache (once per runtime) and opens or creates the pool for its
 * shape. TUTTI_ELAYOUT if the pool was made for another shape; TUTTI_ESTATE if already done. */
TUTTI_API int tutti_runtime_register_kv(tutti_runtime* rt, const tutti_kv_layout* layout);

/* ---- Lookup ----------------------------------------------------------------------------
 * How many leading tokens of the prompt are cached: whole chunks, then the longest partial
 * chunk that follows them (a multiple of partial_tokens; since 0.6.0). Chunk keys chain
 * (parent key, chunk tokens, namespace, salt), so a hit is always a prefix. salt may be NULL
 * when salt_len is 0. */
TUTTI_API int tutti_lookup(tutti_runtime* rt, const int32_t* tokens, size_t num_tokens,
                           const void* salt, size_t salt_len, size_t* cached_tokens);

/* A lookup that also pins what it found: the cached_tokens it reports are not evicted until
 * tutti_lease_release, or until ttl_ms milliseconds have passed (0: no expiry), so a load
 * submitted meanwhile (vLLM: the scheduler looks up, a worker loads later) cannot miss them
 * through eviction. *out is a lease even on a miss (it then pins nothing); release every lease,
 * expired or not. A lease may outlive tutti_runtime_close. Since 0.4.0. */
typedef struct tutti_lease tutti_lease;
TUTTI_API int tutti_lookup_lease(tutti_runtime* rt, const int32_t* tokens, size_t num_tokens,
                                 const void* salt, size_t salt_len, uint32_t ttl_ms,
                                 size_t* cached_tokens, tutti_lease** out);
/* Unpins what the lease still holds, and frees it. Accepts NULL. Since 0.4.0. */
TUTTI_API void tutti_lease_release(tutti_lease* lease);

/* ---- Lookup from another process ---------------------------------------------------------
 * An engine's scheduler process asks how much of a prompt is cached while the workers own the
 * pools: each worker's runtime is opened with lookup_socket=PATH, and the scheduler connects
 * a client to it. A client may be used from several threads (calls are taken in turn).
 *
 * tutti_lookup_client_open connects (TUTTI_EIO when no runtime serves PATH; TUTTI_EACCES when
 * the socket is not this user's); timeout_ms bounds each later call's wait for an answer
 * (0: no bound). tutti_lookup_client_query is tutti_lookup in the serving runtime; with lease
 * non-NULL it is tutti_lookup_lease there: the cached tokens stay pinned until
 * tutti_lookup_client_release(lease), ttl_ms (0: no expiry), or the client's connection ends
 * (closed, or its process died), and *lease is its id. Errors are the runtime's. Before its
 * tutti_runtime_register_kv nobody answers at PATH (TUTTI_EIO). When it closes or dies, or an answer
 * does not come within timeout_ms, the call fails with TUTTI_EIO and every lease of the client
 * ends with its connection: treat it as a miss. The next call connects again, so a runtime
 * restarted at PATH is found. Releasing a lease that already ended does nothing. Since 0.5.0. */
typedef struct tutti_lookup_client tutti_lookup_client;
TUTTI_API int tutti_lookup_client_open(const char* socket_path, uint32_t timeout_ms,
                                       tutti_lookup_client** out);
TUTTI_API int tutti_lookup_client_query(tutti_lookup_client* c, const int32_t* tokens,
                                        size_t num_tokens, const void* salt, size_t salt_len,
                                        uint32_t ttl_ms, size_t* cached_tokens, uint64_t* lease);
TUTTI_API int tutti_lookup_client_release(tutti_lookup_client* c, uint64_t lease);
/* Closes the connection (ending its leases) and frees the client. Accepts NULL. */
TUTTI_API void tutti_lookup_client_close(tutti_lookup_client* c);

/* ---- Batches ---------------------------------------------------------------------------
 * A batch loads or stores the KV of several requests. After submit it is consumed per layer:
 * tutti_batch_wait_layer(b, L) returns once layer L of every request has landed in the blocks
 * (load) or has been written to the pool (store: the blocks of layer L may be reused). Loads
 * are scheduled before stores. A stored chunk becomes visible to lookups once every layer is
 * durable and its commit record is written. */
typedef enum tutti_op {
  TUTTI_OP_LOAD = 0,
  TUTTI_OP_STORE = 1,
  /* A store whose layers become ready one by one while the engine computes them (vLLM's
   * save_kv_layer): layer L is written only after tutti_batch_layer_ready(b, L, ...), so the
   * writes run behind the compute of the next layers. Since 0.4.0. */
  TUTTI_OP_STORE_BY_LAYER = 2,
  TUTTI_OP_MIN_ENUM_ = -0x7fffffff - 1, /* not ops: with these two, any int is a valid */
  TUTTI_OP_MAX_ENUM_ = 0x7fffffff       /* tutti_op value (others are TUTTI_EINVAL) */
} tutti_op;

/* token_end of a request that moves every whole chunk of its prompt (no partial chunk). */
#define TUTTI_TOKENS_ALL ((size_t)-1)

typedef struct tutti_request {
  const int32_t* tokens;      /* the prompt's token ids, from token 0 */
  size_t num_tokens;
  const int32_t* block_table; /* block_table[i] holds tokens [i*block_tokens, (i+1)*block_tokens) */
  size_t num_block_ids;       /* entries in block_table */
  size_t token_begin;         /* range to move, [token_begin, token_end): any tokens (0.6.0;
                                 before, whole chunks). A load moves exactly those tokens' rows
                                 and no other byte of the blocks. A store writes the chunks
                                 that hold them, from the start of token_begin's chunk, whole,
                                 and where the range ends inside a chunk, that chunk's tokens
                                 up to a multiple of partial_tokens as a partial chunk */
  size_t token_end;           /* at most num_tokens, or TUTTI_TOKENS_ALL for every whole chunk.
                                 An empty range (end == begin, e.g. a lookup's 0) moves
                                 nothing. block_table must cover [0, token_end) */
  const void* salt;           /* per-request salt (LoRA id, cache salt); may be NULL */
  size_t salt_len;
} tutti_request;

typedef struct tutti_result {
  int status;          /* 0, or the first error of this request */
  uint32_t chunks;     /* chunks in the requested range */
  uint32_t chunks_ok;  /* chunks moved (load) or stored / already present (store) */
  uint32_t reserved;
  size_t tokens;       /* tokens moved (a store: stored or present), from token_begin up to the
                          first failed chunk */
} tutti_result;

typedef struct tutti_batch tutti_batch;

TUTTI_API int tutti_batch_create(tutti_runtime* rt, tutti_op op, tutti_batch** out);
/* Adds n requests (one call, however many blocks; it may be called again before submit, and
 * requests are numbered in the order added). Validates every block id and range. */
TUTTI_API int tutti_batch_add(tutti_batch* b, const tutti_request* reqs, size_t n);
/* Plans the batch (pins what it loads, claims slots for what it stores) and hands it to the
 * runtime's threads; returns without waiting for I/O, except that a gpu-uring load first waits
 * until the staging of its layers in flight is free (another gpu-uring load may hold it). */
TUTTI_API int tutti_batch_submit(tutti_batch* b);
/* Blocks until layer `layer` is done for the whole batch; with option load_timeout_ms, a load's
 * wait gives up after that long (TUTTI_EIO, every chunk of the batch failed; see there). */
TUTTI_API int tutti_batch_wait_layer(tutti_batch* b, uint32_t layer);
/* CUDA memory only: a wait for layer `layer` of this load batch, and of every load batch
 * submitted before it, ordered with `cuda_stream` (a cudaStream_t; NULL = the legacy default
 * stream): work queued on the stream after the call sees those batches' bytes of the layer in
 * the blocks. A batch submitted later is not waited for by the call (an engine may submit the
 * next step's load while this step's work is queued). Outside graph capture (option stream_wait=host, the
 * default) the call blocks until the bytes are in place or every copy that brings them is
 * queued on tutti's own CUDA stream; then it makes `cuda_stream` wait for those copies with a
 * CUDA event (one stream, in order: the GPU may then also wait for copies tutti queued before,
 * of a later batch too). Either way the GPU only ever waits for work already queued, never for
 * tutti's threads. Inside CUDA graph capture (or with stream_wait=gpu) it returns at once and a
 * one-warp kernel on the stream spins until the layer is in place; a captured wait applies to
 * whichever load batch is the most recent one when it runs (and the ones before it), so
 * submit a batch before launching a graph that waits on it. A spinning wait holds its stream,
 * and streams share the device's hardware queues: when tutti's copies (or gpu-uring's read
 * kernels) queue behind the engine's work that waits on the spin, the device deadlocks (seen
 * on the H200 with many streams and a slow pool); CUDA_DEVICE_MAX_CONNECTIONS=32 makes
 * sharing rarer, not impossible. Returns TUTTI_EINVAL for a store batch or host memory. */
TUTTI_API int tutti_batch_wait_layer_async(tutti_batch* b, uint32_t layer, void* cuda_stream);
/* A TUTTI_OP_STORE_BY_LAYER batch, after submit: the blocks of layer `layer` now hold what the
 * batch stores. In CUDA memory, "now" is in the order of `cuda_stream` (a cudaStream_t; NULL =
 * the legacy default stream): tutti records an event there and its store thread waits for it
 * before reading the layer, so the call never blocks; in host memory `cuda_stream` is ignored.
 * Layers are written in order, each once it and every layer before it are ready; the batch
 * commits when every layer is written. tutti_batch_wait before every layer is declared ready
 * (and tutti_batch_wait_layer for a layer not declared) returns TUTTI_ESTATE instead of
 * waiting for the caller itself. Destroying the batch, or closing its runtime, before every
 * layer is declared stores nothing, and waits for no other batch. Returns TUTTI_EINVAL for
 * another op, a layer out of range or one declared twice, TUTTI_ESTATE before submit. Since
 * 0.4.0. */
TUTTI_API int tutti_batch_layer_ready(tutti_batch* b, uint32_t layer, void* cuda_stream);
/* How far a submitted batch has come, without blocking: *layers_done is how many layers are done
 * in order from layer 0 (tutti_batch_wait_layer returns at once for those), and *done is 1 once
 * the whole batch is (a store: committed), else 0: tutti_batch_wait then returns at once.
 * Returns TUTTI_ESTATE before submit. Since 0.4.0. */
TUTTI_API int tutti_batch_poll(const tutti_batch* b, uint32_t* layers_done, int* done);
/* Blocks until the batch is done (a store: committed). Returns the first request error, if any. */
TUTTI_API int tutti_batch_wait(tutti_batch* b);
TUTTI_API int tutti_batch_result(const tutti_batch* b, size_t request, tutti_result* out);
/* Per-chunk status of one request (0 or a tutti_error), n = min(cap, chunks). */
TUTTI_API int tutti_batch_chunk_status(const tutti_batch* b, size_t request, int* status,
                                       size_t cap, size_t* n);
/* Waits for anything in flight, then frees. Accepts NULL. */
TUTTI_API void tutti_batch_destroy(tutti_batch* b);

/* ---- Statistics ----------------------------------------------------------------------- */

typedef struct tutti_stats {
  uint32_t struct_size; /* sizeof(tutti_stats) */
  uint32_t num_layers;
  uint64_t bytes_read;
  uint64_t bytes_written;
  uint64_t ios;           /* I/O operations issued */
  uint64_t lookups;
  uint64_t hit_chunks;    /* chunks found by lookups */
  uint64_t miss_chunks;   /* lookups that stopped at a missing chunk (one per such lookup) */
  uint64_t stored_chunks; /* chunks committed */
  uint64_t evictions;
  uint64_t failed_chunks; /* chunks a batch could not move */
  uint64_t slots_total;
  uint64_t slots_used;
  uint64_t layer_waits;   /* tutti_batch_wait_layer(_async) calls */
  uint64_t layer_wait_ns; /* time spent blocked in them */
  /* Since 0.2 (a caller built against 0.1 passes a smaller struct_size and gets the above). */
  uint64_t tier_hits;     /* chunk-layer loads served by the DRAM tier (option dram_tier) */
  uint64_t tier_misses;   /* chunk-layer loads it did not hold: read from the pool */
  /* Since 0.7.0: the shared tier (option remote), and loads given up on. */
  uint64_t remote_hit_chunks;      /* chunks lookups found in it past the local pool's hit */
  uint64_t remote_loaded_chunks;   /* chunks loads took from it, every layer checked */
  uint64_t remote_written_chunks;  /* chunks written through to it */
  uint64_t remote_promoted_chunks; /* chunks copied from it into the local pool */
  uint64_t remote_rejected;        /* values refused (another key, shape or layer, bad checksum) */
  uint64_t remote_errors;          /* calls to it that failed or ran past remote_timeout_ms */
  uint64_t load_timeouts;          /* load batches that gave up (option load_timeout_ms) */
} tutti_stats;

TUTTI_API int tutti_runtime_stats(const tutti_runtime* rt, tutti_stats* out);
/* Time spent waiting per layer (ns), summed over all batches; n = min(cap, num_layers). */
TUTTI_API int tutti_runtime_layer_wait_ns(const tutti_runtime* rt, uint64_t* ns, size_t cap,
                                          size_t* n);

/* ---- Histograms (since 0.7.0) ----------------------------------------------------------
 * Latencies since the runtime opened. Bucket i < TUTTI_HISTOGRAM_BUCKETS - 1 counts the
 * samples of at most 2^i microseconds and more than 2^(i-1) (bucket 0: at most 1 us); the
 * last bucket counts every longer one (over 2^22 us, about 4.2 s). */
#define TUTTI_HISTOGRAM_BUCKETS 24

typedef enum tutti_histogram_kind {
  TUTTI_HISTOGRAM_LAYER_WAIT = 0, /* each tutti_batch_wait_layer(_async) call: how long the
                                     engine waited for a layer (the bubble) */
  TUTTI_HISTOGRAM_LOAD = 1,       /* each load batch: from submit to its last layer in place */
  TUTTI_HISTOGRAM_STORE = 2       /* each store batch: from submit to its commit */
} tutti_histogram_kind;

typedef struct tutti_histogram {
  uint64_t count;  /* samples */
  uint64_t sum_ns; /* their sum */
  uint64_t buckets[TUTTI_HISTOGRAM_BUCKETS];
} tutti_histogram;

TUTTI_API int tutti_runtime_histogram(const tutti_runtime* rt, int kind, tutti_histogram* out);

/* ---- KV events (since 0.7.0) -----------------------------------------------------------
 * What the pool gained and lost, for an engine's router that sends prompts where their prefix
 * is cached. With option kv_events=N > 0 the runtime keeps its last N events (older ones are
 * dropped, and counted); tutti_runtime_events hands them out oldest first and forgets them.
 * One thread at a time may call it. */
typedef enum tutti_kv_event_type {
  TUTTI_KV_STORED = 1, /* a chunk was committed (a store) */
  TUTTI_KV_REMOVED = 2 /* a chunk left the pool: evicted for room, or discarded as damaged */
} tutti_kv_event_type;

typedef struct tutti_kv_event {
  uint32_t type;          /* tutti_kv_event_type */
  uint32_t num_tokens;    /* STORED: the chunk's tokens (< chunk_tokens: a partial chunk); else 0 */
  uint64_t key[2];        /* the chunk's key (as lookups chain them) */
  uint64_t parent[2];     /* STORED: the key of the chunk before it in its prompt; 0 for a
                             prompt's first chunk, and for REMOVED */
  const int32_t* tokens;  /* STORED: its num_tokens token ids, valid until the next
                             tutti_runtime_events call on this runtime; else NULL */
} tutti_kv_event;

/* Moves up to cap pending events into out (n: how many); *dropped (may be NULL) receives how
 * many were dropped since the last call because more than kv_events were pending.
 * TUTTI_ESTATE without option kv_events. */
TUTTI_API int tutti_runtime_events(tutti_runtime* rt, tutti_kv_event* out, size_t cap, size_t* n,
                                   uint64_t* dropped);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_H */
