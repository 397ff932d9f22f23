// SPDX-License-Identifier: Apache-2.0
#include "resolver/key.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

namespace tutti {
namespace {

// Distinct seeds keep a root key from ever equalling a chunk key of the same bytes.
constexpr uint64_t kRootSeed = 0x7475747469726f6full;   // "tuttiroo"
constexpr uint64_t kChunkSeed = 0x74757474696b6579ull;  // "tuttikey"
constexpr uint64_t kPartialSeed = 0x7475747469706172ull;  // "tuttipar": a partial chunk is never a whole one

Key from_xxh(XXH128_hash_t h) { return Key{h.low64, h.high64}; }

void put_u64(XXH3_state_t* s, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  XXH3_128bits_update(s, b, 8);
}

// Token ids are hashed as little-endian int32 so keys match across hosts.
void put_tokens(XXH3_state_t* s, const int32_t* tokens, size_t count) {
  unsigned char buf[4 * 256];
  size_t i = 0;
  while (i < count) {
    size_t n = 0;
    for (; n < 256 && i < count; ++n, ++i) {
      uint32_t t = static_cast<uint32_t>(tokens[i]);
      buf[4 * n + 0] = static_cast<unsigned char>(t);
      buf[4 * n + 1] = static_cast<unsigned char>(t >> 8);
      buf[4 * n + 2] = static_cast<unsigned char>(t >> 16);
      buf[4 * n + 3] = static_cast<unsigned char>(t >> 24);
    }
    XXH3_128bits_update(s, buf, 4 * n);
  }
}

// A chunk key's hash state: `seed`, then the parent key.
void start_child(XXH3_state_t* s, uint64_t seed, const Key& parent) {
  XXH3_INITSTATE(s);
  XXH3_128bits_reset_withSeed(s, seed);
  put_u64(s, parent.lo);
  put_u64(s, parent.hi);
}

}  // namespace

Key root_key(std::string_view ns, const void* salt, size_t salt_len, uint32_t rank, uint32_t ranks) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_state_t* s = &state;
  XXH3_128bits_reset_withSeed(s, kRootSeed);
  put_u64(s, ns.size());
  XXH3_128bits_update(s, ns.data(), ns.size());
  put_u64(s, salt_len);
  if (salt_len) XXH3_128bits_update(s, salt, salt_len);
  if (ranks > 1) {  // the keys of a pool's one runtime stay what they were before ranks
    put_u64(s, rank);
    put_u64(s, ranks);
  }
  return from_xxh(XXH3_128bits_digest(s));
}

Key chunk_key(const Key& parent, const int32_t* tokens, size_t count) {
  XXH3_state_t s;
  start_child(&s, kChunkSeed, parent);
  put_tokens(&s, tokens, count);
  return from_xxh(XXH3_128bits_digest(&s));
}

Key partial_key(const Key& parent, const int32_t* tokens, size_t count) {
  const auto keys = partial_keys(parent, tokens, count, count ? count : 1);
  return keys.empty() ? Key{} : keys.back();
}

std::vector<Key> partial_keys(const Key& parent, const int32_t* tokens, size_t count, size_t granule) {
  XXH3_state_t s;
  start_child(&s, kPartialSeed, parent);
  std::vector<Key> keys;
  keys.reserve(count / granule);
  for (size_t n = granule; n <= count; n += granule) {
    put_tokens(&s, tokens + n - granule, granule);
    keys.push_back(from_xxh(XXH3_128bits_digest(&s)));  // a digest leaves the state going on
  }
  return keys;
}

std::vector<Key> chunk_keys(const Key& root, const int32_t* tokens, size_t num_tokens,
                            size_t chunk_tokens, size_t max_chunks) {
  std::vector<Key> keys;
  size_t n = num_tokens / chunk_tokens;
  if (n > max_chunks) n = max_chunks;
  keys.reserve(n);
  Key parent = root;
  for (size_t c = 0; c < n; ++c) {
    parent = chunk_key(parent, tokens + c * chunk_tokens, chunk_tokens);
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace tutti
