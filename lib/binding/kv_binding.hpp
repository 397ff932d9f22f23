// SPDX-License-Identifier: Apache-2.0
// The engine's paged KV cache as tutti sees it: validated layout, and the map between a chunk's
// object bytes (token-major rows, see resolver/layout.hpp) and runs of engine memory.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/copy_layout.hpp"
#include "resolver/layout.hpp"
#include "tutti.h"

namespace tutti {

// A contiguous piece of engine memory and where it sits in a chunk-layer object.
struct MemRun {
  std::byte* addr;
  uint64_t obj_off;
  uint64_t len;
};

class KvBinding {
 public:
  // Validates `layout` (throws EINVAL / EUNSUPPORTED with the reason) for chunks of
  // `chunk_tokens` tokens.
  KvBinding(const tutti_kv_layout& layout, uint32_t chunk_tokens);

  const Shape& shape() const { return shape_; }
  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t block_tokens() const { return block_tokens_; }
  // The most blocks one chunk's tokens lie in (chunk_tokens / block_tokens when that divides).
  uint32_t blocks_per_chunk() const { return layout_.blocks_per_chunk; }
  // The blocks a chunk's tokens [0, span.hi) lie in, from the one holding its first token.
  uint32_t blocks_of(const gpu::ChunkSpan& s) const { return (s.tok0 + s.hi + block_tokens_ - 1) / block_tokens_; }
  // Whether the chunk moves whole and starts a block: the only chunks vectored I/O and the
  // per-block baseline move.
  bool whole(const gpu::ChunkSpan& s) const { return s.tok0 == 0 && s.lo == 0 && s.hi == shape_.chunk_tokens; }
  // Bytes of one maximal contiguous run: a whole block, a token's heads, or one row.
  uint64_t run_bytes() const { return layout_.run_bytes; }
  // True when every run is 4 KiB aligned in address and length, so O_DIRECT can move bytes
  // between the pool and the blocks with vectored I/O and no staging copy (host memory only).
  bool direct_capable() const { return direct_capable_; }
  // CUDA device memory: the blocks are reached by the copy kernels, never by the CPU.
  bool on_device() const { return device_ >= 0; }
  int device() const { return device_; }
  std::byte* k(uint32_t layer) const { return k_[layer]; }
  std::byte* v(uint32_t layer) const { return v_[layer]; }
  const gpu::CopyLayout& copy_layout() const { return layout_; }

  // Calls fn(MemRun) for each run of layer `layer` of the chunk whose blocks are `blocks` (from
  // the one holding its first token) and whose tokens `span` moves, restricted to object bytes
  // [lo, hi), in object order.
  template <class Fn>
  void for_each_run(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
                    Fn&& fn) const;

  // Staging <-> blocks. `staging` holds object bytes [lo, hi); a gather zeroes the bytes of the
  // tokens the span leaves out.
  void scatter(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
               const std::byte* staging) const;
  void gather(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
              std::byte* staging) const;
  // The runs of [lo, hi) as iovecs, appended to `out`.
  void iovecs(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
              std::vector<iovec>& out) const;

 private:
  Shape shape_;
  uint32_t num_blocks_ = 0;
  uint32_t block_tokens_ = 0;
  std::vector<std::byte*> k_, v_;
  gpu::CopyLayout layout_;  // strides and runs, shared with the copy kernels
  bool direct_capable_ = false;
  int device_ = -1;
};

template <class Fn>
void KvBinding::for_each_run(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo,
                             uint64_t hi, Fn&& fn) const {
  const uint64_t kv = shape_.kv_bytes();
  const uint64_t voff = shape_.v_offset();
  for (uint32_t side = 0; side < shape_.sides(); ++side) {
    const uint64_t sec = side ? voff : 0;
    const uint64_t a = lo > sec ? lo - sec : 0;
    const uint64_t b = hi > sec ? std::min(hi - sec, kv) : 0;
    if (a >= b) continue;
    std::byte* base = side ? v_[layer] : k_[layer];
    const uint64_t run = layout_.run_bytes;
    for (uint64_t u = a / run; u * run < b; ++u) {
      uint64_t from, to;
      gpu::run_window(layout_, span, u, &from, &to);
      from = std::max(from, a), to = std::min(to, b);
      if (from >= to) continue;
      std::byte* addr = base + gpu::run_offset(layout_, blocks, span.tok0, u);
      fn(MemRun{addr + (from - u * run), sec + from, to - from});
    }
  }
}

}  // namespace tutti
