// SPDX-License-Identifier: Apache-2.0
// The on-disk format of pool files (see docs/format.md): a superblock per file and one
// checksummed commit record per slot. All integers little-endian.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "resolver/key.hpp"
#include "resolver/layout.hpp"

namespace tutti {

// 2: layer checksums are page-tree sums (kernels/layer_sum.hpp), checkable on the GPU.
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kMaxLayers = 500;  // a commit record holds one checksum per layer
constexpr uint64_t kMaxSlotsPerFile = uint64_t{1} << 32;  // records alone would fill 16 TiB

using Uuid = std::array<uint8_t, 16>;

struct Superblock {
  Uuid uuid{};
  uint32_t file_index = 0;
  uint32_t file_count = 1;
  Shape shape;
  uint64_t slots_per_file = 0;
  uint64_t file_bytes = 0;
  uint32_t ranks = 1;  // runtimes that share the pool, each with its own share of the slots
};

// A committed chunk: slot `slot` holds the object with `key`; layer_sums[l] is the checksum of
// layer l's extent (layer_sum). `generation` orders commits (the newest wins if a key appears twice).
struct Record {
  uint64_t slot = 0;
  uint64_t generation = 0;
  Key key;
  std::vector<uint64_t> layer_sums;
};

enum class DecodeStatus {
  kOk,
  kBlank,        // all zeros: a free slot, or a file that is not a pool yet
  kBadMagic,     // not tutti's
  kBadChecksum,  // torn or damaged
  kBadVersion,   // another format version (version_of() says which)
  kBadGeometry,  // a superblock whose sizes are impossible or disagree with its shape
  kForeign,      // a record of another pool (an older pool at the same path)
  kMisplaced,    // a record written for another slot
};
const char* describe(DecodeStatus s);
// The format version a superblock or record carries (0 if it carries no magic).
uint32_t version_of(const uint8_t* in4k);
// Whether a shape's sizes are sane: every count > 0, layers <= kMaxLayers, and a slot's bytes
// computed without overflow. "" if so, else why not.
std::string shape_problem(const Shape& s);

// Encoders fill exactly 4096 bytes; decoders never trust a field before the checksum holds.
void encode_superblock(const Superblock& sb, uint8_t* out4k);
DecodeStatus decode_superblock(const uint8_t* in4k, Superblock* out);

void encode_record(const Uuid& pool, const Record& r, uint8_t* out4k);
void encode_tombstone(uint8_t* out4k);  // a free slot: all zeros
DecodeStatus decode_record(const uint8_t* in4k, const Uuid& pool, uint64_t expect_slot,
                           uint32_t layers, Record* out);

uint64_t checksum64(const void* data, size_t len);
std::string uuid_string(const Uuid& u);

}  // namespace tutti
