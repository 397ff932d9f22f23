// SPDX-License-Identifier: Apache-2.0

// Package tutti is the Go binding of tutti, an SSD-backed KV-cache runtime for LLM serving:
// keep prefix KV caches in a pool on local NVMe and stream them back into the engine's paged
// KV cache layer by layer. It is cgo on tutti.h, the library's stable C ABI, found with
// pkg-config (package libtutti-dev; PKG_CONFIG_PATH for another prefix).
//
// Token ids and block tables are passed as []int32 without copying: cgo pins them during each
// call, and a Batch keeps them referenced (and pinned in C memory terms: see Add) until it is
// closed, since the runtime reads them until the batch is done.
package tutti

/*
#cgo pkg-config: tutti
#include <stdlib.h>
#include "tutti.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// foreign turns an address outside Go's heap (CUDA or C memory, a CUDA stream) into the
// unsafe.Pointer cgo passes. Read through memory, it is no uintptr-to-Pointer conversion: the
// rule go vet checks there is about Go memory, which this never is.
func foreign(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// Code is a tutti_error.
type Code int

const (
	EINVAL       Code = C.TUTTI_EINVAL
	ENOMEM       Code = C.TUTTI_ENOMEM
	EIO          Code = C.TUTTI_EIO
	ENOSPC       Code = C.TUTTI_ENOSPC
	ENOENT       Code = C.TUTTI_ENOENT
	ELAYOUT      Code = C.TUTTI_ELAYOUT
	ECORRUPT     Code = C.TUTTI_ECORRUPT
	ESTATE       Code = C.TUTTI_ESTATE
	EUNSUPPORTED Code = C.TUTTI_EUNSUPPORTED
	EACCES       Code = C.TUTTI_EACCES
	EINTERNAL    Code = C.TUTTI_EINTERNAL
	EBUSY        Code = C.TUTTI_EBUSY
)

func (c Code) String() string { return C.GoString(C.tutti_strerror(C.int(c))) }

// Error is a failed call: its code and the library's message.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "tutti: " + e.Code.String()
	}
	return "tutti: " + e.Code.String() + ": " + e.Message
}

// Is lets errors.Is(err, tutti.ENOENT) match by code.
func (e *Error) Is(target error) bool {
	var c Code
	if errors.As(target, &c) {
		return e.Code == c
	}
	return false
}

func (c Code) Error() string { return c.String() }

// check turns a return code into an error. The message is thread-local in C, so the calling
// goroutine must stay on its thread between the call and this (see locked).
func check(rc C.int) error {
	if rc == 0 {
		return nil
	}
	return &Error{Code: Code(rc), Message: C.GoString(C.tutti_last_error())}
}

// locked runs f on one OS thread, so that the thread-local last error belongs to f's call.
func locked(f func() C.int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(f())
}

// Version is the version of the loaded library.
func Version() string { return C.GoString(C.tutti_version_string()) }

// VersionNumber is major*10000 + minor*100 + patch of the loaded library.
func VersionNumber() uint { return uint(C.tutti_version_number()) }

// Runtime is an open pool with (once registered) the engine's KV cache. Safe for concurrent use;
// Close it once, after the other calls have returned.
//
// Every method of Runtime, Batch, Lease and LookupClient keeps its receiver alive until its C
// call has returned (runtime.KeepAlive): a finalizer would otherwise close a handle in use.
type Runtime struct {
	raw     *C.tutti_runtime
	events  sync.Mutex // tutti_runtime_events: one caller at a time
	closing sync.Mutex // two Closes close once
}

// Open validates options (tutti.h's keys: pool, capacity, chunk_tokens, backend, ...) and opens
// a runtime. Keys not given come from TUTTI_* environment variables, then defaults.
func Open(options map[string]string) (*Runtime, error) {
	var opts *C.tutti_options
	if err := locked(func() C.int { return C.tutti_options_create(&opts) }); err != nil {
		return nil, err
	}
	defer C.tutti_options_destroy(opts)
	for k, v := range options {
		ck, cv := C.CString(k), C.CString(v)
		err := locked(func() C.int { return C.tutti_options_set(opts, ck, cv) })
		C.free(unsafe.Pointer(ck))
		C.free(unsafe.Pointer(cv))
		if err != nil {
			return nil, err
		}
	}
	rt := &Runtime{}
	if err := locked(func() C.int { return C.tutti_runtime_open(opts, &rt.raw) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(rt, (*Runtime).Close)
	return rt, nil
}

// Close closes the runtime (batches still open keep it alive until they are closed).
func (rt *Runtime) Close() error {
	rt.closing.Lock()
	defer rt.closing.Unlock()
	if rt.raw != nil {
		C.tutti_runtime_close(rt.raw)
		rt.raw = nil
	}
	runtime.SetFinalizer(rt, nil)
	return nil
}

func (rt *Runtime) handle() (*C.tutti_runtime, error) {
	if rt == nil || rt.raw == nil {
		return nil, &Error{Code: ESTATE, Message: "the runtime is closed"}
	}
	return rt.raw, nil
}

// Backend names the backend in use ("uring", "posix", ...).
func (rt *Runtime) Backend() string {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return ""
	}
	return C.GoString(C.tutti_runtime_backend(h))
}

// Memory says where the KV cache lives.
type Memory uint32

const (
	Host Memory = C.TUTTI_MEMORY_HOST
	CUDA Memory = C.TUTTI_MEMORY_CUDA
)

// Layout describes the engine's paged KV cache. K and V hold per layer the address of block
// 0's K (V); with V nil each layer is one fused tensor whose V starts VOffset bytes after K.
// KOnly: K alone, no V (MLA: one latent vector per token; V and VOffset are ignored).
// Addresses are uintptr because the memory is not Go's (C, mmap, or CUDA device memory).
type Layout struct {
	Layers, Blocks, BlockTokens, KVHeads, HeadDim, ElemBytes uint32
	HND                                                      bool
	Memory                                                   Memory
	Device                                                   int32
	K, V                                                     []uintptr
	VOffset                                                  uint64 // 0: Blocks * BlockStride
	KOnly                                                    bool
	// Strides in bytes; zero means the packed layout of HND/NHD.
	BlockStride, TokenStride, HeadStride uint64
}

// RegisterKV registers the engine's KV cache and opens (or creates) the pool for its shape.
func (rt *Runtime) RegisterKV(l Layout) error {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return err
	}
	if uint32(len(l.K)) != l.Layers || (l.V != nil && uint32(len(l.V)) != l.Layers) {
		return &Error{Code: EINVAL, Message: fmt.Sprintf("K and V must hold one address per layer (%d)", l.Layers)}
	}
	var cl C.tutti_kv_layout
	hnd := C.int(0)
	if l.HND {
		hnd = 1
	}
	if err := locked(func() C.int {
		return C.tutti_kv_layout_init(&cl, C.uint32_t(l.Layers), C.uint32_t(l.Blocks), C.uint32_t(l.BlockTokens),
			C.uint32_t(l.KVHeads), C.uint32_t(l.HeadDim), C.uint32_t(l.ElemBytes), hnd)
	}); err != nil {
		return err
	}
	if l.BlockStride != 0 {
		cl.block_stride, cl.token_stride, cl.head_stride = C.uint64_t(l.BlockStride), C.uint64_t(l.TokenStride), C.uint64_t(l.HeadStride)
	}
	cl.memory = C.uint32_t(l.Memory)
	if l.KOnly {
		cl.flags = C.TUTTI_KV_K_ONLY
	}
	cl.device = C.int32_t(l.Device)
	// The address arrays go in C memory: a Go pointer may not be stored in memory C reads.
	n := C.size_t(len(l.K)) * C.size_t(unsafe.Sizeof(uintptr(0)))
	k := (*[1 << 20]unsafe.Pointer)(C.malloc(n))
	defer C.free(unsafe.Pointer(k))
	for i, a := range l.K {
		k[i] = foreign(a)
	}
	cl.k_base = (*unsafe.Pointer)(unsafe.Pointer(k))
	if l.V != nil {
		v := (*[1 << 20]unsafe.Pointer)(C.malloc(n))
		defer C.free(unsafe.Pointer(v))
		for i, a := range l.V {
			v[i] = foreign(a)
		}
		cl.v_base = (*unsafe.Pointer)(unsafe.Pointer(v))
	} else {
		cl.v_offset = C.uint64_t(l.VOffset)
		if l.VOffset == 0 {
			cl.v_offset = C.uint64_t(l.Blocks) * cl.block_stride
		}
	}
	return locked(func() C.int { return C.tutti_runtime_register_kv(h, &cl) })
}

func int32s(s []int32) (*C.int32_t, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.int32_t)(unsafe.Pointer(&s[0])), C.size_t(len(s))
}

func bytesOf(b []byte) (unsafe.Pointer, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), C.size_t(len(b))
}

// Lookup returns how many leading tokens are cached (a multiple of chunk_tokens).
func (rt *Runtime) Lookup(tokens []int32, salt []byte) (int, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return 0, err
	}
	t, n := int32s(tokens)
	s, sn := bytesOf(salt)
	var hit C.size_t
	err = locked(func() C.int { return C.tutti_lookup(h, t, n, s, sn, &hit) })
	return int(hit), err
}

// Lease is what LookupLease found, pinned until Release (it may outlive the runtime).
type Lease struct {
	h      *C.tutti_lease
	Tokens int // the cached tokens it pins
}

// LookupLease is Lookup that pins what it found until Release, or until ttlMs milliseconds have
// passed (0: no expiry): a load meanwhile cannot miss it through eviction.
func (rt *Runtime) LookupLease(tokens []int32, salt []byte, ttlMs uint32) (*Lease, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return nil, err
	}
	t, n := int32s(tokens)
	s, sn := bytesOf(salt)
	var hit C.size_t
	var l *C.tutti_lease
	err = locked(func() C.int { return C.tutti_lookup_lease(h, t, n, s, sn, C.uint32_t(ttlMs), &hit, &l) })
	if err != nil {
		return nil, err
	}
	lease := &Lease{h: l, Tokens: int(hit)}
	runtime.SetFinalizer(lease, (*Lease).Release)
	return lease, nil
}

// Release unpins what the lease holds; later calls do nothing.
func (l *Lease) Release() {
	defer runtime.KeepAlive(l)
	if l.h != nil {
		C.tutti_lease_release(l.h)
		l.h = nil
		runtime.SetFinalizer(l, nil)
	}
}

// LookupClient is a connection to the lookup service of a runtime in another process (its
// option lookup_socket): how an engine's scheduler asks what the workers' pools hold. A call
// that finds the runtime closed or dead fails with EIO (count it as a miss); the next one
// connects again. Safe for concurrent use (calls are taken in turn).
type LookupClient struct {
	h       *C.tutti_lookup_client
	closing sync.Mutex // two Closes close once
}

// DialLookup connects to the runtime serving socketPath; timeoutMs bounds each call's wait
// for an answer (0: none).
func DialLookup(socketPath string, timeoutMs uint32) (*LookupClient, error) {
	p := C.CString(socketPath)
	defer C.free(unsafe.Pointer(p))
	var h *C.tutti_lookup_client
	if err := locked(func() C.int { return C.tutti_lookup_client_open(p, C.uint32_t(timeoutMs), &h) }); err != nil {
		return nil, err
	}
	c := &LookupClient{h: h}
	runtime.SetFinalizer(c, (*LookupClient).Close)
	return c, nil
}

func (c *LookupClient) handle() (*C.tutti_lookup_client, error) {
	if c == nil || c.h == nil {
		return nil, &Error{Code: ESTATE, Message: "the lookup client is closed"}
	}
	return c.h, nil
}

// Lookup is Runtime.Lookup in the serving runtime.
func (c *LookupClient) Lookup(tokens []int32, salt []byte) (int, error) {
	defer runtime.KeepAlive(c)
	h, err := c.handle()
	if err != nil {
		return 0, err
	}
	t, n := int32s(tokens)
	s, sn := bytesOf(salt)
	var hit C.size_t
	err = locked(func() C.int { return C.tutti_lookup_client_query(h, t, n, s, sn, 0, &hit, nil) })
	return int(hit), err
}

// LookupLease is Runtime.LookupLease in the serving runtime: the cached tokens and the lease's
// id. The lease ends with Release, ttlMs (0: none), or this client's connection.
func (c *LookupClient) LookupLease(tokens []int32, salt []byte, ttlMs uint32) (int, uint64, error) {
	defer runtime.KeepAlive(c)
	h, err := c.handle()
	if err != nil {
		return 0, 0, err
	}
	t, n := int32s(tokens)
	s, sn := bytesOf(salt)
	var hit C.size_t
	var lease C.uint64_t
	err = locked(func() C.int {
		return C.tutti_lookup_client_query(h, t, n, s, sn, C.uint32_t(ttlMs), &hit, &lease)
	})
	return int(hit), uint64(lease), err
}

// Release ends a lease of this client (one that already ended: nothing).
func (c *LookupClient) Release(lease uint64) error {
	defer runtime.KeepAlive(c)
	h, err := c.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int { return C.tutti_lookup_client_release(h, C.uint64_t(lease)) })
}

// Close closes the connection, ending its leases; later calls do nothing.
func (c *LookupClient) Close() {
	c.closing.Lock()
	defer c.closing.Unlock()
	if c.h != nil {
		C.tutti_lookup_client_close(c.h)
		c.h = nil
		runtime.SetFinalizer(c, nil)
	}
}

// Stats are the runtime's counters (tutti_stats in tutti.h).
type Stats struct {
	Layers                                                       uint32
	BytesRead, BytesWritten, IOs, Lookups, HitChunks, MissChunks uint64
	StoredChunks, Evictions, FailedChunks, SlotsTotal, SlotsUsed uint64
	LayerWaits, LayerWaitNs                                      uint64
	TierHits, TierMisses                                         uint64 // the DRAM tier (option dram_tier)
	RemoteHitChunks, RemoteLoadedChunks, RemoteWrittenChunks     uint64 // the shared tier (option remote)
	RemotePromotedChunks, RemoteRejected, RemoteErrors           uint64
	LoadTimeouts                                                 uint64 // load batches that gave up (option load_timeout_ms)
}

// Stats returns the runtime's counters.
func (rt *Runtime) Stats() (Stats, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return Stats{}, err
	}
	var s C.tutti_stats
	s.struct_size = C.uint32_t(unsafe.Sizeof(s))
	if err := locked(func() C.int { return C.tutti_runtime_stats(h, &s) }); err != nil {
		return Stats{}, err
	}
	return Stats{
		Layers: uint32(s.num_layers), BytesRead: uint64(s.bytes_read), BytesWritten: uint64(s.bytes_written),
		IOs: uint64(s.ios), Lookups: uint64(s.lookups), HitChunks: uint64(s.hit_chunks), MissChunks: uint64(s.miss_chunks),
		StoredChunks: uint64(s.stored_chunks), Evictions: uint64(s.evictions), FailedChunks: uint64(s.failed_chunks),
		SlotsTotal: uint64(s.slots_total), SlotsUsed: uint64(s.slots_used), LayerWaits: uint64(s.layer_waits),
		LayerWaitNs: uint64(s.layer_wait_ns), TierHits: uint64(s.tier_hits), TierMisses: uint64(s.tier_misses),
		RemoteHitChunks: uint64(s.remote_hit_chunks), RemoteLoadedChunks: uint64(s.remote_loaded_chunks),
		RemoteWrittenChunks: uint64(s.remote_written_chunks), RemotePromotedChunks: uint64(s.remote_promoted_chunks),
		RemoteRejected: uint64(s.remote_rejected), RemoteErrors: uint64(s.remote_errors),
		LoadTimeouts: uint64(s.load_timeouts),
	}, nil
}

// LayerWaitNs returns, per layer, the time spent blocked in WaitLayer.
func (rt *Runtime) LayerWaitNs() ([]uint64, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 4096)
	var n C.size_t
	err = locked(func() C.int {
		return C.tutti_runtime_layer_wait_ns(h, (*C.uint64_t)(unsafe.Pointer(&out[0])), C.size_t(len(out)), &n)
	})
	return out[:n], err
}

// HistogramKind names a latency histogram of a runtime.
type HistogramKind int

const (
	HistogramLayerWait HistogramKind = C.TUTTI_HISTOGRAM_LAYER_WAIT // each wait for a layer (the bubble)
	HistogramLoad      HistogramKind = C.TUTTI_HISTOGRAM_LOAD       // each load batch, submit to in place
	HistogramStore     HistogramKind = C.TUTTI_HISTOGRAM_STORE      // each store batch, submit to commit
)

// HistogramBuckets is the number of buckets: bucket i < HistogramBuckets-1 counts the samples
// of at most 2^i microseconds, the last every longer one.
const HistogramBuckets = C.TUTTI_HISTOGRAM_BUCKETS

// Histogram is a latency histogram since the runtime opened.
type Histogram struct {
	Count   uint64
	SumNs   uint64
	Buckets [HistogramBuckets]uint64
}

// Histogram reads one of the runtime's latency histograms.
func (rt *Runtime) Histogram(kind HistogramKind) (Histogram, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return Histogram{}, err
	}
	var c C.tutti_histogram
	if err := locked(func() C.int { return C.tutti_runtime_histogram(h, C.int(kind), &c) }); err != nil {
		return Histogram{}, err
	}
	out := Histogram{Count: uint64(c.count), SumNs: uint64(c.sum_ns)}
	for i := range out.Buckets {
		out.Buckets[i] = uint64(c.buckets[i])
	}
	return out, nil
}

// KvEvent is a chunk the pool gained (Stored: with its tokens, and the key of the chunk before
// it in its prompt, zero for the first) or lost. Keys are 128 bits, low word first.
type KvEvent struct {
	Stored bool
	Key    [2]uint64
	Parent [2]uint64
	Tokens []int32
}

// Events returns the KV events since the last call (option kv_events), oldest first, at most
// max, and how many were dropped because more were pending than the runtime keeps.
func (rt *Runtime) Events(max int) ([]KvEvent, uint64, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil || max <= 0 {
		return nil, 0, err
	}
	rt.events.Lock()
	defer rt.events.Unlock()
	raw := make([]C.tutti_kv_event, max)
	var n C.size_t
	var dropped C.uint64_t
	if err := locked(func() C.int { return C.tutti_runtime_events(h, &raw[0], C.size_t(max), &n, &dropped) }); err != nil {
		return nil, 0, err
	}
	out := make([]KvEvent, int(n))
	for i := range out {
		e := &raw[i]
		out[i] = KvEvent{Stored: e._type == C.TUTTI_KV_STORED, Key: [2]uint64{uint64(e.key[0]), uint64(e.key[1])},
			Parent: [2]uint64{uint64(e.parent[0]), uint64(e.parent[1])}}
		if e.tokens != nil { // valid until the next call: copied now, under the lock
			out[i].Tokens = append([]int32(nil), unsafe.Slice((*int32)(unsafe.Pointer(e.tokens)), int(e.num_tokens))...)
		}
	}
	return out, uint64(dropped), nil
}
