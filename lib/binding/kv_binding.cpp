// SPDX-License-Identifier: Apache-2.0
#include "binding/kv_binding.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/units.hpp"
#include "pool/format.hpp"

namespace tutti {

KvBinding::KvBinding(const tutti_kv_layout& l, uint32_t chunk_tokens) {
  TUTTI_EXPECT(l.struct_size == sizeof(tutti_kv_layout),
               "tutti_kv_layout.struct_size is " + std::to_string(l.struct_size) + ", expected sizeof(tutti_kv_layout) = " +
                   std::to_string(sizeof(tutti_kv_layout)));
  TUTTI_EXPECT(l.num_layers >= 1 && l.num_layers <= kMaxLayers, "num_layers must be 1.." + std::to_string(kMaxLayers));
  TUTTI_EXPECT(l.num_blocks >= 1, "num_blocks must be at least 1");
  TUTTI_EXPECT(l.block_tokens >= 1, "block_tokens must be at least 1");
  TUTTI_EXPECT(l.num_kv_heads >= 1 && l.head_dim >= 1, "num_kv_heads and head_dim must be at least 1");
  TUTTI_EXPECT(l.elem_bytes == 1 || l.elem_bytes == 2 || l.elem_bytes == 4 || l.elem_bytes == 8,
               "elem_bytes must be 1, 2, 4 or 8");
  TUTTI_EXPECT(l.memory == TUTTI_MEMORY_HOST || l.memory == TUTTI_MEMORY_CUDA,
               "unknown memory kind " + std::to_string(l.memory));
  if (l.memory == TUTTI_MEMORY_CUDA) {
    TUTTI_EXPECT(l.device >= 0, "CUDA device ordinal must be >= 0");
    device_ = l.device;
  }
  TUTTI_EXPECT(l.k_base != nullptr, "k_base is NULL");
  TUTTI_EXPECT((l.flags & ~uint32_t{TUTTI_KV_K_ONLY}) == 0, "unknown flags " + std::to_string(l.flags));

  shape_ = Shape{l.num_layers, l.num_kv_heads, l.head_dim, l.elem_bytes, chunk_tokens, (l.flags & TUTTI_KV_K_ONLY) != 0};
  num_blocks_ = l.num_blocks;
  block_tokens_ = l.block_tokens;
  const uint64_t row = shape_.row_bytes();
  TUTTI_EXPECT(l.head_stride >= row || l.num_kv_heads == 1, "head_stride is smaller than a row (head_dim * elem_bytes)");
  TUTTI_EXPECT(l.token_stride >= row || l.block_tokens == 1, "token_stride is smaller than a row (head_dim * elem_bytes)");
  TUTTI_EXPECT(l.block_stride >= row, "block_stride is smaller than a row (head_dim * elem_bytes)");

  k_.resize(l.num_layers);
  v_.resize(l.num_layers);
  for (uint32_t i = 0; i < l.num_layers; ++i) {
    TUTTI_EXPECT(l.k_base[i] != nullptr, "k_base[" + std::to_string(i) + "] is NULL");
    k_[i] = static_cast<std::byte*>(l.k_base[i]);
    if (shape_.k_only) {
      v_[i] = k_[i];  // never read: there is no V side
    } else if (l.v_base) {
      TUTTI_EXPECT(l.v_base[i] != nullptr, "v_base[" + std::to_string(i) + "] is NULL");
      v_[i] = static_cast<std::byte*>(l.v_base[i]);
    } else {
      TUTTI_EXPECT(l.v_offset != 0, "v_base is NULL and v_offset is 0: K and V would overlap");
      v_[i] = k_[i] + l.v_offset;
    }
  }

  // The widest contiguous run the strides allow.
  const bool heads_packed = l.num_kv_heads == 1 || l.head_stride == row;
  // Whole blocks are runs only where every chunk starts a block.
  const bool tokens_packed = heads_packed && (l.block_tokens == 1 || l.token_stride == shape_.token_bytes()) &&
                             chunk_tokens % l.block_tokens == 0;
  gpu::CopyLayout& c = layout_;
  c.block_stride = l.block_stride;
  c.token_stride = l.token_stride;
  c.head_stride = l.head_stride;
  c.run_kind = tokens_packed ? gpu::kRunBlock : heads_packed ? gpu::kRunToken : gpu::kRunRow;
  c.run_bytes = tokens_packed ? shape_.token_bytes() * block_tokens_ : heads_packed ? shape_.token_bytes() : row;
  c.token_bytes = shape_.token_bytes();
  c.kv_bytes = shape_.kv_bytes();
  c.sides = shape_.sides();
  c.v_offset = shape_.v_offset();
  c.block_tokens = block_tokens_;
  c.heads = shape_.heads;
  // In 64 bits: with blocks of near 2^31 tokens the sum wraps in 32 (and a chunk spans two).
  c.blocks_per_chunk =
      chunk_tokens % block_tokens_ == 0
          ? chunk_tokens / block_tokens_
          : static_cast<uint32_t>((uint64_t{chunk_tokens} + 2 * uint64_t{block_tokens_} - 2) / block_tokens_);

  bool aligned = is_aligned(c.run_bytes, kIoAlign) && is_aligned(c.block_stride, kIoAlign) &&
                 shape_.kv_bytes() == shape_.v_offset();
  if (c.run_kind != gpu::kRunBlock) aligned = aligned && is_aligned(c.token_stride, kIoAlign);
  if (c.run_kind == gpu::kRunRow) aligned = aligned && is_aligned(c.head_stride, kIoAlign);
  for (uint32_t i = 0; i < l.num_layers && aligned; ++i)
    aligned = is_aligned(reinterpret_cast<uintptr_t>(k_[i]), kIoAlign) && is_aligned(reinterpret_cast<uintptr_t>(v_[i]), kIoAlign);
  direct_capable_ = aligned && !on_device();
}

void KvBinding::scatter(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
                        const std::byte* staging) const {
  for_each_run(layer, blocks, span, lo, hi,
               [&](const MemRun& r) { std::memcpy(r.addr, staging + (r.obj_off - lo), r.len); });
}

void KvBinding::gather(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
                       std::byte* staging) const {
  if (!whole(span)) std::memset(staging, 0, hi - lo);
  for_each_run(layer, blocks, span, lo, hi,
               [&](const MemRun& r) { std::memcpy(staging + (r.obj_off - lo), r.addr, r.len); });
}

void KvBinding::iovecs(uint32_t layer, const int32_t* blocks, const gpu::ChunkSpan& span, uint64_t lo, uint64_t hi,
                       std::vector<iovec>& out) const {
  for_each_run(layer, blocks, span, lo, hi, [&](const MemRun& r) { out.push_back(iovec{r.addr, r.len}); });
}

}  // namespace tutti
