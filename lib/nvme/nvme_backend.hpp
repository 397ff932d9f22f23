// SPDX-License-Identifier: Apache-2.0
// nvme: loads as NVMe Read commands on queue pairs this process drives itself, on a controller
// dedicated to tutti by kmod/ (tutti_kmod) that shares the pool's namespace with the controller
// the stock driver keeps (same NVM subsystem). Each read is located with FIEMAP, then its
// bytes go straight into their memory: SGLs scatter one command's data over the engine's
// blocks (PRPs where the controller has no SGLs or the option asks). Memory is pinned and
// DMA-mapped on first use and stays so while the backend lives. Stores take the CPU producer
// (uring) through the filesystem, which owns block allocation.
#pragma once

#include <memory>
#include <string>

#include "datapath/backend.hpp"

namespace tutti {

// "" when /dev/tutti is there and its controller cfg.nvme_controller shares every pool file's
// namespace; else why not.
std::string nvme_unavailable_reason(const BackendConfig& cfg);

// cfg.threads workers, each with its own queue pair of depth cfg.queue_depth + 1.
std::unique_ptr<Backend> make_nvme_backend(const BackendConfig& cfg);

}  // namespace tutti
