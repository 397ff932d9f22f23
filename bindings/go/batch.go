// SPDX-License-Identifier: Apache-2.0

package tutti

/*
#include <stdlib.h>
#include "tutti.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Op is what a batch does.
type Op int

const (
	Load  Op = C.TUTTI_OP_LOAD
	Store Op = C.TUTTI_OP_STORE
	// StoreByLayer is a store whose layers become ready one by one (Batch.LayerReady) as the
	// engine computes them.
	StoreByLayer Op = C.TUTTI_OP_STORE_BY_LAYER
)

// TokensAll as a Request's TokenEnd moves every whole chunk of the prompt.
const TokensAll = -1

// Request is one prompt's range to load or store. Tokens and BlockTable must not change until
// the batch is closed.
type Request struct {
	Tokens     []int32
	BlockTable []int32
	TokenBegin int // any token (since 0.6)
	TokenEnd   int // any token (a store ending inside a chunk stores a partial chunk); TokensAll: every whole chunk; 0 moves nothing
	Salt       []byte
}

// Result is what a request moved.
type Result struct {
	Status   error // nil, or the request's first error
	Chunks   int   // chunks in the requested range
	ChunksOK int   // chunks moved (load) or stored or already present (store)
	TokensOK int   // tokens moved from TokenBegin up to the first failed chunk
}

// Batch moves requests layer by layer. It belongs to one goroutine at a time; Close it.
type Batch struct {
	raw  *C.tutti_batch
	rt   *Runtime // the runtime outlives its batches on the Go side too
	pins pins     // keeps the requests' memory where the runtime reads it
}

// NewBatch creates an empty load or store batch.
func (rt *Runtime) NewBatch(op Op) (*Batch, error) {
	defer runtime.KeepAlive(rt)
	h, err := rt.handle()
	if err != nil {
		return nil, err
	}
	b := &Batch{rt: rt}
	if err := locked(func() C.int { return C.tutti_batch_create(h, C.tutti_op(op), &b.raw) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(b, (*Batch).Close)
	return b, nil
}

func (b *Batch) handle() (*C.tutti_batch, error) {
	if b == nil || b.raw == nil {
		return nil, &Error{Code: ESTATE, Message: "the batch is closed"}
	}
	return b.raw, nil
}

// Add adds requests before Submit.
func (b *Batch) Add(reqs ...Request) error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil || len(reqs) == 0 {
		return err
	}
	// The request array holds pointers, so it lives in C memory for the call.
	arr := (*[1 << 24]C.tutti_request)(C.calloc(C.size_t(len(reqs)), C.size_t(unsafe.Sizeof(C.tutti_request{}))))
	defer C.free(unsafe.Pointer(arr))
	for i, r := range reqs {
		c := &arr[i]
		c.tokens, c.num_tokens = b.pins.int32s(r.Tokens)
		c.block_table, c.num_block_ids = b.pins.int32s(r.BlockTable)
		c.token_begin, c.token_end = C.size_t(r.TokenBegin), C.size_t(r.TokenEnd)
		if r.TokenEnd == TokensAll {
			c.token_end = ^C.size_t(0) // TUTTI_TOKENS_ALL
		}
		c.salt, c.salt_len = b.pins.bytes(r.Salt)
	}
	return locked(func() C.int { return C.tutti_batch_add(h, &arr[0], C.size_t(len(reqs))) })
}

// Submit starts the batch: its layers are read (or written) in order from now on.
func (b *Batch) Submit() error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int { return C.tutti_batch_submit(h) })
}

// WaitLayer blocks until layer is in place (load) or may be overwritten (store).
func (b *Batch) WaitLayer(layer int) error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int { return C.tutti_batch_wait_layer(h, C.uint32_t(layer)) })
}

// WaitLayerAsync enqueues the wait on a CUDA stream (a cudaStream_t) instead of blocking.
func (b *Batch) WaitLayerAsync(layer int, stream uintptr) error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int {
		return C.tutti_batch_wait_layer_async(h, C.uint32_t(layer), foreign(stream))
	})
}

// LayerReady says, for a StoreByLayer batch after Submit, that the blocks of layer now hold
// what it stores (in CUDA memory: in the order of stream, a cudaStream_t; 0 elsewhere).
func (b *Batch) LayerReady(layer int, stream uintptr) error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int {
		return C.tutti_batch_layer_ready(h, C.uint32_t(layer), foreign(stream))
	})
}

// Poll says how far the batch has come, without blocking: the layers done in order from layer
// 0, and whether the whole batch is done.
func (b *Batch) Poll() (int, bool, error) {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return 0, false, err
	}
	var layers C.uint32_t
	var done C.int
	err = locked(func() C.int { return C.tutti_batch_poll(h, &layers, &done) })
	return int(layers), done != 0, err
}

// Wait blocks until the batch is done (a store: committed); the first request error, if any.
func (b *Batch) Wait() error {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return err
	}
	return locked(func() C.int { return C.tutti_batch_wait(h) })
}

// Result reports request i (after Wait).
func (b *Batch) Result(i int) (Result, error) {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return Result{}, err
	}
	var r C.tutti_result
	if err := locked(func() C.int { return C.tutti_batch_result(h, C.size_t(i), &r) }); err != nil {
		return Result{}, err
	}
	out := Result{Chunks: int(r.chunks), ChunksOK: int(r.chunks_ok), TokensOK: int(r.tokens)}
	if r.status != 0 {
		out.Status = &Error{Code: Code(r.status)}
	}
	return out, nil
}

// ChunkStatus returns request i's per-chunk status codes (0 or a Code), after Wait.
func (b *Batch) ChunkStatus(i int) ([]Code, error) {
	defer runtime.KeepAlive(b)
	h, err := b.handle()
	if err != nil {
		return nil, err
	}
	buf := make([]C.int, 1<<16)
	var n C.size_t
	if err := locked(func() C.int { return C.tutti_batch_chunk_status(h, C.size_t(i), &buf[0], C.size_t(len(buf)), &n) }); err != nil {
		return nil, err
	}
	out := make([]Code, n)
	for j := range out {
		out[j] = Code(buf[j])
	}
	return out, nil
}

// Close waits for anything in flight, then frees the batch and unpins its requests' memory.
func (b *Batch) Close() error {
	if b.raw != nil {
		C.tutti_batch_destroy(b.raw)
		b.raw = nil
		b.pins.release()
	}
	runtime.SetFinalizer(b, nil)
	runtime.KeepAlive(b.rt)
	return nil
}
