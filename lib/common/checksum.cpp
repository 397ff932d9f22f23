#include "common/checksum.hpp"

#include <xxhash.h>

#include "kernels/layer_sum.hpp"

namespace tutti {
namespace {
constexpr sum::Secret kSecret = sum::make_secret();
static_assert(sum::kSecretBytes >= XXH3_SECRET_SIZE_MIN);
}  // namespace

uint64_t page_hash(const void* page) {
  return XXH3_64bits_withSecret(page, sum::kPageBytes, kSecret.bytes, sizeof kSecret.bytes);
}

uint64_t page_term(const void* page, uint64_t index) { return sum::page_term(page_hash(page), index); }

uint64_t page_terms(const void* data, uint64_t first, uint64_t pages) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t terms = 0;
  for (uint64_t i = 0; i < pages; ++i) terms += page_term(p + i * sum::kPageBytes, first + i);
  return terms;
}

uint64_t layer_sum_of_terms(uint64_t terms, uint64_t bytes) { return sum::finish(terms, bytes / sum::kPageBytes); }

uint64_t layer_sum(const void* extent, uint64_t bytes) {
  return layer_sum_of_terms(page_terms(extent, 0, bytes / sum::kPageBytes), bytes);
}

}  // namespace tutti
