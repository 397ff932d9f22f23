// SPDX-License-Identifier: Apache-2.0

// Sample: keep a prompt's KV cache in a tutti pool and stream it back layer by layer (Go).
// Opens a pool in a temporary directory, registers a small paged KV cache in mapped memory,
// stores one prompt's KV, looks the prompt up, loads it into other blocks layer by layer and
// checks every byte.
package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"tutti.dev/tutti"
)

const (
	layers, blocks, blockTokens, kvHeads, headDim = 4, 128, 16, 8, 128
	layerBytes                                    = 2 * blocks * blockTokens * kvHeads * headDim * 2
	blockBytes                                    = blockTokens * kvHeads * headDim * 2
	tokens                                        = 1024
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sample:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "tutti-sample-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The KV cache: per layer one fused [2, blocks, bt, heads, dim] fp16 tensor, outside Go's heap.
	kv, err := syscall.Mmap(-1, 0, layers*layerBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer syscall.Munmap(kv)
	rand.New(rand.NewSource(1)).Read(kv)

	rt, err := tutti.Open(map[string]string{"pool": filepath.Join(dir, "kv.pool"), "capacity": "1G"})
	if err != nil {
		return err
	}
	defer rt.Close()
	layout := tutti.Layout{Layers: layers, Blocks: blocks, BlockTokens: blockTokens, KVHeads: kvHeads, HeadDim: headDim, ElemBytes: 2}
	for l := 0; l < layers; l++ {
		layout.K = append(layout.K, uintptr(unsafe.Pointer(&kv[l*layerBytes])))
	}
	if err := rt.RegisterKV(layout); err != nil {
		return err
	}
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32(1000 + 7*i)
	}
	storedIn, loadedInto := make([]int32, tokens/blockTokens), make([]int32, tokens/blockTokens)
	for i := range storedIn {
		storedIn[i], loadedInto[i] = int32(i), int32(tokens/blockTokens+i)
	}

	if err := batch(rt, tutti.Store, prompt, storedIn, nil); err != nil {
		return err
	}
	hit, err := rt.Lookup(prompt, nil)
	if err != nil {
		return err
	}
	fmt.Printf("stored %d tokens with backend %s; lookup finds %d cached tokens\n", tokens, rt.Backend(), hit)
	return batch(rt, tutti.Load, prompt[:hit], loadedInto, func(layer int) error {
		// The engine would run this layer's attention now; the sample checks its bytes.
		for side := 0; side < 2; side++ {
			for i := range storedIn {
				at := func(b int32) []byte {
					o := layer*layerBytes + side*layerBytes/2 + int(b)*blockBytes
					return kv[o : o+blockBytes]
				}
				if !bytes.Equal(at(loadedInto[i]), at(storedIn[i])) {
					return fmt.Errorf("layer %d: bytes differ in block %d", layer, loadedInto[i])
				}
			}
		}
		fmt.Printf("layer %d: in place, bytes match\n", layer)
		return nil
	})
}

// batch runs one request layer by layer, calling each(layer) once the layer is done.
func batch(rt *tutti.Runtime, op tutti.Op, prompt, table []int32, each func(int) error) error {
	b, err := rt.NewBatch(op)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Add(tutti.Request{Tokens: prompt, BlockTable: table, TokenEnd: tutti.TokensAll}); err != nil {
		return err
	}
	if err := b.Submit(); err != nil {
		return err
	}
	for l := 0; l < layers; l++ {
		if err := b.WaitLayer(l); err != nil {
			return err
		}
		if each != nil {
			if err := each(l); err != nil {
				return err
			}
		}
	}
	return b.Wait()
}
