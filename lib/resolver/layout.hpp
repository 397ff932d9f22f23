// SPDX-License-Identifier: Apache-2.0
// Object geometry: what one KV object (one chunk of tokens, all layers) looks like on disk and
// where it lives. A slot holds one object, layer-major: [L0: K | V][L1: K | V]... Inside K (and
// V) the chunk's rows are token-major: (token, head) -> head_dim elements, the NHD order. Each
// layer's sub-extent is 4 KiB aligned, so loading one layer of one chunk is ONE contiguous read.
#pragma once

#include <cstdint>
#include <string>

namespace tutti {

constexpr uint64_t kIoAlign = 4096;  // O_DIRECT alignment tutti uses everywhere

// The KV shape a pool is made for; it is the pool's layout fingerprint.
struct Shape {
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t head_dim = 0;
  uint32_t elem_bytes = 0;
  uint32_t chunk_tokens = 0;
  bool k_only = false;  // MLA: one latent per token, no V

  uint32_t sides() const { return k_only ? 1 : 2; }  // K and V, or K alone
  uint64_t row_bytes() const { return uint64_t{head_dim} * elem_bytes; }
  uint64_t token_bytes() const { return row_bytes() * heads; }       // one of K or V
  uint64_t kv_bytes() const { return token_bytes() * chunk_tokens; }  // K (or V) of a chunk-layer
  uint64_t v_offset() const;                                          // V's offset in the extent
  uint64_t layer_bytes() const { return sides() * v_offset(); }       // one chunk-layer extent
  uint64_t slot_bytes() const { return layer_bytes() * layers; }
  bool operator==(const Shape&) const = default;
  std::string describe() const;
};

struct Extent {
  uint32_t file = 0;
  uint64_t offset = 0;  // in the file
  uint64_t length = 0;
};

// Where slots sit in a pool of `files` files of equal geometry. Per file:
//   [superblock 4 KiB][commit records: 4 KiB per slot][pad to 1 MiB][slot data...]
// Global slot s lives in file s % files at local index s / files, so consecutive slots (and so
// the chunks of one prompt) spread over every SSD.
class Geometry {
 public:
  static constexpr uint64_t kSuperblockBytes = 4096;
  static constexpr uint64_t kRecordBytes = 4096;
  static constexpr uint64_t kDataAlign = 1 << 20;

  Geometry() = default;
  Geometry(const Shape& shape, uint32_t files, uint64_t slots_per_file);

  // How many slots fit a file of `file_bytes` (0 if not even one).
  static uint64_t slots_for(const Shape& shape, uint64_t file_bytes);
  static uint64_t file_bytes_for(const Shape& shape, uint64_t slots_per_file);

  const Shape& shape() const { return shape_; }
  uint32_t files() const { return files_; }
  uint64_t slots_per_file() const { return slots_per_file_; }
  uint64_t slots() const { return slots_per_file_ * files_; }
  uint32_t file_of(uint64_t slot) const { return static_cast<uint32_t>(slot % files_); }
  uint64_t local_of(uint64_t slot) const { return slot / files_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t record_offset(uint64_t slot) const { return kSuperblockBytes + local_of(slot) * kRecordBytes; }
  Extent layer_extent(uint64_t slot, uint32_t layer) const;
  Extent slot_extent(uint64_t slot) const;

 private:
  Shape shape_;
  uint32_t files_ = 1;
  uint64_t slots_per_file_ = 0;
  uint64_t data_offset_ = 0;
};

}  // namespace tutti
