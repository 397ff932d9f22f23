// SPDX-License-Identifier: Apache-2.0
// fuzz_options — option parsing and validation: tutti_options_set with any key and value,
// TUTTI_* environment variables, then tutti_runtime_open (which resolves and validates them
// and opens no pool file: it only stats their paths), and the parsers under them: sizes, integers and pool URIs.
//
// Input: steps, until the data runs out, read front to back (FuzzInput) as
// tests/fuzz/make-corpus writes them: [step, key (an index into the option table, or 255 and
// a string), value (length, bytes), the step's own values]:
//   0 tutti_options_set(key, value)
//   1 TUTTI_<KEY> = value for this input (TUTTI_POOL when the key is "pool")
//   2 parse_size / parse_uint on the value, and on [number, shift, suffix]; format_bytes
//   3 parse_pool_uri on the value
// then tutti_runtime_open. Invariants: no crash, leak or UB; every return is a code of the enum
// with a message when it is not 0; a value tutti_options_set accepted is not refused by
// tutti_runtime_open as invalid (errors point at the call that caused them), but for the one
// rule between two options (rank below ranks), which open must enforce; the parsers agree
// with the grammar of tutti.h ("sizes accept K/M/G/T suffixes, powers of 1024").

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/units.hpp"
#include "fuzz.hpp"
#include "resolver/uri.hpp"
#include "runtime/config.hpp"

using namespace tutti;

extern char** environ;

namespace {

std::string env_name(const std::string& key) {
  std::string s = "TUTTI_";
  for (char c : key) s += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

// The digits of a decimal integer as parse_uint must read them (nullopt: not a uint64).
std::optional<uint64_t> reference_uint(std::string_view s) {
  if (s.empty()) return std::nullopt;
  unsigned __int128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
    if (v > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  }
  return static_cast<uint64_t>(v);
}

unsigned shift_of(char c) {
  switch (c) {
    case 'k': case 'K': return 10;
    case 'm': case 'M': return 20;
    case 'g': case 'G': return 30;
    case 't': case 'T': return 40;
    default: return 0;
  }
}

void check_parsers(const std::string& s, FuzzInput& in) {
  // parse_uint: exactly the decimal integers that fit (it may refuse over 20 characters).
  const auto u = parse_uint(s), ref = reference_uint(s);
  FUZZ_CHECK(u == ref || (s.size() > 20 && !u), "parse_uint(\"%s\") = %s%" PRIu64 ", the number is %s%" PRIu64,
             s.c_str(), u ? "" : "(none) ", u.value_or(0), ref ? "" : "(none) ", ref.value_or(0));
  // parse_size: a number, then a suffix and at most "iB"; the value is the number << suffix.
  if (const auto v = parse_size(s)) {
    size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    const auto n = reference_uint(std::string_view(s).substr(0, digits));
    const std::string rest = s.substr(digits);
    const unsigned shift = rest.empty() ? 0 : shift_of(rest[0]);
    FUZZ_CHECK(n && rest.size() <= 3 && (*v >> shift) == *n && (*n << shift) == *v,
               "parse_size(\"%s\") = %" PRIu64, s.c_str(), *v);
  }
  // Every number with every suffix reads back, unless it overflows.
  static const char* const kSuffixes[] = {"", "K", "m", "G", "t", "KiB", "MB", "g", "Gib", "T", "B"};
  const uint64_t n = in.u64() >> in.in<unsigned>(0, 63);
  const char* suffix = in.pick(kSuffixes);
  const unsigned shift = shift_of(suffix[0]);
  const auto v = parse_size(std::to_string(n) + suffix);
  const bool fits = (n << shift >> shift) == n;
  FUZZ_CHECK(fits ? v == (n << shift) : !v, "parse_size(\"%" PRIu64 "%s\") = %s%" PRIu64, n, suffix,
             v ? "" : "(none) ", v.value_or(0));
  const std::string text = format_bytes(n);
  FUZZ_CHECK(!text.empty() && text.size() < 32, "format_bytes(%" PRIu64 ") = \"%s\"", n, text.c_str());
}

void check_uri(const std::string& s) {
  try {
    const PoolUri u = parse_pool_uri(s);
    FUZZ_CHECK(!u.path.empty(), "parse_pool_uri(\"%s\") gave an empty path", s.c_str());
    FUZZ_CHECK(s.find("size=") != std::string::npos || u.size == 0, "parse_pool_uri(\"%s\") made up a size", s.c_str());
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == TUTTI_EINVAL && e.what()[0] != '\0', "parse_pool_uri(\"%s\") threw code %d: %s", s.c_str(),
               e.code(), e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A clean environment: only the variables an input sets count.
  std::vector<std::string> names;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TUTTI_", 6) == 0) names.emplace_back(*e, std::strcspn(*e, "="));
  for (auto& n : names) ::unsetenv(n.c_str());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const auto& table = option_table();
  tutti_options* opts = nullptr;
  FUZZ_CHECK(tutti_options_create(&opts) == 0 && opts, "tutti_options_create failed");
  // posix unless an input picks another backend: opening probes no io_uring ring per input.
  FUZZ_CHECK(tutti_options_set(opts, "backend", "posix") == 0, "backend=posix refused: %s", tutti_last_error());
  std::vector<std::string> env;
  bool no_env = true;  // then every value in force went through tutti_options_set
  // The one rule between options, which only tutti_runtime_open can check: rank < ranks.
  uint64_t rank = 0, ranks = 1;

  while (in.remaining() > 0) {
    const uint8_t step = in.byte() % 4;
    const uint8_t k = in.byte();
    const std::string key = k == 255 ? in.str(24) : table[k % table.size()].key;
    const std::string value = in.str(80);
    switch (step) {
      case 0: {
        const int rc = tutti_options_set(opts, key.c_str(), value.c_str());
        FUZZ_CHECK_RC("tutti_options_set", rc);
        FUZZ_CHECK(rc == 0 || rc == TUTTI_EINVAL, "tutti_options_set(%s, \"%s\") = %d (%s), not 0 or TUTTI_EINVAL",
                   key.c_str(), value.c_str(), rc, tutti_strerror(rc));
        // (key and value as the C call saw them: up to a NUL)
        if (rc == 0 && std::strcmp(key.c_str(), "rank") == 0) rank = parse_uint(value.c_str()).value();
        if (rc == 0 && std::strcmp(key.c_str(), "ranks") == 0) ranks = parse_uint(value.c_str()).value();
        break;  // (a refused value changes nothing)
      }
      case 1: {
        if (key.find('=') != std::string::npos || key.find('\0') != std::string::npos) break;
        const std::string name = env_name(key);  // TUTTI_POOL for "pool"
        ::setenv(name.c_str(), value.c_str(), 1);
        env.push_back(name);
        no_env = false;
        break;
      }
      case 2:
        check_parsers(value, in);
        break;
      case 3:
        check_uri(value);
        break;
    }
  }

  tutti_runtime* rt = nullptr;
  const int rc = tutti_runtime_open(opts, &rt);
  FUZZ_CHECK_RC("tutti_runtime_open", rc);
  FUZZ_CHECK((rc == 0) == (rt != nullptr), "tutti_runtime_open = %d with runtime %p", rc, static_cast<void*>(rt));
  if (no_env && rank >= ranks)
    FUZZ_CHECK(rc == TUTTI_EINVAL && std::strstr(tutti_last_error(), "rank"),
               "rank %" PRIu64 " of %" PRIu64 " ranks, but tutti_runtime_open says %d (%s): %s", rank, ranks, rc,
               tutti_strerror(rc), tutti_last_error());
  else
    FUZZ_CHECK(!no_env || rc == 0 || rc == TUTTI_EUNSUPPORTED,
               "every value in force was accepted by tutti_options_set, but tutti_runtime_open says %d (%s): %s", rc,
               tutti_strerror(rc), tutti_last_error());
  if (rt) FUZZ_CHECK(tutti_runtime_backend(rt)[0] != '\0', "an open runtime names no backend");
  tutti_runtime_close(rt);
  tutti_options_destroy(opts);
  for (auto& name : env) ::unsetenv(name.c_str());
  return 0;
}
