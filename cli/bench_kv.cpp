// SPDX-License-Identifier: Apache-2.0
// bench's synthetic KV cache (bench.hpp): in host memory, or in HBM of CUDA device 0 with a
// host copy of one layer at a time to make and check the pattern in.
#include <algorithm>
#include <cstring>
#include <random>

#include "bench.hpp"
#include "kernels/device.hpp"

namespace tutti::cli {

KvCache::KvCache(const BenchArgs& a) : a_(a) {
  const Model& m = *a.model;
  blocks_ = static_cast<uint32_t>(a.tokens / a.block_tokens);
  block_bytes_ = uint64_t{a.block_tokens} * m.heads * m.head_dim * m.elem_bytes;
  layer_bytes_ = 2 * uint64_t{blocks_} * block_bytes_;
  std::byte* base;
  if (a.cuda) {
    device_mem_ = static_cast<std::byte*>(gpu::alloc(0, layer_bytes_ * m.layers));
    host_layer_ = AlignedBuffer(layer_bytes_, 2 << 20);
    base = device_mem_;
  } else {
    mem_ = AlignedBuffer(layer_bytes_ * m.layers, 2 << 20);
    base = mem_.data();
  }
  for (uint32_t l = 0; l < m.layers; ++l) bases_.push_back(base + l * layer_bytes_);
  // A shuffled block table, as a paged allocator hands out.
  table_.resize(blocks_);
  for (uint32_t i = 0; i < blocks_; ++i) table_[i] = static_cast<int32_t>(i);
  std::mt19937 rng(42);
  std::shuffle(table_.begin(), table_.end(), rng);
  tokens_.resize(a.tokens);
  for (size_t i = 0; i < a.tokens; ++i) tokens_[i] = static_cast<int32_t>(rng() % 128000);
}

KvCache::~KvCache() {
  if (device_mem_) gpu::free(device_mem_);
}

template <class Fn>
bool KvCache::walk(uint32_t l, std::byte* layer, Fn fn) {
  const uint64_t words = block_bytes_ / 8;
  for (uint32_t side = 0; side < 2; ++side)
    for (uint32_t logical = 0; logical < blocks_; ++logical) {
      auto* w = reinterpret_cast<uint64_t*>(layer + side * uint64_t{blocks_} * block_bytes_ +
                                            uint64_t(table_[logical]) * block_bytes_);
      uint64_t x = (uint64_t{l} << 40) ^ (uint64_t{side} << 39) ^ (uint64_t{logical} << 8) ^ 0x9E3779B97F4A7C15ull;
      for (uint64_t i = 0; i < words; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
        if (!fn(w + i, x)) return false;
      }
    }
  return true;
}

tutti_kv_layout KvCache::layout() const {
  const Model& m = *a_.model;
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, m.layers, blocks_, a_.block_tokens, m.heads, m.head_dim, m.elem_bytes, a_.hnd);
  l.k_base = bases_.data();
  l.v_base = nullptr;
  l.v_offset = uint64_t{blocks_} * block_bytes_;
  if (a_.cuda) l.memory = TUTTI_MEMORY_CUDA, l.device = 0;
  return l;
}

void KvCache::fill() {
  for (uint32_t l = 0; l < a_.model->layers; ++l) {
    walk(l, host(l), [](uint64_t* w, uint64_t v) { *w = v; return true; });
    if (device_mem_) gpu::copy_to_device(bases_[l], host_layer_.data(), layer_bytes_);
  }
}

void KvCache::clear() {
  if (device_mem_)
    gpu::fill_zero(device_mem_, layer_bytes_ * a_.model->layers);
  else
    std::memset(mem_.data(), 0, mem_.size());
}

bool KvCache::verify() {
  for (uint32_t l = 0; l < a_.model->layers; ++l) {
    if (device_mem_) gpu::copy_to_host(host_layer_.data(), bases_[l], layer_bytes_);
    if (!walk(l, host(l), [](uint64_t* w, uint64_t v) { return *w == v; })) return false;
  }
  return true;
}

}  // namespace tutti::cli
