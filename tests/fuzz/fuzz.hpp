// SPDX-License-Identifier: Apache-2.0
// fuzz.hpp — what the libFuzzer harnesses share: a failed invariant prints where and why, then
// aborts, which libFuzzer reports as a crash and saves the input that caused it; the input is
// read front to back (FuzzInput), so seeds are easy to write (tests/fuzz/make-corpus).
#pragma once

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tutti.h"

#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

// Every code a tutti call may return: TUTTI_OK or one of the enum's errors, which are the
// codes tutti_strerror names (anything else gets the name of a code no enum will hold).
inline bool fuzz_known_code(int rc) {
  return rc <= 0 && (rc == 0 || std::strcmp(tutti_strerror(rc), tutti_strerror(INT_MIN)) != 0);
}

// A call that failed must say why on this thread.
#define FUZZ_CHECK_RC(call_text, rc)                                                       \
  do {                                                                                     \
    int fuzz_rc_ = (rc);                                                                   \
    FUZZ_CHECK(fuzz_known_code(fuzz_rc_), "%s returned %d, not a tutti_error", call_text, fuzz_rc_); \
    FUZZ_CHECK(fuzz_rc_ == 0 || tutti_last_error()[0] != '\0', "%s returned %d (%s) with no message", \
               call_text, fuzz_rc_, tutti_strerror(fuzz_rc_));                             \
  } while (0)

// The input read front to back, so a seed is written in the order the harness reads it: each
// value takes the fewest whole bytes its range needs, little-endian; past the end, zeros.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  bool flag() { return byte() & 1; }
  uint64_t u64() { return bits(8); }
  // A value in [lo, hi].
  template <class T>
  T in(T lo, T hi) {
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    const unsigned n = range < (1u << 8) ? 1 : range < (1u << 16) ? 2 : range < (1ull << 32) ? 4 : 8;
    const uint64_t v = bits(n);
    return static_cast<T>(static_cast<uint64_t>(lo) + (range == UINT64_MAX ? v : v % (range + 1)));
  }
  template <class T, size_t N>
  const T& pick(const T (&v)[N]) { return v[in<size_t>(0, N - 1)]; }
  // A string: its length (at most max), then its bytes.
  std::string str(size_t max) {
    std::string s(in<size_t>(0, max), '\0');
    bytes(s.data(), s.size());
    return s;
  }
  // n bytes (zeros past the end).
  void bytes(void* out, size_t n) {
    const size_t k = n < remaining() ? n : remaining();
    std::memcpy(out, p_, k);
    std::memset(static_cast<uint8_t*>(out) + k, 0, n - k);
    p_ += k;
  }

 private:
  uint64_t bits(unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};
