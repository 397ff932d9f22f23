// SPDX-License-Identifier: Apache-2.0
#include "args.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "common/error.hpp"
#include "common/units.hpp"

namespace tutti::cli {

const char* Args::value() {
  if (i_ >= argc_) {
    std::fprintf(stderr, "tutti %s: %s needs a value\n", command_, argv_[i_ - 1]);
    std::exit(2);
  }
  return argv_[i_++];
}

size_t Args::positive(size_t max) {
  const char* flag = argv_[i_ - 1];
  const char* v = value();
  auto n = parse_size(v);
  if (!n || *n == 0) {
    std::fprintf(stderr, "tutti %s: %s: '%s' is not a positive number\n", command_, flag, v);
    std::exit(2);
  }
  if (*n > max) {
    std::fprintf(stderr, "tutti %s: %s: '%s' is more than %zu\n", command_, flag, v, max);
    std::exit(2);
  }
  return *n;
}

int usage_error(const char* command, const char* fmt, ...) {
  std::fprintf(stderr, "tutti %s: ", command);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  return 2;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (size_t s = 0; s <= list.size();) {
    size_t e = list.find(',', s);
    if (e == std::string::npos) e = list.size();
    if (e > s) out.push_back(list.substr(s, e - s));
    s = e + 1;
  }
  return out;
}

std::vector<PoolUri> pool_args(int argc, char** argv, std::initializer_list<Flag> flags) {
  std::vector<PoolUri> uris;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool known = false;
    for (const Flag& f : flags)
      if (a == f.name) *f.set = known = true;
    if (known) continue;
    if (a.size() > 1 && a[0] == '-') {
      std::string names;
      for (const Flag& f : flags) names += (names.empty() ? "" : ", ") + std::string(f.name);
      fail(TUTTI_EINVAL, "unknown option '" + a + "' (this command takes " + names + " and pool files)");
    }
    uris.push_back(parse_pool_uri(a));
  }
  if (uris.empty()) fail(TUTTI_EINVAL, "name the pool file(s)");
  return uris;
}

}  // namespace tutti::cli
