// SPDX-License-Identifier: Apache-2.0
// The checksum of a chunk-layer extent (pool format 2), one definition for the CPU and the GPU.
//
// Each 4 KiB page of the extent is hashed on its own with XXH3-64 under tutti's own secret; the
// layer's sum adds one position-keyed term per page and mixes the total. Pages are independent
// and terms add, so the sum can be computed where the bytes land, in any order: a GPU warp per
// page (kernels/device.cu), an I/O thread per chunk with libxxhash (lib/common/checksum.hpp),
// or several I/Os of one extent each adding the terms of their pages.
//
// page_hash_scalar() is the plain reference of the page hash: the unit tests check it against
// libxxhash's XXH3_64bits_withSecret, and the GPU's warp version against it.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/copy_layout.hpp"  // TUTTI_HOST_DEVICE

namespace tutti::sum {

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kSecretBytes = 192;  // XXH3's default secret size: 16 stripes per 1 KiB block

constexpr uint64_t kPrime32_1 = 0x9E3779B1u, kPrime32_2 = 0x85EBCA77u, kPrime32_3 = 0xC2B2AE3Du;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull, kPrime64_2 = 0xC2B2AE3D27D4EB4Full,
                   kPrime64_3 = 0x165667B19E3779F9ull, kPrime64_4 = 0x85EBCA77C2B2AE63ull,
                   kPrime64_5 = 0x27D4EB2F165667C5ull;

// A strong 64-bit finalizer (splitmix64's).
TUTTI_HOST_DEVICE constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// tutti's secret: 192 bytes drawn from mix64 of a counter seeded with "tutti".
struct Secret {
  uint8_t bytes[kSecretBytes];
};
TUTTI_HOST_DEVICE constexpr Secret make_secret() {
  Secret s{};
  uint64_t x = 0x7475747469000000ull;
  for (uint32_t w = 0; w < kSecretBytes / 8; ++w) {
    x += 0x9E3779B97F4A7C15ull;
    const uint64_t z = mix64(x);
    for (uint32_t b = 0; b < 8; ++b) s.bytes[w * 8 + b] = static_cast<uint8_t>(z >> (8 * b));
  }
  return s;
}

TUTTI_HOST_DEVICE inline uint64_t read64(const uint8_t* p) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | p[b];  // little-endian, any alignment
  return v;
}

// The term page `index` with hash `h` adds to its layer's sum: swapped pages change the sum.
TUTTI_HOST_DEVICE inline uint64_t page_term(uint64_t h, uint64_t index) {
  return mix64(h ^ ((index + 1) * kPrime64_2));
}
// The layer's sum from the sum of its page terms (mod 2^64) and its number of pages.
TUTTI_HOST_DEVICE inline uint64_t finish(uint64_t terms, uint64_t pages) {
  return mix64(terms ^ (pages * kPrime64_3));
}

TUTTI_HOST_DEVICE inline uint64_t mul32(uint64_t x) { return (x & 0xFFFFFFFFull) * (x >> 32); }
TUTTI_HOST_DEVICE inline uint64_t scramble(uint64_t acc, uint64_t key) {
  acc ^= acc >> 47;
  acc ^= key;
  return acc * kPrime32_1;
}
TUTTI_HOST_DEVICE inline uint64_t fold128(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}
TUTTI_HOST_DEVICE inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  return h ^ (h >> 32);
}
TUTTI_HOST_DEVICE inline void init_acc(uint64_t acc[8]) {
  const uint64_t init[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                            kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  for (int i = 0; i < 8; ++i) acc[i] = init[i];
}
// The final mix of the eight accumulators of a 4 KiB input.
TUTTI_HOST_DEVICE inline uint64_t merge(const uint64_t acc[8], const uint8_t* secret) {
  uint64_t h = uint64_t{kPageBytes} * kPrime64_1;
  for (int i = 0; i < 4; ++i)
    h += fold128(acc[2 * i] ^ read64(secret + 11 + 16 * i), acc[2 * i + 1] ^ read64(secret + 11 + 16 * i + 8));
  return avalanche(h);
}

// XXH3-64 of one 4 KiB page under `secret` (kSecretBytes), byte by byte as the algorithm reads:
// blocks of 16 64-byte stripes with a scramble after each full block; 4096 bytes are three full
// blocks, 15 stripes, and the last stripe once more under the secret's tail.
TUTTI_HOST_DEVICE inline uint64_t page_hash_scalar(const uint8_t* page, const uint8_t* secret) {
  uint64_t acc[8];
  init_acc(acc);
  auto stripe = [&](const uint8_t* in, const uint8_t* key) {
    for (int i = 0; i < 8; ++i) {
      const uint64_t d = read64(in + 8 * i);
      acc[i ^ 1] += d;
      acc[i] += mul32(d ^ read64(key + 8 * i));
    }
  };
  for (uint32_t b = 0; b < 4; ++b) {
    const uint32_t stripes = b < 3 ? 16 : 15;
    for (uint32_t j = 0; j < stripes; ++j) stripe(page + b * 1024 + j * 64, secret + j * 8);
    if (b < 3)
      for (int i = 0; i < 8; ++i) acc[i] = scramble(acc[i], read64(secret + kSecretBytes - 64 + 8 * i));
  }
  stripe(page + kPageBytes - 64, secret + kSecretBytes - 64 - 7);
  return merge(acc, secret);
}

}  // namespace tutti::sum
