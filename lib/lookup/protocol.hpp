// SPDX-License-Identifier: Apache-2.0
// The lookup service's wire format: how a process that does not own the pool (an engine's
// scheduler) asks the runtime that does (a worker) how much of a prompt is cached, and pins
// it. One Unix stream socket per client, requests answered in order. Both ends are processes
// of one machine built from one header, so fields are in host byte order; the magic and the
// version turn a stranger or an incompatible tutti away instead of misreading it.
#pragma once

#include <cstdint>

namespace tutti::lookup {

constexpr uint32_t kMagic = 0x504b4c54;  // "TLKP"
constexpr uint16_t kVersion = 1;

enum class Op : uint16_t {
  kLookup = 1,   // cached tokens; no pin
  kLease = 2,    // cached tokens, pinned until released, ttl_ms passed (0: none) or the client goes
  kRelease = 3,  // a lease of this connection
};

// Bounds a server reads up to, so a broken client cannot make it allocate without limit.
constexpr uint64_t kMaxTokens = uint64_t{1} << 24;
constexpr uint32_t kMaxSalt = 1u << 16;
constexpr uint32_t kMaxMessage = 1024;

struct Request {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t op = 0;
  uint32_t salt_len = 0;  // salt bytes, then num_tokens int32 token ids, follow
  uint32_t ttl_ms = 0;    // kLease
  uint64_t num_tokens = 0;
  uint64_t lease = 0;     // kRelease
};
static_assert(sizeof(Request) == 32);

struct Reply {
  int32_t status = 0;        // a tutti_error
  uint32_t message_len = 0;  // the error's message follows (status != 0)
  uint64_t cached_tokens = 0;
  uint64_t lease = 0;        // kLease: its id
};
static_assert(sizeof(Reply) == 24);

}  // namespace tutti::lookup
