// SPDX-License-Identifier: Apache-2.0

package tutti

// The Go package against a real pool: bytes stored are the bytes loaded (the pattern of the
// shared fixture, fixture_test.go), errors with codes, a runtime used from several goroutines.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

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
	kv := newKV(t)
	rt := open(t, kv)
	tokens := make([]int32, 320)
	for i := range tokens {
		tokens[i] = int32(1000 + i)
	}
	stored, loaded := make([]int32, 20), make([]int32, 20)
	for i := range stored {
		stored[i], loaded[i] = int32(i), int32(20+i)
	}
	kv.fill(prompt{tokens: tokens, table: stored}, 0, len(tokens))
	b := run(t, rt, Store, Request{Tokens: tokens, BlockTable: stored, TokenEnd: TokensAll})
	if r, _ := b.Result(0); r.Status != nil || r.ChunksOK != 5 || r.TokensOK != 320 {
		t.Fatalf("store result %+v", r)
	}
	if hit, err := rt.Lookup(tokens, nil); err != nil || hit != 320 {
		t.Fatalf("lookup = %d, %v", hit, err)
	}
	kv.poison()
	b = run(t, rt, Load, Request{Tokens: tokens, BlockTable: loaded, TokenEnd: TokensAll})
	st, err := b.ChunkStatus(0)
	if err != nil || len(st) != 5 {
		t.Fatalf("chunk status %v %v", st, err)
	}
	kv.check(t, prompt{tokens: tokens, table: loaded}, 0, len(tokens), 0, layers)
	s, err := rt.Stats()
	if err != nil || s.Layers != layers || s.StoredChunks != 5 || s.LayerWaits != 2*layers || s.FailedChunks != 0 ||
		s.LoadTimeouts != 0 || s.RemoteErrors != 0 {
		t.Fatalf("stats %+v %v", s, err)
	}
	if w, err := rt.LayerWaitNs(); err != nil || len(w) != layers {
		t.Fatalf("layer waits %v %v", w, err)
	}
	h, err := rt.Histogram(HistogramLayerWait)
	var sum uint64
	for _, b := range h.Buckets {
		sum += b
	}
	if err != nil || h.Count != 2*layers || sum != h.Count || h.SumNs != s.LayerWaitNs {
		t.Fatalf("layer wait histogram %+v %v (stats %+v)", h, err, s)
	}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestKvEvents(t *testing.T) {
	kv := newKV(t)
	rt, err := Open(map[string]string{"pool": filepath.Join(t.TempDir(), "pool"), "capacity": "64M",
		"chunk_tokens": "64", "staging": "8M", "kv_events": "16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if err := rt.RegisterKV(kv.layout()); err != nil {
		t.Fatal(err)
	}
	tokens, table := make([]int32, 128), make([]int32, 8)
	for i := range tokens {
		tokens[i] = int32(1000 + i)
	}
	for i := range table {
		table[i] = int32(i)
	}
	kv.fill(prompt{tokens: tokens, table: table}, 0, len(tokens))
	run(t, rt, Store, Request{Tokens: tokens, BlockTable: table, TokenEnd: TokensAll})
	events, dropped, err := rt.Events(16)
	if err != nil || dropped != 0 || len(events) != 2 {
		t.Fatalf("events %+v, dropped %d: %v", events, dropped, err)
	}
	first, second := events[0], events[1]
	if !first.Stored || !second.Stored || first.Parent != [2]uint64{} || second.Parent != first.Key ||
		!equalInts(first.Tokens, tokens[:64]) || !equalInts(second.Tokens, tokens[64:]) {
		t.Fatalf("not the prompt's two chunks in order: %+v", events)
	}
	if events, _, err := rt.Events(16); err != nil || len(events) != 0 {
		t.Fatalf("handed out twice: %+v %v", events, err)
	}
}

func TestStoreByLayer(t *testing.T) {
	kv := newKV(t)
	rt := open(t, kv)
	tokens := make([]int32, 128)
	for i := range tokens {
		tokens[i] = int32(3000 + i)
	}
	stored, loaded := []int32{0, 1, 2, 3, 4, 5, 6, 7}, []int32{8, 9, 10, 11, 12, 13, 14, 15}
	kv.fill(prompt{tokens: tokens, table: stored}, 0, len(tokens))
	b, err := rt.NewBatch(StoreByLayer)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Add(Request{Tokens: tokens, BlockTable: stored, TokenEnd: TokensAll}); err != nil {
		t.Fatal(err)
	}
	if err := b.Submit(); err != nil {
		t.Fatal(err)
	}
	if n, done, err := b.Poll(); err != nil || n != 0 || done {
		t.Fatalf("poll before any layer is ready: %d %v %v", n, done, err)
	}
	for l := 0; l < layers; l++ {
		if hit, _ := rt.Lookup(tokens, nil); hit != 0 {
			t.Fatalf("visible before its last layer was ready: %d tokens", hit)
		}
		if err := b.LayerReady(l, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	if n, done, err := b.Poll(); err != nil || n != layers || !done {
		t.Fatalf("poll after wait: %d %v %v", n, done, err)
	}
	if err := b.LayerReady(0, 0); !errors.Is(err, EINVAL) {
		t.Fatalf("a layer declared twice: %v", err)
	}
	if hit, _ := rt.Lookup(tokens, nil); hit != 128 {
		t.Fatalf("lookup after the store found %d", hit)
	}
	kv.poison()
	run(t, rt, Load, Request{Tokens: tokens, BlockTable: loaded, TokenEnd: TokensAll})
	kv.check(t, prompt{tokens: tokens, table: loaded}, 0, len(tokens), 0, layers)
}

func TestLeasePinsWhatItFound(t *testing.T) {
	kv := newKV(t)
	rt := open(t, kv)
	tokens := make([]int32, 128)
	for i := range tokens {
		tokens[i] = int32(5000 + i)
	}
	table := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	kv.fill(prompt{tokens: tokens, table: table}, 0, len(tokens))
	run(t, rt, Store, Request{Tokens: tokens, BlockTable: table, TokenEnd: TokensAll})
	lease, err := rt.LookupLease(tokens, nil, 0)
	if err != nil || lease.Tokens != 128 {
		t.Fatalf("lease of %d tokens, %v", lease.Tokens, err)
	}
	miss, err := rt.LookupLease(tokens[:10], nil, 5)
	if err != nil || miss.Tokens != 0 {
		t.Fatalf("a miss leased %d tokens, %v", miss.Tokens, err)
	}
	miss.Release()
	lease.Release()
	lease.Release() // a second release does nothing
}

func TestLookupClient(t *testing.T) {
	kv := newKV(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lookup.sock")
	rt, err := Open(map[string]string{"pool": filepath.Join(dir, "pool"), "capacity": "64M", "chunk_tokens": "64",
		"staging": "8M", "lookup_socket": sock})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.RegisterKV(kv.layout()); err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, 150)
	for i := range tokens {
		tokens[i] = int32(7000 + i)
	}
	table := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	kv.fill(prompt{tokens: tokens, table: table}, 0, len(tokens))
	run(t, rt, Store, Request{Tokens: tokens, BlockTable: table, TokenEnd: TokensAll})
	c, err := DialLookup(sock, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if hit, err := c.Lookup(tokens, nil); err != nil || hit != 128 {
		t.Fatalf("remote lookup: %d tokens, %v", hit, err)
	}
	if hit, err := c.Lookup(tokens, []byte("other")); err != nil || hit != 0 {
		t.Fatalf("remote lookup with another salt: %d tokens, %v", hit, err)
	}
	hit, lease, err := c.LookupLease(tokens, nil, 0)
	if err != nil || hit != 128 || lease == 0 {
		t.Fatalf("remote lease: %d tokens, id %d, %v", hit, lease, err)
	}
	if err := c.Release(lease); err != nil {
		t.Fatal(err)
	}
	// A stranger's bytes: an error, a hang-up, and a warning in the log.
	var mu sync.Mutex
	var warnings []string
	SetLogger(LogWarn, func(level int, msg string) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, msg)
	})
	raw, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(bytes.Repeat([]byte{0xa5}, 64))
	reply, _ := io.ReadAll(raw) // EOF, or a reset for the bytes it left unread
	raw.Close()
	if len(reply) < 24 {
		t.Fatalf("%d bytes before the hang-up, want a reply", len(reply))
	}
	for i := 0; i < 500; i++ {
		mu.Lock()
		n := len(warnings)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	SetLogger(0, nil)
	mu.Lock()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "hung up") {
		t.Fatalf("warnings logged: %q", warnings)
	}
	mu.Unlock()
	rt.Close() // the serving runtime goes: a miss, as EIO
	if _, err := c.Lookup(tokens, nil); !errors.Is(err, EIO) {
		t.Fatalf("lookup after the runtime closed: %v, want EIO", err)
	}
	if _, err := DialLookup(sock, 0); !errors.Is(err, EIO) {
		t.Fatalf("dial after the runtime closed: %v, want EIO", err)
	}
}

func TestSaltAndErrors(t *testing.T) {
	kv := newKV(t)
	rt := open(t, kv)
	tokens := make([]int32, 128)
	stored, loaded := []int32{0, 1, 2, 3, 4, 5, 6, 7}, []int32{8, 9, 10, 11, 12, 13, 14, 15}
	kv.fill(prompt{tokens: tokens, table: stored, seed: 7}, 0, len(tokens))
	run(t, rt, Store, Request{Tokens: tokens, BlockTable: stored, TokenEnd: TokensAll, Salt: []byte("lora-7")})
	if hit, _ := rt.Lookup(tokens, nil); hit != 0 {
		t.Fatalf("unsalted lookup found %d", hit)
	}
	if hit, _ := rt.Lookup(tokens, []byte("lora-7")); hit != 128 {
		t.Fatalf("salted lookup found %d", hit)
	}
	// The second chunk only, salted, into other blocks.
	lb := run(t, rt, Load, Request{Tokens: tokens, BlockTable: loaded, TokenBegin: 64, TokenEnd: TokensAll, Salt: []byte("lora-7")})
	if r, _ := lb.Result(0); r.Status != nil || r.TokensOK != 64 {
		t.Fatalf("salted load result %+v", r)
	}
	kv.check(t, prompt{tokens: tokens, table: loaded, seed: 7}, 64, 128, 0, layers)
	for l := 0; l < layers; l++ {
		for side := 0; side < 2; side++ {
			for _, blk := range loaded[:4] { // the first chunk was not asked for
				if !bytes.Equal(kv.block(l, side, int(blk)), bytes.Repeat([]byte{poison}, blockBytes)) {
					t.Fatalf("layer %d side %d block %d: written, but its chunk was not asked for", l, side, blk)
				}
			}
		}
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
	kv := newKV(t)
	rt := open(t, kv)
	var prompts, loaded [4]prompt
	for g := range prompts {
		tokens := make([]int32, 64)
		for i := range tokens {
			tokens[i] = int32(g*100000 + i)
		}
		table := []int32{int32(4 * g), int32(4*g + 1), int32(4*g + 2), int32(4*g + 3)}
		prompts[g] = prompt{tokens: tokens, table: table}
		loaded[g] = prompt{tokens: tokens, table: []int32{int32(16 + 4*g), int32(17 + 4*g), int32(18 + 4*g), int32(19 + 4*g)}}
		kv.fill(prompts[g], 0, len(tokens))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			move := func(op Op, p prompt) error {
				b, err := rt.NewBatch(op)
				if err != nil {
					return err
				}
				defer b.Close()
				if err = b.Add(Request{Tokens: p.tokens, BlockTable: p.table, TokenEnd: TokensAll}); err == nil {
					if err = b.Submit(); err == nil {
						err = b.Wait()
					}
				}
				return err
			}
			err := move(Store, prompts[g])
			if err == nil {
				var hit int
				if hit, err = rt.Lookup(prompts[g].tokens, nil); err == nil && hit != 64 {
					err = errors.New("not found after store")
				}
			}
			if err == nil {
				err = move(Load, loaded[g]) // into other blocks
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
	for g := range loaded {
		kv.check(t, loaded[g], 0, 64, 0, layers)
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
