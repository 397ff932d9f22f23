#include "common/error.hpp"

#include <cerrno>
#include <cstring>

namespace tutti {

void fail(int code, const std::string& msg) { throw Error(code, msg); }

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

void fail_errno(int err, const std::string& msg) {
  throw Error(code_from_errno(err), msg + ": " + std::strerror(err));
}

}  // namespace tutti
