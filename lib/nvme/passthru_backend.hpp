// SPDX-License-Identifier: Apache-2.0
// passthru: loads whose reads are NVMe commands sent through io_uring to the namespace's
// generic char device (/dev/ngXnY) — no kernel module, the stock driver and the filesystem stay
// in service. Each read is located on the device with FIEMAP first. Stores take the CPU
// producer (uring) through the filesystem, which owns block allocation.
#pragma once

#include <memory>
#include <string>

#include "datapath/backend.hpp"

namespace tutti {

// "" when every pool file lies on an NVMe namespace whose /dev/ngXnY this process can open.
std::string passthru_unavailable_reason(const std::vector<int>& fds);

// Loads into staged buffers (page aligned); cfg.threads workers, each with its own ring.
std::unique_ptr<Backend> make_passthru_backend(const BackendConfig& cfg);

}  // namespace tutti
