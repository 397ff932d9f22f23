// SPDX-License-Identifier: Apache-2.0
// Layer checksums on the CPU (pool format 2; the definition is kernels/layer_sum.hpp): pages are
// hashed with libxxhash, whose SIMD code is the fastest the machine has.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tutti {

// XXH3-64 of one 4 KiB page under tutti's secret.
uint64_t page_hash(const void* page);
// The term of page `index` (of its extent) in the layer's sum.
uint64_t page_term(const void* page, uint64_t index);
// Sum of the terms of `pages` consecutive pages, the first being page `first` of the extent.
uint64_t page_terms(const void* data, uint64_t first, uint64_t pages);
// The checksum of a whole extent of `bytes` (a multiple of 4 KiB) from the sum of its terms.
uint64_t layer_sum_of_terms(uint64_t terms, uint64_t bytes);
// The checksum of a whole extent held in one buffer.
uint64_t layer_sum(const void* extent, uint64_t bytes);

}  // namespace tutti
