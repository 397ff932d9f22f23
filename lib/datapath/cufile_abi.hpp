// SPDX-License-Identifier: Apache-2.0
// The part of cuFile's C ABI tutti calls, as NVIDIA's cuFile API reference documents it:
// libcufile is opened at run time, so its header is not needed to build tutti. Where cufile.h
// is installed, tests/gpu/cufile_abi_test.cpp checks these against it.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace tutti::cu {

struct Error {  // CUfileError_t
  int err;      // CUfileOpError: 0 is success
  int cu_err;   // CUresult
};
struct Descr {  // CUfileDescr_t
  int type;     // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
constexpr int kSuccess = 0;             // CU_FILE_SUCCESS
constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
using Handle = void*;                   // CUfileHandle_t
using DriverOpen = Error (*)();
using HandleRegister = Error (*)(Handle*, Descr*);
using HandleDeregister = void (*)(Handle);
using BufRegister = Error (*)(const void*, size_t, int);
using BufDeregister = Error (*)(const void*);
using Read = ssize_t (*)(Handle, void*, size_t, off_t, off_t);
using Write = ssize_t (*)(Handle, const void*, size_t, off_t, off_t);

}  // namespace tutti::cu
