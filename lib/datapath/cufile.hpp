// SPDX-License-Identifier: Apache-2.0
// cufile: loads through NVIDIA's cuFile (GPUDirect Storage): reads land in staging in HBM, and
// the copy kernel scatters them into the blocks. libcufile is opened at run time (dlopen), so
// tutti neither links nor needs it; where nvidia-fs is absent cuFile runs in its compatibility
// mode (POSIX reads through its own bounce buffers). Stores take the CPU producer (uring):
// their commit records need checksums the CPU computes as it writes.
#pragma once

#include <memory>
#include <string>

#include "datapath/backend.hpp"

namespace tutti {

// "" when libcufile loads and its driver opens, else why not.
std::string cufile_unavailable_reason();
// "GDS (nvidia-fs)" or "compatibility mode (no nvidia-fs)".
std::string cufile_mode();

// Ops whose buf is device memory inside [arena, arena + arena_bytes) (registered with cuFile).
std::unique_ptr<Backend> make_cufile_backend(const BackendConfig& cfg, void* arena, size_t arena_bytes);

}  // namespace tutti
