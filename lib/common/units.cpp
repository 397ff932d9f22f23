// SPDX-License-Identifier: Apache-2.0
#include "common/units.hpp"

#include <cstdio>
#include <limits>

namespace tutti {

std::optional<uint64_t> parse_uint(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::optional<uint64_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  unsigned shift = 0;
  char last = text.back();
  if (last == 'B' || last == 'b') {  // "64GB", "64GiB" read as "64G"
    text.remove_suffix(1);
    if (!text.empty() && (text.back() == 'i')) text.remove_suffix(1);
    if (text.empty()) return std::nullopt;
    last = text.back();
  }
  switch (last) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
  }
  if (shift) text.remove_suffix(1);
  auto v = parse_uint(text);
  if (!v) return std::nullopt;
  if (shift && *v > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return *v << shift;
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace tutti
