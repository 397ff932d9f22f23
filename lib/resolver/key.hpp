// SPDX-License-Identifier: Apache-2.0
// Chunk keys: a chain of 128-bit xxh3 hashes, key[i] = H(key[i-1], tokens of chunk i), with
// key[-1] = H(namespace, salt). A key names its whole prefix, so a hit is always a prefix hit.
// Keys depend only on their inputs (no per-process seed) and are stable across restarts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace tutti {

struct Key {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const noexcept { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

// The key every prompt's chain starts from: the namespace, the request's salt, and the rank of
// a runtime that shares its pool with others (ranks > 1), so that ranks' keys never meet.
Key root_key(std::string_view ns, const void* salt, size_t salt_len, uint32_t rank = 0, uint32_t ranks = 1);
Key chunk_key(const Key& parent, const int32_t* tokens, size_t count);

// A partial chunk: the tail of a prompt, fewer tokens than a chunk, stored in a slot of its
// own under H(parent, its tokens) with another seed than whole chunks. partial_keys gives the
// keys of tokens[0, granule), [0, 2 * granule), ... up to `count` tokens, in one pass.
Key partial_key(const Key& parent, const int32_t* tokens, size_t count);
std::vector<Key> partial_keys(const Key& parent, const int32_t* tokens, size_t count, size_t granule);

// Keys of the first `max_chunks` full chunks of a prompt.
std::vector<Key> chunk_keys(const Key& root, const int32_t* tokens, size_t num_tokens,
                            size_t chunk_tokens, size_t max_chunks = SIZE_MAX);

}  // namespace tutti
