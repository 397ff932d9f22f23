// SPDX-License-Identifier: Apache-2.0
// Where a chunk's object bytes live in the engine's paged blocks. One source for the CPU paths
// (binding/kv_binding.hpp) and the copy kernels (device.cu): both compilers read this file.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

namespace tutti::gpu {

// A chunk-layer object is K then V, each `kv_bytes` of token-major rows; in memory a row is
// contiguous and the rest is strides. Runs are the widest pieces contiguous in both.
struct CopyLayout {
  uint64_t block_stride = 0, token_stride = 0, head_stride = 0;
  uint64_t run_bytes = 0;    // contiguous run: a block, a token's heads, or a row
  uint64_t token_bytes = 0;  // one token's rows in the object
  uint64_t kv_bytes = 0, v_offset = 0;
  uint32_t block_tokens = 0, heads = 0;
  uint32_t run_kind = 0;  // kRunBlock, kRunToken or kRunRow
  uint32_t sides = 2;     // K and V; 1: K only (MLA)
  uint32_t blocks_per_chunk = 0;  // the most blocks one chunk's tokens can lie in
};

constexpr uint32_t kRunBlock = 0, kRunToken = 1, kRunRow = 2;

// One chunk in the blocks. Its block ids start at the block that holds its first token, `tok0`
// tokens into that block (0 unless block_tokens does not divide chunk_tokens; whole-block runs
// only where it is always 0). Only tokens [lo, hi) of the chunk move: a load leaves the rows of
// the others in the blocks alone, a store writes zeros for them.
struct ChunkSpan {
  uint32_t tok0 = 0;
  uint32_t lo = 0, hi = 0;
};

// Byte offset from the layer's K (or V) base of run `u` of a chunk whose block ids are `blocks`.
TUTTI_HOST_DEVICE inline uint64_t run_offset(const CopyLayout& l, const int32_t* blocks, uint32_t tok0, uint64_t u) {
  if (l.run_kind == kRunBlock) return uint64_t(blocks[u]) * l.block_stride;
  const uint64_t t = (l.run_kind == kRunToken ? u : u / l.heads) + tok0;
  const uint64_t h = l.run_kind == kRunToken ? 0 : u % l.heads;
  return uint64_t(blocks[t / l.block_tokens]) * l.block_stride + (t % l.block_tokens) * l.token_stride +
         h * l.head_stride;
}

// The part of run `u` (bytes [u * run_bytes, +run_bytes) of one side) that holds tokens
// [lo, hi): [*from, *to), empty when *from >= *to.
TUTTI_HOST_DEVICE inline void run_window(const CopyLayout& l, const ChunkSpan& s, uint64_t u, uint64_t* from,
                                         uint64_t* to) {
  const uint64_t start = u * l.run_bytes, a = s.lo * l.token_bytes, b = s.hi * l.token_bytes;
  *from = start > a ? start : a;
  *to = start + l.run_bytes < b ? start + l.run_bytes : b;
}

}  // namespace tutti::gpu
