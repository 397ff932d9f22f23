// SPDX-License-Identifier: Apache-2.0

package tutti

// The fixture of tests/fixture/ (tutti_fixture.h), same formula, for the Go tests: a KV cache of
// fused [2, blocks, bt, heads, dim] tensors per layer, the pattern of a request's rows filled
// into it and checked against it, a runtime on a pool in the test's temporary directory.
//
//	mix(x)  = splitmix64's finalizer of x + 0x9E3779B97F4A7C15 (wrapping uint64 arithmetic)
//	row     = mix(mix(mix(seed ^ uint32(token)) ^ position) ^ (layer<<32 | head<<1 | side))
//	byte[i] = mix(row ^ (i / 8)) >> (8 * (i % 8))    (i: byte offset within the row)

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"
)

const (
	layers, blocks, bt, heads, dim = 3, 64, 16, 2, 64
	row                            = dim * 2
	blockBytes                     = bt * heads * row
	layerBytes                     = 2 * blocks * blockBytes
	poison                         = 0xA5
)

// knownAnswers: (seed, token, position, layer, side, head, byte) -> value, computed by
// tests/fixture's C code (fixture_test.c checks the same table).
var knownAnswers = []struct {
	seed              uint64
	token             int32
	position          uint64
	layer, side, head uint32
	byte              uint64
	want              byte
}{
	{0, 0, 0, 0, 0, 0, 0, 0x68},
	{0, 1000, 0, 0, 0, 0, 0, 0xb9},
	{0, 1000, 17, 2, 1, 1, 77, 0x64},
	{0, 5063, 63, 1, 0, 1, 127, 0x58},
	{7, 42, 300, 3, 1, 7, 255, 0x36},
	{0x123456789ABCDEF0, 49999, 8191, 31, 1, 3, 4095, 0xfd},
}

func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func rowSeed(seed uint64, token int32, position uint64, layer, side, head uint32) uint64 {
	x := mix(seed ^ uint64(uint32(token)))
	x = mix(x ^ position)
	s := uint64(0)
	if side != 0 {
		s = 1
	}
	return mix(x ^ (uint64(layer)<<32 | uint64(head)<<1 | s))
}

func rowBytes(seed uint64, out []byte) {
	for i := range out {
		if i%8 == 0 {
			w := mix(seed ^ uint64(i/8))
			for j := i; j < len(out) && j < i+8; j++ {
				out[j] = byte(w >> (8 * (j % 8)))
			}
		}
	}
}

func patternByte(seed uint64, token int32, position uint64, layer, side, head uint32, i uint64) byte {
	return byte(mix(rowSeed(seed, token, position, layer, side, head)^(i/8)) >> (8 * (i % 8)))
}

// prompt is a request's rows: token p lies in block table[p/bt]; seed is the pattern's.
type prompt struct {
	tokens, table []int32
	seed          uint64
}

// kvCache is a fused [2, blocks, bt, heads, dim] fp16-sized cache per layer in mapped memory
// (the runtime writes into it from its own threads, so it must not be Go's heap), every byte
// poison at first.
type kvCache struct {
	mem []byte
}

func newKV(t *testing.T) *kvCache {
	mem, err := syscall.Mmap(-1, 0, layers*layerBytes, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	kv := &kvCache{mem: mem}
	kv.poison()
	return kv
}

func (kv *kvCache) poison() {
	for i := range kv.mem {
		kv.mem[i] = poison
	}
}

func (kv *kvCache) layout() Layout {
	l := Layout{Layers: layers, Blocks: blocks, BlockTokens: bt, KVHeads: heads, HeadDim: dim, ElemBytes: 2}
	for i := 0; i < layers; i++ {
		l.K = append(l.K, uintptr(unsafe.Pointer(&kv.mem[i*layerBytes])))
	}
	return l
}

// rowAt is where the row of (layer, side, block, slot, head) starts in mem.
func rowAt(l, side int, block int32, slot, h int) int {
	return l*layerBytes + side*layerBytes/2 + int(block)*blockBytes + (slot*heads+h)*row
}

// block returns layer l's K (side 0) or V (side 1) bytes of block b.
func (kv *kvCache) block(l, side, b int) []byte {
	at := rowAt(l, side, int32(b), 0, 0)
	return kv.mem[at : at+blockBytes]
}

// fill writes the pattern of positions [begin, end) into every layer, K and V.
func (kv *kvCache) fill(p prompt, begin, end int) {
	for t := begin; t < end && t < len(p.tokens); t++ {
		for l := 0; l < layers; l++ {
			for side := 0; side < 2; side++ {
				for h := 0; h < heads; h++ {
					at := rowAt(l, side, p.table[t/bt], t%bt, h)
					rowBytes(rowSeed(p.seed, p.tokens[t], uint64(t), uint32(l), uint32(side), uint32(h)), kv.mem[at:at+row])
				}
			}
		}
	}
}

// check compares the rows of positions [begin, end) of layers [lo, hi) with the pattern; it
// fails the test at the caller's line, naming the first wrong byte and both values.
func (kv *kvCache) check(t *testing.T, p prompt, begin, end, lo, hi int) {
	t.Helper()
	want := make([]byte, row)
	bad, first := 0, ""
	for pos := begin; pos < end && pos < len(p.tokens); pos++ {
		block, slot := p.table[pos/bt], pos%bt
		for l := lo; l < hi; l++ {
			for side := 0; side < 2; side++ {
				for h := 0; h < heads; h++ {
					at := rowAt(l, side, block, slot, h)
					got := kv.mem[at : at+row]
					rowBytes(rowSeed(p.seed, p.tokens[pos], uint64(pos), uint32(l), uint32(side), uint32(h)), want)
					for i := range want {
						if got[i] == want[i] {
							continue
						}
						if bad == 0 {
							first = fmt.Sprintf("token %d (block %d slot %d) layer %d %c head %d byte %d: got 0x%02x, expected 0x%02x",
								pos, block, slot, l, "KV"[side], h, i, got[i], want[i])
						}
						bad++
						break
					}
				}
			}
		}
	}
	if bad != 0 {
		t.Fatalf("%d rows differ from the stored bytes; first: %s", bad, first)
	}
}

// open is a runtime on a pool in the test's temporary directory, kv registered.
func open(t *testing.T, kv *kvCache) *Runtime {
	rt, err := Open(map[string]string{"pool": filepath.Join(t.TempDir(), "pool"), "capacity": "64M",
		"chunk_tokens": "64", "staging": "8M"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if err := rt.RegisterKV(kv.layout()); err != nil {
		t.Fatal(err)
	}
	return rt
}

// The values tests/fixture/fixture_test.c checks: the formula is the C fixture's.
func TestFixturePatternKnownAnswers(t *testing.T) {
	for _, k := range knownAnswers {
		if got := patternByte(k.seed, k.token, k.position, k.layer, k.side, k.head, k.byte); got != k.want {
			t.Errorf("pattern%+v = 0x%02x, expected 0x%02x", k, got, k.want)
		}
	}
}
