// Error checks shared by the CUDA sources: a failed call becomes an Error with CUDA's reason.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/error.hpp"

namespace tutti::gpu {

inline void check(cudaError_t e, const char* what, SourceSite site = SourceSite::here()) {
  if (e != cudaSuccess) fail(TUTTI_EIO, std::string("CUDA ") + what + ": " + cudaGetErrorString(e), site);
}

struct Guard {  // the calling thread works on the runtime's device
  explicit Guard(int ordinal) { check(cudaSetDevice(ordinal), "cudaSetDevice"); }
};

}  // namespace tutti::gpu
