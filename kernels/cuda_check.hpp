// SPDX-License-Identifier: Apache-2.0
// Error checks shared by the CUDA sources: a failed call becomes an Error with CUDA's reason.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/error.hpp"

namespace tutti::gpu {

inline void check(cudaError_t e, const char* what, SourceSite site = SourceSite::here()) {
  if (e != cudaSuccess) fail(TUTTI_EIO, std::string("CUDA ") + what + ": " + cudaGetErrorString(e), site);
}

// The calling thread works on the runtime's device for the guard's scope, then on its own
// again: an engine thread that calls tutti keeps the device it had.
class Guard {
 public:
  explicit Guard(int ordinal) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ == ordinal) {
      previous_ = -1;
      return;
    }
    check(cudaSetDevice(ordinal), "cudaSetDevice");
  }
  ~Guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  int previous_ = -1;
};

// The same for paths that must not throw (I/O threads, destructors): ok() is false when the
// device could not be set.
class QuietGuard {
 public:
  explicit QuietGuard(int ordinal) noexcept {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess || previous == ordinal) return;
    ok_ = cudaSetDevice(ordinal) == cudaSuccess;
    previous_ = previous;
  }
  ~QuietGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  QuietGuard(const QuietGuard&) = delete;
  QuietGuard& operator=(const QuietGuard&) = delete;
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = true;
};

}  // namespace tutti::gpu
