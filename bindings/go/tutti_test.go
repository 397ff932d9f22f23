package tutti

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

const (
	layers, blocks, bt, heads, dim = 3, 64, 16, 2, 64
	layerBytes                     = 2 * blocks * bt * heads * dim * 2
	blockBytes                     = bt * heads * dim * 2
)

// kvCache is a fused [2, blocks, bt, heads, dim] fp16-sized cache per layer in mapped memory
// (the runtime writes into it from its own threads, so it must not be Go's heap).
type kvCache struct {
	mem []byte
}

func newKV(t *testing.T, seed int64) *kvCache {
	mem, err := syscall.Mmap(-1, 0, layers*layerBytes, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	kv := &kvCache{mem: mem}
	rand.New(rand.NewSource(seed)).Read(kv.mem)
	return kv
}

func (kv *kvCache) layout() Layout {
	l := Layout{Layers: layers, Blocks: blocks, BlockTokens: bt, KVHeads: heads, HeadDim: dim, ElemBytes: 2}
	for i := 0; i < layers; i++ {
		l.K = append(l.K, uintptr(unsafe.Pointer(&kv.mem[i*layerBytes])))
	}
	return l
}

// block returns layer l's K (side 0) or V (side 1) bytes of block b.
func (kv *kvCache) block(l, side, b int) []byte {
	at := l*layerBytes + side*layerBytes/2 + b*blockBytes
	return kv.mem[at : at+blockBytes]
}

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

func run(t *testing.T, rt *Runtime, op Op, reqs ...Request) *Batch {
	b, err := rt.NewBatch(op)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Add(reqs...); err != nil {
		t.Fatal(err)
	}
	if err := b.Submit(); err != nil {
		t.Fatal(err)
	}
	for l := 0; l < layers; l++ {
		if err := b.WaitLayer(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStoreLookupLoad(t *testing.T) {
	kv := newKV(t, 1)
	rt := open(t, kv)
	tokens := make([]int32, 320)
	for i := range tokens {
		tokens[i] = int32(1000 + i)
	}
	stored, loaded := make([]int32, 20), make([]int32, 20)
	for i := range stored {
		stored[i], loaded[i] = int32(i), int32(20+i)
	}
	b := run(t, rt, Store, Request{Tokens: tokens, BlockTable: stored, TokenEnd: TokensAll})
	if r, _ := b.Result(0); r.Status != nil || r.ChunksOK != 5 || r.TokensOK != 320 {
		t.Fatalf("store result %+v", r)
	}
	if hit, err := rt.Lookup(tokens, nil); err != nil || hit != 320 {
		t.Fatalf("lookup = %d, %v", hit, err)
	}
	b = run(t, rt, Load, Request{Tokens: tokens, BlockTable: loaded, TokenEnd: TokensAll})
	st, err := b.ChunkStatus(0)
	if err != nil || len(st) != 5 {
		t.Fatalf("chunk status %v %v", st, err)
	}
	for l := 0; l < layers; l++ {
		for side := 0; side < 2; side++ {
			for i := range stored {
				if !bytes.Equal(kv.block(l, side, int(loaded[i])), kv.block(l, side, int(stored[i]))) {
					t.Fatalf("layer %d side %d block %d: bytes differ", l, side, loaded[i])
				}
			}
		}
	}
	s, err := rt.Stats()
	if err != nil || s.StoredChunks != 5 || s.LayerWaits != 2*layers {
		t.Fatalf("stats %+v %v", s, err)
	}
	if w, err := rt.LayerWaitNs(); err != nil || len(w) != layers {
		t.Fatalf("layer waits %v %v", w, err)
	}
}

func TestSaltAndErrors(t *testing.T) {
	kv := newKV(t, 2)
	rt := open(t, kv)
	tokens := make([]int32, 128)
	run(t, rt, Store, Request{Tokens: tokens, BlockTable: []int32{0, 1, 2, 3, 4, 5, 6, 7}, TokenEnd: TokensAll, Salt: []byte("lora-7")})
	if hit, _ := rt.Lookup(tokens, nil); hit != 0 {
		t.Fatalf("unsalted lookup found %d", hit)
	}
	if hit, _ := rt.Lookup(tokens, []byte("lora-7")); hit != 128 {
		t.Fatalf("salted lookup found %d", hit)
	}
	b, _ := rt.NewBatch(Load)
	defer b.Close()
	err := b.Add(Request{Tokens: tokens, BlockTable: []int32{blocks + 1, 0, 0, 0, 0, 0, 0, 0}, TokenEnd: TokensAll})
	var te *Error
	if !errors.As(err, &te) || te.Code != EINVAL || !errors.Is(err, EINVAL) {
		t.Fatalf("bad block id: %v", err)
	}
	if err := b.Wait(); !errors.Is(err, ESTATE) {
		t.Fatalf("wait before submit: %v", err)
	}
	if _, err := Open(map[string]string{"chunk_tokens": "twelve"}); !errors.Is(err, EINVAL) {
		t.Fatalf("bad option: %v", err)
	}
	rt.Close()
	if _, err := rt.Lookup(tokens, nil); !errors.Is(err, ESTATE) {
		t.Fatalf("closed runtime: %v", err)
	}
}

// Batches driven from several goroutines at once (a runtime is safe for concurrent use).
func TestConcurrentBatches(t *testing.T) {
	kv := newKV(t, 3)
	rt := open(t, kv)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			tokens := make([]int32, 64)
			for i := range tokens {
				tokens[i] = int32(g*100000 + i)
			}
			table := []int32{int32(4 * g), int32(4*g + 1), int32(4*g + 2), int32(4*g + 3)}
			b, err := rt.NewBatch(Store)
			if err == nil {
				err = b.Add(Request{Tokens: tokens, BlockTable: table, TokenEnd: TokensAll})
			}
			if err == nil {
				err = b.Submit()
			}
			if err == nil {
				err = b.Wait()
			}
			b.Close()
			if err == nil {
				var hit int
				if hit, err = rt.Lookup(tokens, nil); err == nil && hit != 64 {
					err = errors.New("not found after store")
				}
			}
			errs <- err
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Every function of tutti.h is called by this package.
func TestEveryFunctionIsBound(t *testing.T) {
	path := os.Getenv("TUTTI_HEADER")
	if path == "" {
		path = "../../include/tutti.h" // the package's place in the source tree
	}
	header, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		src = append(src, b...)
	}
	names := regexp.MustCompile(`TUTTI_API[^;(]*?\b(tutti_\w+)\s*\(`).FindAllSubmatch(header, -1)
	if len(names) < 20 {
		t.Fatalf("found only %d functions in tutti.h", len(names))
	}
	for _, m := range names {
		if !bytes.Contains(src, append([]byte("C."), m[1]...)) {
			t.Errorf("%s is not bound", m[1])
		}
	}
}

func TestVersion(t *testing.T) {
	if VersionNumber() < 100 || Version() == "" {
		t.Fatalf("version %d %q", VersionNumber(), Version())
	}
}
