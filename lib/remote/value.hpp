// SPDX-License-Identifier: Apache-2.0
// A chunk-layer as a value of the shared tier: a 64-byte header that names what the value is
// (the chunk's key, the KV shape's fingerprint, the layer) and sums it, then the layer's bytes
// exactly as a pool slot holds them. A value is trusted only when its header names the key it
// was read under and its bytes match their checksum: anything else is a miss, never KV handed
// back (another model's value under a colliding key, a torn or foreign write, bit rot).
//
// Redis key: tutti:{<fingerprint>:<chunk key>}:<layer>. The {hash tag} puts every layer of a
// chunk in one cluster slot, so one node serves a chunk and its layers pipeline together.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "resolver/key.hpp"
#include "resolver/layout.hpp"

namespace tutti::remote {

inline constexpr size_t kValueHeaderBytes = 64;
inline constexpr uint32_t kValueVersion = 1;

// What a value is: a chunk's layer, of a KV shape.
struct ValueId {
  Key chunk;
  uint64_t shape = 0;  // shape_fingerprint()
  uint32_t layer = 0;
};

// A stable 64-bit name of a KV shape (the pool's layout fingerprint).
uint64_t shape_fingerprint(const Shape& s);

std::string value_key(const ValueId& id);

// The checksum of a payload: layer_sum (the pool's, so a slot's commit record and a value sum a
// chunk-layer alike) for whole pages, else XXH3-64.
uint64_t payload_sum(const void* payload, uint64_t bytes);

// The header of a value whose payload (the chunk-layer's bytes) sums to `payload_sum`
// (layer_sum, as a pool's commit record holds it).
void encode_value_header(const ValueId& id, uint64_t payload_bytes, uint64_t payload_sum, uint8_t out[kValueHeaderBytes]);

enum class ValueStatus {
  kOk,
  kBadLength,    // shorter than a header, or not the length its header says
  kNotOurs,      // no tutti value (magic) or another version
  kBadHeader,    // the header's own checksum fails
  kForeign,      // a sound value of another chunk, shape or layer
  kBadChecksum,  // the payload does not match its checksum
};
const char* describe(ValueStatus s);

// Checks a value read under `id`'s key, expecting `payload_bytes` of payload; on kOk the
// payload is value.substr(kValueHeaderBytes).
ValueStatus check_value(std::string_view value, const ValueId& id, uint64_t payload_bytes);
// The payload checksum a checked value's header holds (a commit record's layer checksum).
uint64_t value_payload_sum(std::string_view value);

}  // namespace tutti::remote
