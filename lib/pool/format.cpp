// SPDX-License-Identifier: Apache-2.0
#include "pool/format.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace tutti {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the pool format is little-endian");

constexpr char kSuperMagic[8] = {'T', 'U', 'T', 'T', 'I', 'P', 'L', '\0'};
constexpr char kRecordMagic[8] = {'T', 'U', 'T', 'T', 'I', 'C', 'R', '\0'};
constexpr size_t kBlock = 4096;
constexpr uint32_t kShapeKOnly = 1;  // superblock flags: K only, no V (MLA)
constexpr uint32_t kRanked = 2;      // superblock flags: the slots are split between `ranks` runtimes

// Little helpers that write/read at a cursor; the layout is spelled out in docs/format.md.
struct Writer {
  uint8_t* p;
  template <class T>
  void put(T v) {
    std::memcpy(p, &v, sizeof v);
    p += sizeof v;
  }
  void bytes(const void* b, size_t n) {
    std::memcpy(p, b, n);
    p += n;
  }
};
struct Reader {
  const uint8_t* p;
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  void bytes(void* b, size_t n) {
    std::memcpy(b, p, n);
    p += n;
  }
};

// The checksum covers the whole 4 KiB block with its own 8-byte field (at `at`) zeroed.
uint64_t block_sum(const uint8_t* block, size_t at) {
  uint8_t copy[kBlock];
  std::memcpy(copy, block, kBlock);
  std::memset(copy + at, 0, 8);
  return XXH3_64bits(copy, kBlock);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

constexpr size_t kSuperSumAt = 8 + 4 + 4;  // after magic, version, header bytes
constexpr size_t kRecordSumAt = 8 + 4 + 4;

}  // namespace

uint64_t checksum64(const void* data, size_t len) { return XXH3_64bits(data, len); }

const char* describe(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk: return "valid";
    case DecodeStatus::kBlank: return "blank";
    case DecodeStatus::kBadMagic: return "no tutti magic";
    case DecodeStatus::kBadChecksum: return "checksum mismatch (torn or damaged)";
    case DecodeStatus::kBadVersion: return "another format version";
    case DecodeStatus::kBadGeometry: return "impossible or inconsistent sizes";
    case DecodeStatus::kForeign: return "belongs to another pool (uuid mismatch)";
    case DecodeStatus::kMisplaced: return "written for another slot";
  }
  return "?";
}

uint32_t version_of(const uint8_t* in) {
  if (std::memcmp(in, kSuperMagic, 8) != 0 && std::memcmp(in, kRecordMagic, 8) != 0) return 0;
  uint32_t v;
  std::memcpy(&v, in + 8, 4);
  return v;
}

std::string shape_problem(const Shape& s) {
  if (!s.layers || !s.heads || !s.head_dim || !s.elem_bytes || !s.chunk_tokens)
    return "every dimension must be at least 1";
  if (s.layers > kMaxLayers) return "at most " + std::to_string(kMaxLayers) + " layers";
  // A slot must stay far below 2^64 bytes: 2^40 (1 TiB) per slot is beyond any model.
  uint64_t b = s.head_dim;
  for (uint64_t f : {uint64_t{s.elem_bytes}, uint64_t{s.heads}, uint64_t{s.chunk_tokens}, uint64_t{2}, uint64_t{s.layers}})
    if (__builtin_mul_overflow(b, f, &b) || b > (uint64_t{1} << 40)) return "a chunk's KV would exceed 1 TiB";
  return "";
}

std::string uuid_string(const Uuid& u) {
  char s[40];
  std::snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

void encode_superblock(const Superblock& sb, uint8_t* out) {
  std::memset(out, 0, kBlock);
  Writer w{out};
  w.bytes(kSuperMagic, 8);
  w.put<uint32_t>(kFormatVersion);
  w.put<uint32_t>(kBlock);
  w.put<uint64_t>(0);  // checksum, filled below
  w.bytes(sb.uuid.data(), 16);
  w.put<uint32_t>(sb.file_index);
  w.put<uint32_t>(sb.file_count);
  w.put<uint32_t>(sb.shape.layers);
  w.put<uint32_t>(sb.shape.heads);
  w.put<uint32_t>(sb.shape.head_dim);
  w.put<uint32_t>(sb.shape.elem_bytes);
  w.put<uint32_t>(sb.shape.chunk_tokens);
  w.put<uint32_t>((sb.shape.k_only ? kShapeKOnly : 0) | (sb.ranks > 1 ? kRanked : 0));  // flags
  w.put<uint64_t>(sb.shape.layer_bytes());
  w.put<uint64_t>(sb.shape.slot_bytes());
  w.put<uint64_t>(sb.slots_per_file);
  w.put<uint64_t>(sb.file_bytes);
  w.put<uint32_t>(sb.ranks > 1 ? sb.ranks : 0);
  uint64_t sum = block_sum(out, kSuperSumAt);
  std::memcpy(out + kSuperSumAt, &sum, 8);
}

DecodeStatus decode_superblock(const uint8_t* in, Superblock* sb) {
  if (all_zero(in, kBlock)) return DecodeStatus::kBlank;
  Reader r{in};
  char magic[8];
  r.bytes(magic, 8);
  if (std::memcmp(magic, kSuperMagic, 8) != 0) return DecodeStatus::kBadMagic;
  uint32_t version = r.get<uint32_t>();
  r.get<uint32_t>();
  uint64_t sum = r.get<uint64_t>();
  if (sum != block_sum(in, kSuperSumAt)) return DecodeStatus::kBadChecksum;
  if (version != kFormatVersion) return DecodeStatus::kBadVersion;
  r.bytes(sb->uuid.data(), 16);
  sb->file_index = r.get<uint32_t>();
  sb->file_count = r.get<uint32_t>();
  sb->shape.layers = r.get<uint32_t>();
  sb->shape.heads = r.get<uint32_t>();
  sb->shape.head_dim = r.get<uint32_t>();
  sb->shape.elem_bytes = r.get<uint32_t>();
  sb->shape.chunk_tokens = r.get<uint32_t>();
  const uint32_t flags = r.get<uint32_t>();
  if (flags & ~(kShapeKOnly | kRanked)) return DecodeStatus::kBadGeometry;
  sb->shape.k_only = flags & kShapeKOnly;
  uint64_t layer_bytes = r.get<uint64_t>();
  uint64_t slot_bytes = r.get<uint64_t>();
  sb->slots_per_file = r.get<uint64_t>();
  sb->file_bytes = r.get<uint64_t>();
  const uint32_t ranks = r.get<uint32_t>();
  // Unranked pools carry 0 there (all pools before 0.7); a ranked one at least 2, and no more
  // ranks than slots, so that every rank owns one.
  if ((flags & kRanked) ? ranks < 2 : ranks != 0) return DecodeStatus::kBadGeometry;
  sb->ranks = std::max<uint32_t>(ranks, 1);
  // Nothing derived from a crafted shape may overflow; derived sizes are stored too, so a
  // change in the layout rules is caught, not misread.
  if (!shape_problem(sb->shape).empty()) return DecodeStatus::kBadGeometry;
  if (layer_bytes != sb->shape.layer_bytes() || slot_bytes != sb->shape.slot_bytes()) return DecodeStatus::kBadGeometry;
  // No file holds 2^62 bytes of slots; 2^32 slots of a 1 TiB slot would even wrap 2^64, and a
  // small file would pass for a huge pool (found by tests/fuzz/fuzz_format).
  uint64_t data_bytes = 0;
  if (__builtin_mul_overflow(sb->slots_per_file, slot_bytes, &data_bytes) || data_bytes > (uint64_t{1} << 62))
    return DecodeStatus::kBadGeometry;
  if (sb->file_count == 0 || sb->file_index >= sb->file_count || sb->slots_per_file == 0 ||
      sb->slots_per_file > kMaxSlotsPerFile || sb->file_bytes != Geometry::file_bytes_for(sb->shape, sb->slots_per_file) ||
      sb->ranks > sb->slots_per_file * sb->file_count)
    return DecodeStatus::kBadGeometry;
  return DecodeStatus::kOk;
}

void encode_record(const Uuid& pool, const Record& rec, uint8_t* out) {
  std::memset(out, 0, kBlock);
  Writer w{out};
  w.bytes(kRecordMagic, 8);
  w.put<uint32_t>(kFormatVersion);
  w.put<uint32_t>(static_cast<uint32_t>(rec.layer_sums.size()));
  w.put<uint64_t>(0);  // checksum
  w.bytes(pool.data(), 16);
  w.put<uint64_t>(rec.slot);
  w.put<uint64_t>(rec.generation);
  w.put<uint64_t>(rec.key.lo);
  w.put<uint64_t>(rec.key.hi);
  for (uint64_t s : rec.layer_sums) w.put<uint64_t>(s);
  uint64_t sum = block_sum(out, kRecordSumAt);
  std::memcpy(out + kRecordSumAt, &sum, 8);
}

void encode_tombstone(uint8_t* out) { std::memset(out, 0, kBlock); }

DecodeStatus decode_record(const uint8_t* in, const Uuid& pool, uint64_t expect_slot, uint32_t layers,
                           Record* rec) {
  if (all_zero(in, 8)) return DecodeStatus::kBlank;
  Reader r{in};
  char magic[8];
  r.bytes(magic, 8);
  if (std::memcmp(magic, kRecordMagic, 8) != 0) return DecodeStatus::kBadMagic;
  uint32_t version = r.get<uint32_t>();
  uint32_t n = r.get<uint32_t>();
  uint64_t sum = r.get<uint64_t>();
  if (sum != block_sum(in, kRecordSumAt)) return DecodeStatus::kBadChecksum;
  if (version != kFormatVersion) return DecodeStatus::kBadVersion;
  if (n != layers) return DecodeStatus::kBadGeometry;
  Uuid u;
  r.bytes(u.data(), 16);
  rec->slot = r.get<uint64_t>();
  // A record of an older pool at this path, or one written for another slot, is not ours.
  if (u != pool) return DecodeStatus::kForeign;
  if (rec->slot != expect_slot) return DecodeStatus::kMisplaced;
  rec->generation = r.get<uint64_t>();
  rec->key.lo = r.get<uint64_t>();
  rec->key.hi = r.get<uint64_t>();
  rec->layer_sums.resize(n);
  for (auto& s : rec->layer_sums) s = r.get<uint64_t>();
  return DecodeStatus::kOk;
}

}  // namespace tutti
