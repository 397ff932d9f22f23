// SPDX-License-Identifier: Apache-2.0
#include "common/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tutti {

std::string SourceSite::str() const {
  // The compiler names each file as the build gave it, usually an absolute path: cut the part
  // before the tree, which this file's own name shows.
  static const std::string_view root = [] {
    std::string_view self = SourceSite::here().file, tail = "lib/common/error.cpp";
    return self.ends_with(tail) ? self.substr(0, self.size() - tail.size()) : std::string_view();
  }();
  std::string_view f = file;
  if (!root.empty() && f.starts_with(root)) f.remove_prefix(root.size());
  return std::string(f) + ":" + std::to_string(line);
}

bool debug_enabled() {
  const char* debug = std::getenv("TUTTI_DEBUG");  // read each time, so a test may flip it
  return debug && *debug && std::strcmp(debug, "0") != 0;
}

std::string user_message(const Error& e) {
  if (!debug_enabled()) return e.what();
  return std::string(e.what()) + " [" + e.site().str() + "]";
}

void fail(int code, const std::string& msg, SourceSite site) { throw Error(code, msg, site); }

int code_from_errno(int err) noexcept {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return TUTTI_ENOSPC;
    case ENOMEM:
      return TUTTI_ENOMEM;
    case EACCES:
    case EPERM:
    case ENOENT:
    case ENOTDIR:
    case EROFS:
    case EISDIR:
      return TUTTI_EACCES;
    case EINVAL:
      return TUTTI_EINVAL;
    case ENOSYS:
    case EOPNOTSUPP:
      return TUTTI_EUNSUPPORTED;
    default:
      return TUTTI_EIO;
  }
}

void fail_errno(int err, const std::string& msg, SourceSite site) {
  throw Error(code_from_errno(err), msg + ": " + std::strerror(err), site);
}

}  // namespace tutti
