// SPDX-License-Identifier: Apache-2.0
// The page hash (XXH3-64 with tutti's secret) compiled with -mavx2 (lib/CMakeLists.txt), from
// xxhash's header; checksum.cpp calls it where the CPU has AVX2. Debian's libxxhash is built for
// SSE2 only.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace tutti::detail {

uint64_t page_hash_avx2(const void* page, size_t bytes, const void* secret, size_t secret_bytes) {
  return XXH3_64bits_withSecret(page, bytes, secret, secret_bytes);
}

}  // namespace tutti::detail
