// SPDX-License-Identifier: Apache-2.0
// The lookup service: a runtime opened with lookup_socket=PATH answers lookups from other
// processes on a Unix stream socket at PATH (protocol.hpp). One thread accepts; each client
// gets a thread of its own, blocked in read() between requests, so a slow or stalled client
// holds up nobody else. A lease belongs to the connection that took it: it ends with
// kRelease, its ttl, or the connection (the client closed or died). The socket is made
// owner-only (0600): what is cached says what others asked.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "common/fd.hpp"

namespace tutti {

class LookupServer {
 public:
  // What the runtime answers with; each may throw an Error, which the client then receives.
  struct Handlers {
    std::function<size_t(std::span<const int32_t> tokens, std::span<const std::byte> salt)> lookup;
    std::function<uint64_t(std::span<const int32_t> tokens, std::span<const std::byte> salt, uint32_t ttl_ms,
                           size_t* hit)>
        lease;
    std::function<void(uint64_t id)> release;
  };

  // Binds and listens at `path` (a stale socket there, of a runtime that died, is replaced;
  // a live one fails with TUTTI_EBUSY; anything else there with TUTTI_EINVAL).
  LookupServer(std::string path, Handlers handlers);
  // Closes every connection (releasing its leases) and removes the socket.
  ~LookupServer();
  LookupServer(const LookupServer&) = delete;
  LookupServer& operator=(const LookupServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  struct Connection {
    Fd fd;
    std::thread thread;
    bool done = false;  // guarded by mu_; the thread has ended and may be joined
  };
  void accept_loop();
  void serve(Connection& c);
  void reap();  // joins the threads of connections that ended; requires mu_

  const std::string path_;
  const Handlers handlers_;
  Fd listen_fd_;
  Fd wake_read_, wake_write_;  // a byte here stops accept_loop
  dev_t dev_ = 0;
  ino_t ino_ = 0;  // the socket file this server made, so that it removes no other
  std::mutex mu_;
  std::list<Connection> connections_;
  bool stopping_ = false;
  std::thread acceptor_;
};

}  // namespace tutti
