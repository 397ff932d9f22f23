// SPDX-License-Identifier: Apache-2.0
// Whole-message reads and writes on a stream socket, shared by both ends of the lookup service.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

namespace tutti::lookup {

// 0 when all `n` bytes arrived, -1 (errno set; 0 meaning the peer closed) otherwise.
inline int read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<std::byte*>(buf);
  while (n) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return -1;
    }
    p += r, n -= static_cast<size_t>(r);
  }
  return 0;
}

// MSG_NOSIGNAL: a peer that went away is an EPIPE here, never a SIGPIPE for the process.
inline int write_full(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const std::byte*>(buf);
  while (n) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    p += r, n -= static_cast<size_t>(r);
  }
  return 0;
}

// A sockaddr_un for `path`; false when the path does not fit.
inline bool socket_address(const std::string& path, sockaddr_un* out) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof out->sun_path) return false;
  path.copy(out->sun_path, path.size());
  return true;
}

}  // namespace tutti::lookup
