// SPDX-License-Identifier: Apache-2.0
#include "lookup/client.hpp"

#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "lookup/io.hpp"

namespace tutti {

LookupClient::LookupClient(std::string path, uint32_t timeout_ms) : path_(std::move(path)), timeout_ms_(timeout_ms) {
  std::lock_guard lock(mu_);
  connect();
}

void LookupClient::connect() {
  sockaddr_un addr;
  TUTTI_EXPECT(lookup::socket_address(path_, &addr),
               "lookup socket '" + path_ + "' is empty or longer than " + std::to_string(sizeof addr.sun_path - 1) +
                   " bytes");
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail_errno(errno, "lookup socket: socket");
  if (timeout_ms_) {
    timeval tv{static_cast<time_t>(timeout_ms_ / 1000), static_cast<suseconds_t>(timeout_ms_ % 1000 * 1000)};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    if (e == EACCES || e == EPERM) fail_errno(e, "lookup socket " + path_);
    // ENOENT, ECONNREFUSED: no runtime serves there (not opened yet, closed, or died).
    fail(TUTTI_EIO, "no tutti runtime answers lookups at " + path_ + " (" + std::strerror(e) +
                        "; is it open with lookup_socket=" + path_ + "?)");
  }
  fd_ = std::move(fd);
}

lookup::Reply LookupClient::call(const lookup::Request& rq, const void* salt, const int32_t* tokens,
                                 bool reconnect) {
  std::lock_guard lock(mu_);
  if (!fd_) {
    if (!reconnect) return {};
    connect();
  }
  const int fd = fd_.get();
  lookup::Reply rp;
  const bool sent = lookup::write_full(fd, &rq, sizeof rq) == 0 && lookup::write_full(fd, salt, rq.salt_len) == 0 &&
                    lookup::write_full(fd, tokens, rq.num_tokens * sizeof(int32_t)) == 0;
  if (!sent || lookup::read_full(fd, &rp, sizeof rp) != 0 || rp.message_len > lookup::kMaxMessage) {
    const int e = errno;
    fd_.reset();  // the stream is out of step now: the next call starts a new connection
    const std::string why = !sent && e == EPIPE ? "it went away"
                            : e == EAGAIN || e == EWOULDBLOCK
                                ? "no answer within " + std::to_string(timeout_ms_) + " ms"
                            : e == 0 ? "it closed the connection (closed, or died)"
                                     : std::string(std::strerror(e));
    fail(TUTTI_EIO, "the tutti runtime answering lookups at " + path_ + ": " + why +
                        "; its leases of this client are released");
  }
  std::string message(rp.message_len, '\0');
  if (lookup::read_full(fd, message.data(), message.size()) != 0) {
    fd_.reset();
    fail(TUTTI_EIO, "the tutti runtime answering lookups at " + path_ + " went away mid-answer");
  }
  if (rp.status != 0) fail(rp.status, message.empty() ? "lookup failed in the runtime at " + path_ : message);
  return rp;
}

size_t LookupClient::query(const int32_t* tokens, size_t n, const void* salt, size_t salt_len, uint32_t ttl_ms,
                           uint64_t* lease) {
  TUTTI_EXPECT(tokens != nullptr || n == 0, "tokens is NULL");
  TUTTI_EXPECT(salt != nullptr || salt_len == 0, "salt is NULL but salt_len is not 0");
  TUTTI_EXPECT(n <= lookup::kMaxTokens, "a lookup through a socket takes at most " +
                                            std::to_string(lookup::kMaxTokens) + " tokens, not " + std::to_string(n));
  TUTTI_EXPECT(salt_len <= lookup::kMaxSalt, "a salt through a socket is at most " +
                                                 std::to_string(lookup::kMaxSalt) + " bytes, not " +
                                                 std::to_string(salt_len));
  lookup::Request rq;
  rq.op = static_cast<uint16_t>(lease ? lookup::Op::kLease : lookup::Op::kLookup);
  rq.salt_len = static_cast<uint32_t>(salt_len);
  rq.ttl_ms = ttl_ms;
  rq.num_tokens = n;
  const lookup::Reply rp = call(rq, salt, tokens);
  if (lease) *lease = rp.lease;
  return static_cast<size_t>(rp.cached_tokens);
}

void LookupClient::release(uint64_t lease) {
  lookup::Request rq;
  rq.op = static_cast<uint16_t>(lookup::Op::kRelease);
  rq.lease = lease;
  call(rq, nullptr, nullptr, false);
}

}  // namespace tutti
