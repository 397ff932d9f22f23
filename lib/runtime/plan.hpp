// SPDX-License-Identifier: Apache-2.0
// The plan: what register_kv settles once, from the options, the KV cache and the pool, before
// anything is built: the backend, whether host I/O goes straight into the blocks, and the
// layer path of loads and of stores. Nothing is re-decided per batch or per layer.
#pragma once

#include <string>

#include "binding/kv_binding.hpp"
#include "datapath/backend.hpp"
#include "datapath/layer_path.hpp"
#include "pool/pool.hpp"
#include "runtime/config.hpp"

namespace tutti {

struct Plan {
  BackendKind backend = BackendKind::kPosix;  // never kAuto
  bool uring_stores = false;  // gpu-uring, cufile, passthru, nvme: stores through uring
  bool direct = false;        // host memory: vectored I/O straight into the blocks
  PathKind load = PathKind::kHost, store = PathKind::kHost;
  std::string why;            // how auto settled, or "" when the backend was named
};

// What can be decided before the pool is opened: a backend the KV cache or io_mode rules out
// is refused here, with the reason (EUNSUPPORTED or EINVAL), before any pool file is made.
// `opened`: the backend as resolved when the runtime was opened (auto -> uring or posix).
Plan make_plan(const Config& cfg, BackendKind opened, const KvBinding& kv);
// The rest, from the opened pool: what auto settles on, direct I/O and the layer paths.
void settle_plan(Plan& plan, const Config& cfg, const KvBinding& kv, const Pool& pool, const BackendConfig& bc);

}  // namespace tutti
