// SPDX-License-Identifier: Apache-2.0
// io_uring submission entries for fixed-file, fixed-buffer reads and writes, built by one source
// for both producers: the CPU ring threads (datapath/uring.cpp) and the GPU warps of the
// gpu-uring backend (gpu_uring.cu).
#pragma once

#include <linux/io_uring.h>

#include <cstdint>

#include "kernels/copy_layout.hpp"  // TUTTI_HOST_DEVICE

namespace tutti::gpu {

// `addr` is the user-space address of the bytes, inside registered buffer `buf_index`;
// `file` is an index into the ring's registered files. `flags` adds IOSQE_* bits.
TUTTI_HOST_DEVICE inline io_uring_sqe fixed_rw_sqe(bool write, uint32_t file, uint64_t addr, uint32_t len,
                                                   uint64_t off, uint16_t buf_index, uint64_t user_data,
                                                   uint8_t flags = 0) {
  io_uring_sqe s{};
  s.opcode = write ? IORING_OP_WRITE_FIXED : IORING_OP_READ_FIXED;
  s.flags = static_cast<uint8_t>(IOSQE_FIXED_FILE | flags);
  s.fd = static_cast<int32_t>(file);
  s.off = off;
  s.addr = addr;
  s.len = len;
  s.user_data = user_data;
  s.buf_index = buf_index;
  return s;
}

}  // namespace tutti::gpu
