// SPDX-License-Identifier: Apache-2.0
//! tutti: keep prefix KV caches of LLM serving on local NVMe and stream them back into the
//! engine's paged KV cache layer by layer. A safe API over `tutti-sys` (bindgen, from tutti.h).
//!
//! ```ignore
//! let rt = tutti::Runtime::open(&[("pool", "/nvme/kv.pool"), ("capacity", "64G")])?;
//! unsafe { rt.register_kv(&layout)? };          // the runtime writes into those blocks
//! let hit = rt.lookup(&tokens, None)?;
//! let mut b = rt.batch(tutti::Op::Load)?;
//! b.add(&[tutti::Request::new(&tokens[..hit], &block_table)])?;
//! b.submit()?;
//! for layer in 0..layers { b.wait_layer(layer)?; /* run the layer */ }
//! b.wait()?;
//! ```
//!
//! Token ids and block tables are borrowed, never copied: a `Batch<'a>` cannot outlive them.

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use tutti_sys as sys;

/// A tutti_error code with the library's message for the failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: i32,
    pub message: String,
}

impl Error {
    /// The code's name (tutti_strerror).
    pub fn name(&self) -> &'static str {
        name_of(self.code)
    }
    fn new(code: i32, message: &str) -> Error {
        Error { code, message: message.to_string() }
    }
}

fn name_of(code: i32) -> &'static str {
    // Safety: tutti_strerror returns a static NUL-terminated string for any code.
    unsafe { CStr::from_ptr(sys::tutti_strerror(code)) }.to_str().unwrap_or("?")
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "tutti: {}", self.name())
        } else {
            write!(f, "tutti: {}: {}", self.name(), self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

pub const EINVAL: i32 = sys::tutti_error_TUTTI_EINVAL;
pub const EIO: i32 = sys::tutti_error_TUTTI_EIO;
pub const ENOSPC: i32 = sys::tutti_error_TUTTI_ENOSPC;
pub const ENOENT: i32 = sys::tutti_error_TUTTI_ENOENT;
pub const ELAYOUT: i32 = sys::tutti_error_TUTTI_ELAYOUT;
pub const ECORRUPT: i32 = sys::tutti_error_TUTTI_ECORRUPT;
pub const ESTATE: i32 = sys::tutti_error_TUTTI_ESTATE;
pub const EUNSUPPORTED: i32 = sys::tutti_error_TUTTI_EUNSUPPORTED;
pub const EBUSY: i32 = sys::tutti_error_TUTTI_EBUSY;

/// Turns a return code into a Result; the message is the calling thread's last error, read
/// right after the call on the same thread.
fn check(rc: i32) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    // Safety: tutti_last_error returns a valid NUL-terminated string owned by this thread.
    let msg = unsafe { CStr::from_ptr(sys::tutti_last_error()) };
    Err(Error::new(rc, &msg.to_string_lossy()))
}

/// The version of the loaded library, e.g. "0.1.0".
pub fn version() -> String {
    // Safety: a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::tutti_version_string()) }.to_string_lossy().into_owned()
}

/// major * 10000 + minor * 100 + patch of the loaded library.
pub fn version_number() -> u32 {
    // Safety: no arguments, no state.
    unsafe { sys::tutti_version_number() }
}

/// Levels of tutti's log (`set_log_callback`).
pub const LOG_ERROR: i32 = 0;
pub const LOG_WARN: i32 = 1;
pub const LOG_INFO: i32 = 2;
pub const LOG_DEBUG: i32 = 3;

static LOGGER: std::sync::RwLock<Option<fn(i32, &str)>> = std::sync::RwLock::new(None);

extern "C" fn log_trampoline(level: std::os::raw::c_int, message: *const std::os::raw::c_char, _user: *mut c_void) {
    let f = match LOGGER.read() {
        Ok(g) => *g,
        Err(_) => None,
    };
    if let Some(f) = f {
        // Safety: tutti passes a NUL-terminated message that lives for the call.
        let m = unsafe { CStr::from_ptr(message) }.to_string_lossy();
        // A panic must not unwind into tutti's threads.
        let _ = std::panic::catch_unwind(|| f(level, &m));
    }
}

/// Sends tutti's log (chunks discarded for a failed checksum, torn records found at open,
/// lookup clients hung up on, the backend chosen) up to `level` to `f`, from tutti's own
/// threads; `None` stops it (the variable `TUTTI_LOG` then decides what goes to stderr).
pub fn set_log_callback(f: Option<fn(i32, &str)>, level: i32) {
    *LOGGER.write().unwrap_or_else(|e| e.into_inner()) = f;
    let trampoline: sys::tutti_log_fn = if f.is_some() { Some(log_trampoline) } else { None };
    // Safety: the trampoline lives for the program; it reads LOGGER, which is always valid.
    unsafe { sys::tutti_set_log_callback(trampoline, ptr::null_mut(), level) };
}

/// Where the KV cache lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    Host,
    /// CUDA device memory of this device ordinal.
    Cuda(i32),
}

/// The engine's paged KV cache: shape and per-layer addresses of block 0's K (and V).
#[derive(Debug, Clone)]
pub struct Layout {
    pub layers: u32,
    pub blocks: u32,
    pub block_tokens: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub elem_bytes: u32,
    /// Blocks of [kv_heads, block_tokens, head_dim] instead of [block_tokens, kv_heads, head_dim].
    pub hnd: bool,
    pub memory: Memory,
    pub k: Vec<*mut c_void>,
    /// Per layer V, or None: each layer is one fused tensor, V at `v_offset` bytes after K
    /// (None: blocks * block stride).
    pub v: Option<Vec<*mut c_void>>,
    pub v_offset: Option<u64>,
    /// K only, no V: one latent vector per token (MLA; kv_heads 1, head_dim the latent's
    /// elements). `v` and `v_offset` are then ignored.
    pub k_only: bool,
}

/// What a batch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Load,
    Store,
    /// A store whose layers become ready one by one (`Batch::layer_ready`) as the engine
    /// computes them.
    StoreByLayer,
}

/// `token_end` of a request that moves every whole chunk of its prompt.
pub const TOKENS_ALL: usize = usize::MAX;

/// One prompt's range to load or store. Borrowed: the batch reads it until it is done.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub tokens: &'a [i32],
    pub block_table: &'a [i32],
    /// A multiple of chunk_tokens.
    pub token_begin: usize,
    /// Rounded down to a whole chunk; TOKENS_ALL (what `new` sets): the whole prompt; 0 (a
    /// lookup's miss) moves nothing.
    pub token_end: usize,
    pub salt: Option<&'a [u8]>,
}

impl<'a> Request<'a> {
    pub fn new(tokens: &'a [i32], block_table: &'a [i32]) -> Request<'a> {
        Request { tokens, block_table, token_begin: 0, token_end: TOKENS_ALL, salt: None }
    }
}

/// What a request moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestResult {
    /// 0, or the request's first error.
    pub status: i32,
    pub chunks: u32,
    pub chunks_ok: u32,
    pub tokens: usize,
}

pub type Stats = sys::tutti_stats;

/// An open pool with (once registered) the engine's KV cache.
pub struct Runtime {
    raw: NonNull<sys::tutti_runtime>,
}

// Safety: tutti.h, convention 4: a runtime may be used from several threads at once.
unsafe impl Send for Runtime {}
// Safety: as above; every method takes &self and the C side synchronises.
unsafe impl Sync for Runtime {}

impl Runtime {
    /// Opens a runtime with tutti.h's option keys (pool, capacity, chunk_tokens, backend, ...).
    /// Keys not given come from TUTTI_* environment variables, then defaults.
    pub fn open(options: &[(&str, &str)]) -> Result<Runtime> {
        let mut opts: *mut sys::tutti_options = ptr::null_mut();
        // Safety: a valid out-pointer.
        check(unsafe { sys::tutti_options_create(&mut opts) })?;
        let result = (|| {
            for (k, v) in options {
                let (k, v) = (cstring(k)?, cstring(v)?);
                // Safety: opts is live; k and v are NUL-terminated and outlive the call.
                check(unsafe { sys::tutti_options_set(opts, k.as_ptr(), v.as_ptr()) })?;
            }
            let mut raw: *mut sys::tutti_runtime = ptr::null_mut();
            // Safety: opts is live; a valid out-pointer.
            check(unsafe { sys::tutti_runtime_open(opts, &mut raw) })?;
            NonNull::new(raw).map(|raw| Runtime { raw }).ok_or_else(|| Error::new(EINVAL, "no runtime"))
        })();
        // Safety: created above, destroyed once; the runtime does not keep it.
        unsafe { sys::tutti_options_destroy(opts) };
        result
    }

    /// The backend in use ("uring", "posix", ...).
    pub fn backend(&self) -> String {
        // Safety: a live runtime; the string is static.
        unsafe { CStr::from_ptr(sys::tutti_runtime_backend(self.raw.as_ptr())) }.to_string_lossy().into_owned()
    }

    /// Registers the engine's KV cache and opens (or creates) the pool for its shape.
    ///
    /// # Safety
    /// Every address in `layout` must stay valid, for the memory kind given, for all
    /// `layout.blocks` blocks of every layer, as long as this runtime lives: batches read and
    /// write them from tutti's threads (and kernels, for CUDA memory).
    pub unsafe fn register_kv(&self, layout: &Layout) -> Result<()> {
        let l = &layout;
        if l.k.len() != l.layers as usize || l.v.as_ref().map_or(false, |v| v.len() != l.layers as usize) {
            return Err(Error::new(EINVAL, "k and v must hold one address per layer"));
        }
        let mut c: sys::tutti_kv_layout = std::mem::zeroed();
        check(sys::tutti_kv_layout_init(&mut c, l.layers, l.blocks, l.block_tokens, l.kv_heads, l.head_dim,
                                        l.elem_bytes, l.hnd as i32))?;
        match l.memory {
            Memory::Host => c.memory = sys::tutti_memory_TUTTI_MEMORY_HOST as u32,
            Memory::Cuda(d) => {
                c.memory = sys::tutti_memory_TUTTI_MEMORY_CUDA as u32;
                c.device = d;
            }
        }
        c.k_base = l.k.as_ptr() as *const *mut c_void;
        if l.k_only {
            c.flags = sys::TUTTI_KV_K_ONLY as u32;
        }
        match &l.v {
            Some(v) => c.v_base = v.as_ptr() as *const *mut c_void,
            None => c.v_offset = l.v_offset.unwrap_or(l.blocks as u64 * c.block_stride),
        }
        // tutti copies the address arrays during the call.
        check(sys::tutti_runtime_register_kv(self.raw.as_ptr(), &c))
    }

    /// How many leading tokens are cached (a multiple of chunk_tokens).
    pub fn lookup(&self, tokens: &[i32], salt: Option<&[u8]>) -> Result<usize> {
        let mut hit = 0usize;
        let (s, sn) = salt.map_or((ptr::null(), 0), |s| (s.as_ptr() as *const c_void, s.len()));
        // Safety: the slices are valid for the call; tutti keeps no pointer to them.
        check(unsafe { sys::tutti_lookup(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), s, sn, &mut hit) })?;
        Ok(hit)
    }

    /// `lookup` that pins what it found until the lease is dropped, or until `ttl_ms` have
    /// passed (0: no expiry): a load meanwhile cannot miss it through eviction.
    pub fn lookup_lease(&self, tokens: &[i32], salt: Option<&[u8]>, ttl_ms: u32) -> Result<Lease> {
        let mut hit = 0usize;
        let mut raw: *mut sys::tutti_lease = ptr::null_mut();
        let (s, sn) = salt.map_or((ptr::null(), 0), |s| (s.as_ptr() as *const c_void, s.len()));
        // Safety: the slices are valid for the call; valid out-pointers.
        check(unsafe {
            sys::tutti_lookup_lease(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), s, sn, ttl_ms, &mut hit, &mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(EINVAL, "no lease"))?;
        Ok(Lease { raw, tokens: hit })
    }

    /// A new, empty batch. It borrows the runtime and, through `add`, the requests' slices.
    pub fn batch<'a>(&'a self, op: Op) -> Result<Batch<'a>> {
        let mut raw: *mut sys::tutti_batch = ptr::null_mut();
        let op = match op {
            Op::Load => sys::tutti_op_TUTTI_OP_LOAD,
            Op::Store => sys::tutti_op_TUTTI_OP_STORE,
            Op::StoreByLayer => sys::tutti_op_TUTTI_OP_STORE_BY_LAYER,
        };
        // Safety: a live runtime; a valid out-pointer.
        check(unsafe { sys::tutti_batch_create(self.raw.as_ptr(), op, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(EINVAL, "no batch"))?;
        Ok(Batch { raw, owned: Vec::new(), _borrows: PhantomData })
    }

    pub fn stats(&self) -> Result<Stats> {
        // Safety: tutti_stats is plain data; zero is a valid value.
        let mut s: sys::tutti_stats = unsafe { std::mem::zeroed() };
        s.struct_size = std::mem::size_of::<sys::tutti_stats>() as u32;
        // Safety: a live runtime; s is a valid tutti_stats with struct_size set.
        check(unsafe { sys::tutti_runtime_stats(self.raw.as_ptr(), &mut s) })?;
        Ok(s)
    }

    /// Per layer, the time spent blocked in wait_layer.
    pub fn layer_wait_ns(&self) -> Result<Vec<u64>> {
        let mut out = vec![0u64; 4096];
        let mut n = 0usize;
        // Safety: out has out.len() elements; n is a valid out-pointer.
        check(unsafe { sys::tutti_runtime_layer_wait_ns(self.raw.as_ptr(), out.as_mut_ptr(), out.len(), &mut n) })?;
        out.truncate(n);
        Ok(out)
    }

    /// A latency histogram since the runtime opened (tutti_runtime_histogram).
    pub fn histogram(&self, kind: HistogramKind) -> Result<Histogram> {
        let kind = match kind {
            HistogramKind::LayerWait => sys::tutti_histogram_kind_TUTTI_HISTOGRAM_LAYER_WAIT,
            HistogramKind::Load => sys::tutti_histogram_kind_TUTTI_HISTOGRAM_LOAD,
            HistogramKind::Store => sys::tutti_histogram_kind_TUTTI_HISTOGRAM_STORE,
        };
        // Safety: tutti_histogram is plain data; zero is a valid value.
        let mut h: sys::tutti_histogram = unsafe { std::mem::zeroed() };
        // Safety: a live runtime; h is a valid out-pointer.
        check(unsafe { sys::tutti_runtime_histogram(self.raw.as_ptr(), kind as i32, &mut h) })?;
        Ok(h)
    }

    /// The KV events since the last call (option kv_events), oldest first, at most `max`, and
    /// how many were dropped because more were pending than the runtime keeps. `&mut`: one
    /// caller at a time, as tutti.h asks.
    pub fn events(&mut self, max: usize) -> Result<(Vec<KvEvent>, u64)> {
        // Safety: tutti_kv_event is plain data; zero is a valid value.
        let mut raw: Vec<sys::tutti_kv_event> = vec![unsafe { std::mem::zeroed() }; max];
        let (mut n, mut dropped) = (0usize, 0u64);
        // Safety: raw has max elements; n and dropped are valid out-pointers.
        check(unsafe { sys::tutti_runtime_events(self.raw.as_ptr(), raw.as_mut_ptr(), max, &mut n, &mut dropped) })?;
        let key = |k: &[u64; 2]| (k[1] as u128) << 64 | k[0] as u128;
        let events = raw[..n]
            .iter()
            .map(|e| {
                if e.type_ == sys::tutti_kv_event_type_TUTTI_KV_STORED {
                    let tokens = if e.tokens.is_null() {
                        Vec::new()
                    } else {
                        // Safety: tutti.h: num_tokens ids, valid until the next call (we copy now).
                        unsafe { std::slice::from_raw_parts(e.tokens, e.num_tokens as usize) }.to_vec()
                    };
                    let parent = key(&e.parent);
                    KvEvent::Stored { key: key(&e.key), parent: (parent != 0).then_some(parent), tokens }
                } else {
                    KvEvent::Removed { key: key(&e.key) }
                }
            })
            .collect();
        Ok((events, dropped))
    }
}

/// Which latency histogram: the waits for a layer, or whole load or store batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramKind {
    LayerWait,
    Load,
    Store,
}

/// tutti_histogram: count, sum_ns and buckets of powers of two microseconds.
pub type Histogram = sys::tutti_histogram;

/// A chunk the pool gained (with the key of the chunk before it in its prompt, none for the
/// first, and its tokens) or lost. Keys are the ones lookups chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    Stored { key: u128, parent: Option<u128>, tokens: Vec<i32> },
    Removed { key: u128 },
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Safety: owned, closed once. Batches borrow the runtime, so none is left.
        unsafe { sys::tutti_runtime_close(self.raw.as_ptr()) };
    }
}

/// Load or store requests layer by layer. Dropping it waits for anything in flight.
pub struct Batch<'a> {
    raw: NonNull<sys::tutti_batch>,
    // Copies of the requests' tokens and block tables, which the runtime reads until the batch
    // ends: owned by the batch, so one that is forgotten (mem::forget) leaks them rather than
    // leaving the runtime to read what the caller freed.
    owned: Vec<(Box<[i32]>, Box<[i32]>)>,
    _borrows: PhantomData<(&'a Runtime, &'a [i32])>,
}

// Safety: tutti.h, convention 4: a batch belongs to one thread at a time, so it may move
// between threads (Send) but not be shared (no Sync).
unsafe impl Send for Batch<'_> {}

impl<'a> Batch<'a> {
    /// Adds requests before submit (the batch keeps copies of their tokens and block tables).
    pub fn add(&mut self, reqs: &[Request<'a>]) -> Result<()> {
        let first = self.owned.len();
        self.owned.extend(reqs.iter().map(|r| (Box::from(r.tokens), Box::from(r.block_table))));
        let c: Vec<sys::tutti_request> = reqs
            .iter()
            .zip(&self.owned[first..])
            .map(|(r, (tokens, table))| {
                let (s, sn) = r.salt.map_or((ptr::null(), 0), |s| (s.as_ptr() as *const c_void, s.len()));
                sys::tutti_request {
                    tokens: tokens.as_ptr(),
                    num_tokens: tokens.len(),
                    block_table: table.as_ptr(),
                    num_block_ids: table.len(),
                    token_begin: r.token_begin,
                    token_end: r.token_end,
                    salt: s,
                    salt_len: sn,
                }
            })
            .collect();
        // Safety: a live batch; the array is valid for the call, the salts are copied by it,
        // and the tokens and tables it points to are the batch's own boxes (their memory does
        // not move when `owned` grows).
        check(unsafe { sys::tutti_batch_add(self.raw.as_ptr(), c.as_ptr(), c.len()) })
    }

    pub fn submit(&mut self) -> Result<()> {
        // Safety: a live batch.
        check(unsafe { sys::tutti_batch_submit(self.raw.as_ptr()) })
    }

    /// Blocks until `layer` is in place (load) or may be overwritten (store).
    pub fn wait_layer(&mut self, layer: u32) -> Result<()> {
        // Safety: a live batch.
        check(unsafe { sys::tutti_batch_wait_layer(self.raw.as_ptr(), layer) })
    }

    /// Enqueues the wait on a CUDA stream (a cudaStream_t) instead of blocking.
    pub fn wait_layer_async(&mut self, layer: u32, cuda_stream: *mut c_void) -> Result<()> {
        // Safety: a live batch; tutti only enqueues work on the stream the caller owns.
        check(unsafe { sys::tutti_batch_wait_layer_async(self.raw.as_ptr(), layer, cuda_stream) })
    }

    /// A `StoreByLayer` batch, after submit: the blocks of `layer` now hold what it stores (in
    /// CUDA memory: in the order of `cuda_stream`, a cudaStream_t; null elsewhere).
    pub fn layer_ready(&mut self, layer: u32, cuda_stream: *mut c_void) -> Result<()> {
        // Safety: a live batch; tutti only records an event on the stream the caller owns.
        check(unsafe { sys::tutti_batch_layer_ready(self.raw.as_ptr(), layer, cuda_stream) })
    }

    /// How far the batch has come, without blocking: the layers done in order from layer 0, and
    /// whether the whole batch is done.
    pub fn poll(&self) -> Result<(u32, bool)> {
        let (mut layers, mut done) = (0u32, 0i32);
        // Safety: a live batch; valid out-pointers.
        check(unsafe { sys::tutti_batch_poll(self.raw.as_ptr(), &mut layers, &mut done) })?;
        Ok((layers, done != 0))
    }

    /// Blocks until the batch is done (a store: committed); the first request error, if any.
    pub fn wait(&mut self) -> Result<()> {
        // Safety: a live batch.
        check(unsafe { sys::tutti_batch_wait(self.raw.as_ptr()) })
    }

    pub fn result(&self, request: usize) -> Result<RequestResult> {
        // Safety: tutti_result is plain data; zero is a valid value.
        let mut r: sys::tutti_result = unsafe { std::mem::zeroed() };
        // Safety: a live batch; a valid out-pointer.
        check(unsafe { sys::tutti_batch_result(self.raw.as_ptr(), request, &mut r) })?;
        Ok(RequestResult { status: r.status, chunks: r.chunks, chunks_ok: r.chunks_ok, tokens: r.tokens })
    }

    /// Per-chunk status (0 or a code) of a request, after wait.
    pub fn chunk_status(&self, request: usize) -> Result<Vec<i32>> {
        let mut out = vec![0i32; 1 << 16];
        let mut n = 0usize;
        // Safety: out has out.len() elements; n is a valid out-pointer.
        check(unsafe {
            sys::tutti_batch_chunk_status(self.raw.as_ptr(), request, out.as_mut_ptr(), out.len(), &mut n)
        })?;
        out.truncate(n);
        Ok(out)
    }
}

/// What `Runtime::lookup_lease` found, pinned until dropped (it may outlive the runtime).
pub struct Lease {
    raw: NonNull<sys::tutti_lease>,
    /// The cached tokens it pins.
    pub tokens: usize,
}

// Safety: a lease is released once, from whichever thread drops it; tutti locks internally.
unsafe impl Send for Lease {}

impl Drop for Lease {
    fn drop(&mut self) {
        // Safety: owned, released once.
        unsafe { sys::tutti_lease_release(self.raw.as_ptr()) };
    }
}

/// A connection to the lookup service of a runtime in another process (its option
/// `lookup_socket`): how an engine's scheduler asks what the workers' pools hold. A call that
/// finds the runtime closed or dead fails with `EIO` (count it as a miss); the next one
/// connects again.
pub struct LookupClient {
    raw: NonNull<sys::tutti_lookup_client>,
}

// Safety: tutti takes a client's calls in turn (it locks internally).
unsafe impl Send for LookupClient {}
unsafe impl Sync for LookupClient {}

impl LookupClient {
    /// Connects to the runtime serving `socket_path`; `timeout_ms` bounds each call's wait
    /// for an answer (0: none).
    pub fn connect(socket_path: &str, timeout_ms: u32) -> Result<LookupClient> {
        let path = cstring(socket_path)?;
        let mut raw: *mut sys::tutti_lookup_client = ptr::null_mut();
        // Safety: a valid C string and out-pointer.
        check(unsafe { sys::tutti_lookup_client_open(path.as_ptr(), timeout_ms, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(EINVAL, "no client"))?;
        Ok(LookupClient { raw })
    }

    /// `Runtime::lookup` in the serving runtime.
    pub fn lookup(&self, tokens: &[i32], salt: Option<&[u8]>) -> Result<usize> {
        let mut hit = 0usize;
        let (s, sn) = salt.map_or((ptr::null(), 0), |s| (s.as_ptr() as *const c_void, s.len()));
        // Safety: the slices are valid for the call; a NULL lease asks for no pin.
        check(unsafe {
            sys::tutti_lookup_client_query(
                self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), s, sn, 0, &mut hit, ptr::null_mut(),
            )
        })?;
        Ok(hit)
    }

    /// `Runtime::lookup_lease` in the serving runtime: (cached tokens, lease id). The lease
    /// ends with `release`, `ttl_ms` (0: none), or this client's connection.
    pub fn lookup_lease(&self, tokens: &[i32], salt: Option<&[u8]>, ttl_ms: u32) -> Result<(usize, u64)> {
        let (mut hit, mut lease) = (0usize, 0u64);
        let (s, sn) = salt.map_or((ptr::null(), 0), |s| (s.as_ptr() as *const c_void, s.len()));
        // Safety: the slices are valid for the call; valid out-pointers.
        check(unsafe {
            sys::tutti_lookup_client_query(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), s, sn, ttl_ms, &mut hit, &mut lease)
        })?;
        Ok((hit, lease))
    }

    /// Ends a lease of this client (one that already ended: nothing).
    pub fn release(&self, lease: u64) -> Result<()> {
        // Safety: a live client.
        check(unsafe { sys::tutti_lookup_client_release(self.raw.as_ptr(), lease) })
    }
}

impl Drop for LookupClient {
    fn drop(&mut self) {
        // Safety: owned, closed once.
        unsafe { sys::tutti_lookup_client_close(self.raw.as_ptr()) };
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // Safety: owned, destroyed once; it waits for in-flight work before freeing.
        unsafe { sys::tutti_batch_destroy(self.raw.as_ptr()) };
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(EINVAL, "a string holds a NUL byte"))
}
