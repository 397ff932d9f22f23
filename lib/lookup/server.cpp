// SPDX-License-Identifier: Apache-2.0
#include "lookup/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "lookup/io.hpp"
#include "lookup/protocol.hpp"

namespace tutti {

namespace {
constexpr size_t kMaxConnections = 256;  // more are accepted and closed at once
}

LookupServer::LookupServer(std::string path, Handlers handlers)
    : path_(std::move(path)), handlers_(std::move(handlers)) {
  sockaddr_un addr;
  TUTTI_EXPECT(lookup::socket_address(path_, &addr),
               "lookup_socket: '" + path_ + "' is empty or longer than " + std::to_string(sizeof addr.sun_path - 1) +
                   " bytes");
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0) {
    TUTTI_EXPECT(S_ISSOCK(st.st_mode), "lookup_socket: " + path_ + " exists and is not a socket");
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      fail(TUTTI_EBUSY, "lookup_socket: another runtime answers lookups at " + path_);
    ::unlink(path_.c_str());  // left by a runtime that died
  }
  listen_fd_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_) fail_errno(errno, "lookup_socket: socket");
  if (::bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    fail_errno(errno, "lookup_socket: cannot bind " + path_);
  // Owner-only before anyone can connect (listen comes after).
  int pipefd[2] = {-1, -1};
  if (::chmod(path_.c_str(), 0600) != 0 || ::lstat(path_.c_str(), &st) != 0 ||
      ::listen(listen_fd_.get(), 64) != 0 || ::pipe2(pipefd, O_CLOEXEC) != 0) {
    const int e = errno;
    ::unlink(path_.c_str());
    fail_errno(e, "lookup_socket: cannot listen at " + path_);
  }
  dev_ = st.st_dev, ino_ = st.st_ino;
  wake_read_ = Fd(pipefd[0]), wake_write_ = Fd(pipefd[1]);
  acceptor_ = std::thread([this] { accept_loop(); });
  log(TUTTI_LOG_INFO, "answering lookups at " + path_);
}

LookupServer::~LookupServer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  const char stop = 1;
  (void)!::write(wake_write_.get(), &stop, 1);
  acceptor_.join();
  {
    std::lock_guard lock(mu_);  // no new connection now; wake those blocked in read()
    for (Connection& c : connections_) ::shutdown(c.fd.get(), SHUT_RDWR);
  }
  for (Connection& c : connections_) c.thread.join();
  connections_.clear();
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
}

void LookupServer::reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    it = connections_.erase(it);
  }
}

void LookupServer::accept_loop() {
  name_this_thread("tutti-lookup");
  for (;;) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (p[0].revents & (POLLERR | POLLNVAL)) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: give the connections that end a moment instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) ::poll(nullptr, 0, 10);
      continue;
    }
    std::lock_guard lock(mu_);
    reap();
    if (stopping_ || connections_.size() >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    // A thread per connection; one that cannot be had (a pids or thread limit, no memory) costs
    // that client its connection, never the process its life.
    Fd owned(fd);  // closed here unless a connection takes it
    try {
      Connection& c = connections_.emplace_back();
      c.fd = std::move(owned);
      try {
        c.thread = std::thread([this, &c] { serve(c); });
      } catch (...) {
        connections_.pop_back();  // closes the descriptor
        throw;
      }
    } catch (const std::exception& e) {
      log(TUTTI_LOG_WARN, "lookup socket " + path_ + ": turned a client away: " + e.what());
      ::poll(nullptr, 0, 10);
    }
  }
}

void LookupServer::serve(Connection& c) {
  name_this_thread("tutti-lookup-c");
  const int fd = c.fd.get();
  std::vector<uint64_t> leases;  // taken on this connection, not released yet
  std::vector<std::byte> salt;
  std::vector<int32_t> tokens;
  for (;;) {
    lookup::Request rq;
    if (lookup::read_full(fd, &rq, sizeof rq) != 0) break;  // the client closed or went away
    lookup::Reply rp;
    std::string message;
    bool hang_up = false;  // the stream cannot be followed past a request it did not understand
    bool payload_read = false;  // or past one whose salt and tokens it did not read
    try {
      if (rq.magic != lookup::kMagic || rq.version != lookup::kVersion) {
        hang_up = true;
        fail(TUTTI_EINVAL, "not a tutti lookup request of protocol version " + std::to_string(lookup::kVersion) +
                               " (a client of another tutti version?)");
      }
      if (rq.salt_len > lookup::kMaxSalt || rq.num_tokens > lookup::kMaxTokens) {
        hang_up = true;
        fail(TUTTI_EINVAL, "a lookup of " + std::to_string(rq.num_tokens) + " tokens and a salt of " +
                               std::to_string(rq.salt_len) + " bytes is beyond the service's bounds (" +
                               std::to_string(lookup::kMaxTokens) + " tokens, " +
                               std::to_string(lookup::kMaxSalt) + " bytes)");
      }
      salt.resize(rq.salt_len);
      tokens.resize(rq.num_tokens);
      if (lookup::read_full(fd, salt.data(), salt.size()) != 0 ||
          lookup::read_full(fd, tokens.data(), tokens.size() * sizeof(int32_t)) != 0)
        break;
      payload_read = true;
      switch (static_cast<lookup::Op>(rq.op)) {
        case lookup::Op::kLookup:
          rp.cached_tokens = handlers_.lookup(tokens, salt);
          break;
        case lookup::Op::kLease: {
          leases.reserve(leases.size() + 1);  // so that a lease taken is always recorded
          size_t hit = 0;
          rp.lease = handlers_.lease(tokens, salt, rq.ttl_ms, &hit);
          leases.push_back(rp.lease);
          rp.cached_tokens = hit;
          break;
        }
        case lookup::Op::kRelease:  // another connection's lease, or one released before: nothing
          if (auto it = std::find(leases.begin(), leases.end(), rq.lease); it != leases.end()) {
            handlers_.release(*it);
            leases.erase(it);
          }
          break;
        default:
          fail(TUTTI_EINVAL, "unknown lookup request op " + std::to_string(rq.op));
      }
    } catch (const Error& e) {
      rp.status = e.code();
      message = user_message(e);
    } catch (const std::bad_alloc&) {
      rp.status = TUTTI_ENOMEM;
      message = "out of memory";
    } catch (const std::exception& e) {
      rp.status = TUTTI_EINTERNAL;
      message = e.what();
    }
    hang_up = hang_up || !payload_read;
    if (hang_up) log(TUTTI_LOG_WARN, "lookup socket " + path_ + ": hung up on a client: " + message);
    if (message.size() > lookup::kMaxMessage) message.resize(lookup::kMaxMessage);
    rp.message_len = static_cast<uint32_t>(message.size());
    if (lookup::write_full(fd, &rp, sizeof rp) != 0 || lookup::write_full(fd, message.data(), message.size()) != 0 ||
        hang_up)
      break;
  }
  for (uint64_t id : leases) handlers_.release(id);
  ::shutdown(fd, SHUT_RDWR);  // the client sees the hang-up now; the fd is closed when reaped
  std::lock_guard lock(mu_);
  c.done = true;
}

}  // namespace tutti
