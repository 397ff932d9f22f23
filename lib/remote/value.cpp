// SPDX-License-Identifier: Apache-2.0
#include "remote/value.hpp"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "common/checksum.hpp"

namespace tutti::remote {

namespace {

// Header layout (little-endian):
//   0  8  magic "TUTTIRV\0"      32  8  shape fingerprint
//   8  4  version                40  8  payload bytes
//  12  4  layer                  48  8  payload checksum (layer_sum)
//  16 16  chunk key (lo, hi)     56  8  XXH3-64 of bytes 0..55
constexpr char kMagic[8] = {'T', 'U', 'T', 'T', 'I', 'R', 'V', '\0'};

void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

uint64_t shape_fingerprint(const Shape& s) {
  uint8_t b[24];
  put32(b, s.layers);
  put32(b + 4, s.heads);
  put32(b + 8, s.head_dim);
  put32(b + 12, s.elem_bytes);
  put32(b + 16, s.chunk_tokens);
  put32(b + 20, s.k_only ? 1 : 0);
  return XXH3_64bits(b, sizeof b);
}

std::string value_key(const ValueId& id) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "tutti:{%016llx:%016llx%016llx}:%u", static_cast<unsigned long long>(id.shape),
                static_cast<unsigned long long>(id.chunk.hi), static_cast<unsigned long long>(id.chunk.lo), id.layer);
  return buf;
}

void encode_value_header(const ValueId& id, uint64_t payload_bytes, uint64_t payload_sum, uint8_t out[kValueHeaderBytes]) {
  std::memcpy(out, kMagic, 8);
  put32(out + 8, kValueVersion);
  put32(out + 12, id.layer);
  put64(out + 16, id.chunk.lo);
  put64(out + 24, id.chunk.hi);
  put64(out + 32, id.shape);
  put64(out + 40, payload_bytes);
  put64(out + 48, payload_sum);
  put64(out + 56, XXH3_64bits(out, 56));
}

uint64_t payload_sum(const void* payload, uint64_t bytes) {
  return bytes % 4096 == 0 ? layer_sum(payload, bytes) : XXH3_64bits(payload, bytes);
}

const char* describe(ValueStatus s) {
  switch (s) {
    case ValueStatus::kOk: return "ok";
    case ValueStatus::kBadLength: return "not the length its header says";
    case ValueStatus::kNotOurs: return "not a tutti value of this version";
    case ValueStatus::kBadHeader: return "header checksum mismatch";
    case ValueStatus::kForeign: return "a value of another chunk, shape or layer";
    case ValueStatus::kBadChecksum: return "payload checksum mismatch";
  }
  return "?";
}

ValueStatus check_value(std::string_view value, const ValueId& id, uint64_t payload_bytes) {
  if (value.size() < kValueHeaderBytes) return ValueStatus::kBadLength;
  const auto* h = reinterpret_cast<const uint8_t*>(value.data());
  if (std::memcmp(h, kMagic, 8) != 0 || get32(h + 8) != kValueVersion) return ValueStatus::kNotOurs;
  if (XXH3_64bits(h, 56) != get64(h + 56)) return ValueStatus::kBadHeader;
  if (get32(h + 12) != id.layer || get64(h + 16) != id.chunk.lo || get64(h + 24) != id.chunk.hi ||
      get64(h + 32) != id.shape || get64(h + 40) != payload_bytes)
    return ValueStatus::kForeign;
  if (value.size() != kValueHeaderBytes + payload_bytes) return ValueStatus::kBadLength;
  return payload_sum(h + kValueHeaderBytes, payload_bytes) == get64(h + 48) ? ValueStatus::kOk : ValueStatus::kBadChecksum;
}

uint64_t value_payload_sum(std::string_view value) {
  return value.size() >= kValueHeaderBytes ? get64(reinterpret_cast<const uint8_t*>(value.data()) + 48) : 0;
}

}  // namespace tutti::remote
