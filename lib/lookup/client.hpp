// SPDX-License-Identifier: Apache-2.0
// The client end of the lookup service (server.hpp): what tutti_lookup_client_* run on. One
// connection, used by one request at a time (a mutex orders callers). A connection that broke
// (the runtime closed or died, an answer that did not come in time) fails the call with
// TUTTI_EIO and is dropped; the next call connects again, so a restarted runtime is found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/fd.hpp"
#include "lookup/protocol.hpp"

namespace tutti {

class LookupClient {
 public:
  // Connects at once, so that a wrong path fails here. timeout_ms bounds each call's wait for
  // the runtime (0: none).
  LookupClient(std::string path, uint32_t timeout_ms);

  // Cached tokens of the prompt; with `lease` non-null they are pinned (ttl_ms, 0: no expiry)
  // until release(*lease), or until this client's connection ends.
  size_t query(const int32_t* tokens, size_t n, const void* salt, size_t salt_len, uint32_t ttl_ms, uint64_t* lease);
  void release(uint64_t lease);

 private:
  void connect();  // requires mu_
  // One request and its answer. Without a connection: connects anew, or, with !reconnect,
  // answers {} at once (a release: the lease went with the old connection).
  lookup::Reply call(const lookup::Request& rq, const void* salt, const int32_t* tokens, bool reconnect = true);

  const std::string path_;
  const uint32_t timeout_ms_;
  std::mutex mu_;
  Fd fd_;
};

}  // namespace tutti
