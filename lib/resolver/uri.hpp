// SPDX-License-Identifier: Apache-2.0
// Pool locations: "file:///abs/path?size=64G" or a plain path. A directory means
// <dir>/tutti.pool. Block devices are used whole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tutti {

struct PoolUri {
  std::string path;
  uint64_t size = 0;  // bytes for a new file; 0 = the runtime's default share of `capacity`
};

// Throws Error(TUTTI_EINVAL) with a message naming the problem.
PoolUri parse_pool_uri(std::string_view uri);

}  // namespace tutti
