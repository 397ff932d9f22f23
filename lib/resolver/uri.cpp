// SPDX-License-Identifier: Apache-2.0
#include "resolver/uri.hpp"

#include <sys/stat.h>

#include "common/error.hpp"
#include "common/units.hpp"

namespace tutti {

PoolUri parse_pool_uri(std::string_view uri) {
  const std::string text(uri);
  TUTTI_EXPECT(!uri.empty(), "empty pool URI");
  PoolUri out;
  std::string_view rest = uri;
  std::string_view query;
  if (rest.substr(0, 7) == "file://") {
    rest.remove_prefix(7);
    TUTTI_EXPECT(!rest.empty() && rest.front() == '/',
                 "pool URI '" + text + "': file:// needs an absolute path (file:///path)");
    if (auto q = rest.find('?'); q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
  } else {
    TUTTI_EXPECT(rest.find("://") == std::string_view::npos,
                 "pool URI '" + text + "': only file:// and plain paths are supported");
    if (auto q = rest.find('?'); q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
  }
  TUTTI_EXPECT(!rest.empty(), "pool URI '" + text + "' has no path");
  out.path = std::string(rest);

  while (!query.empty()) {
    std::string_view item = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), item.size() + 1));
    auto eq = item.find('=');
    TUTTI_EXPECT(eq != std::string_view::npos, "pool URI '" + text + "': expected key=value in the query");
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "size") {
      auto size = parse_size(value);
      TUTTI_EXPECT(size && *size > 0, "pool URI '" + text + "': bad size '" + std::string(value) + "'");
      out.size = *size;
    } else {
      fail(TUTTI_EINVAL, "pool URI '" + text + "': unknown parameter '" + std::string(key) + "' (known: size)");
    }
  }

  struct stat st;
  if (::stat(out.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    if (out.path.back() != '/') out.path += '/';
    out.path += "tutti.pool";
  }
  return out;
}

}  // namespace tutti
