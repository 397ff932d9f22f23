// SPDX-License-Identifier: Apache-2.0
#include "resolver/layout.hpp"

#include "common/units.hpp"

namespace tutti {

uint64_t Shape::v_offset() const { return align_up(kv_bytes(), kIoAlign); }

std::string Shape::describe() const {
  return std::to_string(layers) + " layers, " + std::to_string(heads) + " kv heads, head dim " +
         std::to_string(head_dim) + ", " + std::to_string(elem_bytes) + "-byte elements, " +
         std::to_string(chunk_tokens) + "-token chunks" + (k_only ? ", K only (MLA)" : "");
}

static uint64_t data_offset_for(uint64_t slots_per_file) {
  return align_up(Geometry::kSuperblockBytes + slots_per_file * Geometry::kRecordBytes, Geometry::kDataAlign);
}

Geometry::Geometry(const Shape& shape, uint32_t files, uint64_t slots_per_file)
    : shape_(shape), files_(files), slots_per_file_(slots_per_file), data_offset_(data_offset_for(slots_per_file)) {}

uint64_t Geometry::slots_for(const Shape& shape, uint64_t file_bytes) {
  const uint64_t slot = shape.slot_bytes();
  if (slot == 0) return 0;
  // In 128 bits: near 2^64 bytes (a capacity of 16777215T) file_bytes_for(n) would wrap.
  const auto need = [&](uint64_t n) {
    const unsigned __int128 records = kSuperblockBytes + static_cast<unsigned __int128>(n) * kRecordBytes;
    return (records + kDataAlign - 1) / kDataAlign * kDataAlign + static_cast<unsigned __int128>(n) * slot;
  };
  uint64_t n = file_bytes / (slot + kRecordBytes);
  while (n > 0 && need(n) > file_bytes) --n;
  return n;
}

uint64_t Geometry::file_bytes_for(const Shape& shape, uint64_t slots_per_file) {
  return data_offset_for(slots_per_file) + slots_per_file * shape.slot_bytes();
}

Extent Geometry::layer_extent(uint64_t slot, uint32_t layer) const {
  Extent e = slot_extent(slot);
  e.offset += uint64_t{layer} * shape_.layer_bytes();
  e.length = shape_.layer_bytes();
  return e;
}

Extent Geometry::slot_extent(uint64_t slot) const {
  return Extent{file_of(slot), data_offset_ + local_of(slot) * shape_.slot_bytes(), shape_.slot_bytes()};
}

}  // namespace tutti
