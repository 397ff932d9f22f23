// SPDX-License-Identifier: Apache-2.0
// fuzz_format — the pool's on-disk parsers: decode_superblock and decode_record on arbitrary
// 4 KiB blocks (the fields behind the checksum reached by stamping magic, version and checksum),
// encode -> decode round trips, and the geometry a decoded superblock or a capacity implies.
//
// Input: byte 0 picks the mode (low 3 bits) and flags; the rest is read front to back
// (FuzzInput), as tests/fuzz/make-corpus writes it:
//   0 decode a superblock     [block]; flags 0x08 stamp the magic, 0x10 the version, 0x20 the
//                             checksum, so the fields behind them are reached
//   1 decode a record         [layers u16, slot u64, block]; the same flags, and 0x40 expect
//                             the block's own uuid, 0x80 its own slot
//   2 superblock round trip   [uuid, fields]; 0x08: any values (else what a pool of a sane shape
//                             has), then [where, xor]: one byte changed
//   3 record round trip       [uuid, slot, generation, key, layers, sums], then one byte changed,
//                             another uuid, slot and layer count
//   4 slots_for(shape, bytes) [shape, near-2^64 flag, bytes]: the slot count a capacity gives
//                             fits, and is the most that fits
// Invariants: no crash or leak; a block that decodes is re-encoded to the same fields; the
// sizes a decoded superblock implies do not overflow; a damaged block never decodes.
#include <xxhash.h>

#include <cinttypes>
#include <cstring>
#include <limits>

#include "fuzz.hpp"
#include "pool/format.hpp"
#include "resolver/layout.hpp"

using namespace tutti;

namespace {

using u128 = unsigned __int128;
constexpr size_t kBlock = 4096;
// docs/format.md: magic at 0, version at 8, the block's xxh3-64 at 16 (taken with it zeroed).
constexpr char kSuperMagic[8] = {'T', 'U', 'T', 'T', 'I', 'P', 'L', '\0'};
constexpr char kRecordMagic[8] = {'T', 'U', 'T', 'T', 'I', 'C', 'R', '\0'};
constexpr size_t kVersionAt = 8, kSumAt = 16, kUuidAt = 24, kRecordSlotAt = 40;

void stamp(uint8_t* b, uint8_t flags, const char* magic) {
  if (flags & 0x08) std::memcpy(b, magic, 8);
  if (flags & 0x10) std::memcpy(b + kVersionAt, &kFormatVersion, 4);
  if (flags & 0x20) {
    std::memset(b + kSumAt, 0, 8);
    uint64_t sum = XXH3_64bits(b, kBlock);
    std::memcpy(b + kSumAt, &sum, 8);
  }
}

u128 align_up128(u128 v, u128 a) { return (v + a - 1) / a * a; }

// The exact bytes of one file of `spf` slots (docs/format.md), computed without overflow.
u128 exact_file_bytes(const Shape& s, u128 spf, u128* slot_bytes = nullptr) {
  const u128 kv = u128{s.head_dim} * s.elem_bytes * s.heads * s.chunk_tokens;
  const u128 slot = 2 * align_up128(kv, kIoAlign) * s.layers;
  if (slot_bytes) *slot_bytes = slot;
  return align_up128(Geometry::kSuperblockBytes + spf * Geometry::kRecordBytes, Geometry::kDataAlign) + spf * slot;
}

bool same(const Shape& a, const Shape& b) {
  return a.layers == b.layers && a.heads == b.heads && a.head_dim == b.head_dim && a.elem_bytes == b.elem_bytes &&
         a.chunk_tokens == b.chunk_tokens;
}

bool same(const Superblock& a, const Superblock& b) {
  return a.uuid == b.uuid && a.file_index == b.file_index && a.file_count == b.file_count && same(a.shape, b.shape) &&
         a.slots_per_file == b.slots_per_file && a.file_bytes == b.file_bytes;
}

bool same(const Record& a, const Record& b) {
  return a.slot == b.slot && a.generation == b.generation && a.key == b.key && a.layer_sums == b.layer_sums;
}

// What the pool code relies on once a superblock decodes: a shape it can work with, and a file
// whose sizes (records, slots, layers) Geometry computes without overflow.
void check_decoded_superblock(const Superblock& sb) {
  const Shape& s = sb.shape;
  FUZZ_CHECK(s.layers >= 1 && s.layers <= kMaxLayers && s.heads && s.head_dim && s.elem_bytes && s.chunk_tokens,
             "a superblock decoded with shape %s", s.describe().c_str());
  FUZZ_CHECK(sb.file_count >= 1 && sb.file_index < sb.file_count, "a superblock decoded as file %" PRIu32 " of %" PRIu32,
             sb.file_index, sb.file_count);
  FUZZ_CHECK(sb.slots_per_file >= 1, "a superblock decoded with 0 slots per file");
  // Past 2^63 bytes no file exists, so the file-size check refuses the pool; past 2^64 the
  // sizes wrap, and a small file passes for a huge pool.
  u128 slot = 0;
  const u128 bytes = exact_file_bytes(s, sb.slots_per_file, &slot);
  FUZZ_CHECK(bytes <= std::numeric_limits<uint64_t>::max(),
             "a superblock decoded whose file would be 2^%.1f bytes (%s, %" PRIu64 " slots per file): sizes wrap",
             __builtin_log2(static_cast<double>(bytes)), s.describe().c_str(), sb.slots_per_file);
  FUZZ_CHECK(Geometry::file_bytes_for(s, sb.slots_per_file) == static_cast<uint64_t>(bytes),
             "Geometry::file_bytes_for disagrees with the exact size");
  FUZZ_CHECK(s.slot_bytes() == static_cast<uint64_t>(slot), "Shape::slot_bytes disagrees with the exact size");
  const Geometry g(s, 1, sb.slots_per_file);
  const Extent last = g.layer_extent(sb.slots_per_file - 1, s.layers - 1);
  FUZZ_CHECK(last.offset + last.length == static_cast<uint64_t>(bytes), "the last layer extent does not end the file");
}

void decode_superblock_mode(uint8_t flags, uint8_t* b) {
  stamp(b, flags, kSuperMagic);
  Superblock sb;
  if (decode_superblock(b, &sb) != DecodeStatus::kOk) return;
  check_decoded_superblock(sb);
  uint8_t again[kBlock];
  encode_superblock(sb, again);
  Superblock sb2;
  FUZZ_CHECK(decode_superblock(again, &sb2) == DecodeStatus::kOk && same(sb, sb2),
             "a decoded superblock does not survive encode -> decode");
}

void decode_record_mode(uint8_t flags, FuzzInput& in, uint8_t* b) {
  const uint32_t layers = in.in<uint32_t>(0, kMaxLayers);
  uint64_t expect_slot = in.u64();
  Uuid pool;
  std::memset(pool.data(), 0x5a, pool.size());
  in.bytes(b, kBlock);
  if (flags & 0x40) std::memcpy(pool.data(), b + kUuidAt, 16);
  if (flags & 0x80) std::memcpy(&expect_slot, b + kRecordSlotAt, 8);
  stamp(b, flags, kRecordMagic);
  Record r;
  if (decode_record(b, pool, expect_slot, layers, &r) != DecodeStatus::kOk) return;
  FUZZ_CHECK(r.slot == expect_slot && r.layer_sums.size() == layers, "a record decoded for slot %" PRIu64
             " with %zu layers, asked for slot %" PRIu64 " with %" PRIu32, r.slot, r.layer_sums.size(), expect_slot, layers);
  uint8_t again[kBlock];
  encode_record(pool, r, again);
  Record r2;
  FUZZ_CHECK(decode_record(again, pool, expect_slot, layers, &r2) == DecodeStatus::kOk && same(r, r2),
             "a decoded record does not survive encode -> decode");
}

// Any one changed byte of an encoded block makes it undecodable: the checksum covers it all.
void flip_one(FuzzInput& in, uint8_t* b) {
  const size_t at = in.in<size_t>(0, kBlock - 1);
  b[at] ^= in.in<uint8_t>(1, 255);
}

void superblock_round_trip(uint8_t flags, FuzzInput& in) {
  Superblock sb;
  in.bytes(sb.uuid.data(), sb.uuid.size());
  const bool any = flags & 0x08;
  if (any) {
    sb.file_index = in.in<uint32_t>(0, UINT32_MAX);
    sb.file_count = in.in<uint32_t>(0, UINT32_MAX);
    sb.shape = Shape{in.in<uint32_t>(0, UINT32_MAX), in.in<uint32_t>(0, UINT32_MAX), in.in<uint32_t>(0, UINT32_MAX),
                     in.in<uint32_t>(0, UINT32_MAX), in.in<uint32_t>(0, UINT32_MAX)};
    sb.slots_per_file = in.u64();
    sb.file_bytes = in.flag() ? Geometry::file_bytes_for(sb.shape, sb.slots_per_file) : in.u64();
  } else {  // what Pool::open writes for a model that exists
    sb.file_count = in.in<uint32_t>(1, 64);
    sb.file_index = in.in<uint32_t>(0, sb.file_count - 1);
    sb.shape = Shape{in.in<uint32_t>(1, kMaxLayers), in.in<uint32_t>(1, 128), in.in<uint32_t>(1, 512),
                     in.in<uint32_t>(1, 4), in.in<uint32_t>(1, 4096)};
    sb.slots_per_file = in.in<uint64_t>(1, 1 << 20);
    sb.file_bytes = Geometry::file_bytes_for(sb.shape, sb.slots_per_file);
  }
  uint8_t b[kBlock];
  encode_superblock(sb, b);
  Superblock out;
  const DecodeStatus st = decode_superblock(b, &out);
  FUZZ_CHECK(any || st == DecodeStatus::kOk, "the superblock of a sane pool (%s) does not decode: status %d",
             sb.shape.describe().c_str(), static_cast<int>(st));
  FUZZ_CHECK(st != DecodeStatus::kBlank && st != DecodeStatus::kBadMagic && st != DecodeStatus::kBadChecksum,
             "an encoded superblock decodes as blank, foreign or damaged: status %d", static_cast<int>(st));
  if (st == DecodeStatus::kOk) {
    check_decoded_superblock(out);
    FUZZ_CHECK(same(sb, out), "superblock fields change in encode -> decode");
  }
  flip_one(in, b);
  FUZZ_CHECK(decode_superblock(b, &out) != DecodeStatus::kOk, "a superblock with a changed byte decodes");
}

void record_round_trip(FuzzInput& in) {
  Uuid pool;
  in.bytes(pool.data(), pool.size());
  Record r;
  r.slot = in.u64();
  r.generation = in.u64();
  r.key.lo = in.u64();
  r.key.hi = in.u64();
  const uint32_t layers = in.in<uint32_t>(1, kMaxLayers);
  r.layer_sums.resize(layers);
  for (auto& s : r.layer_sums) s = in.u64();
  uint8_t b[kBlock];
  encode_record(pool, r, b);
  Record out;
  FUZZ_CHECK(decode_record(b, pool, r.slot, layers, &out) == DecodeStatus::kOk && same(r, out),
             "a record (slot %" PRIu64 ", %" PRIu32 " layers) does not survive encode -> decode", r.slot, layers);
  Uuid other = pool;
  other[in.in<size_t>(0, 15)] ^= 1;
  FUZZ_CHECK(decode_record(b, other, r.slot, layers, &out) != DecodeStatus::kOk, "a record decodes for another pool");
  FUZZ_CHECK(decode_record(b, pool, r.slot ^ 1, layers, &out) != DecodeStatus::kOk, "a record decodes for another slot");
  FUZZ_CHECK(decode_record(b, pool, r.slot, layers - 1, &out) != DecodeStatus::kOk &&
                 (layers == kMaxLayers || decode_record(b, pool, r.slot, layers + 1, &out) != DecodeStatus::kOk),
             "a record of %" PRIu32 " layers decodes for another layer count", layers);
  flip_one(in, b);
  FUZZ_CHECK(decode_record(b, pool, r.slot, layers, &out) != DecodeStatus::kOk, "a record with a changed byte decodes");
}

// What a new pool file of `bytes` holds: slots_for must give the most slots that fit, computed
// without overflow, for any capacity the options accept.
void slots_for_mode(FuzzInput& in) {
  Shape s{in.in<uint32_t>(1, kMaxLayers), in.in<uint32_t>(1, 1024), in.in<uint32_t>(1, 1024),
          in.in<uint32_t>(1, 8), in.in<uint32_t>(1, 1u << 20)};
  const uint64_t bytes =
      in.flag() ? std::numeric_limits<uint64_t>::max() - in.in<uint32_t>(0, UINT32_MAX) : in.u64();
  const uint64_t n = Geometry::slots_for(s, bytes);
  FUZZ_CHECK(exact_file_bytes(s, n) <= bytes || n == 0,
             "slots_for(%s, %" PRIu64 ") = %" PRIu64 " slots, which need %.4g bytes", s.describe().c_str(), bytes, n,
             static_cast<double>(exact_file_bytes(s, n)));
  FUZZ_CHECK(exact_file_bytes(s, u128{n} + 1) > bytes,
             "slots_for(%s, %" PRIu64 ") = %" PRIu64 " slots, but one more fits", s.describe().c_str(), bytes, n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  FuzzInput in(data + 1, size - 1);
  alignas(8) uint8_t block[kBlock] = {};
  switch (mode & 7) {
    case 0:
      in.bytes(block, kBlock);
      decode_superblock_mode(mode, block);
      break;
    case 1:
      decode_record_mode(mode, in, block);
      break;
    case 2:
      superblock_round_trip(mode, in);
      break;
    case 3:
      record_round_trip(in);
      break;
    case 4:
      slots_for_mode(in);
      break;
    default:
      break;
  }
  return 0;
}
