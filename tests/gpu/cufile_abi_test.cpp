// SPDX-License-Identifier: Apache-2.0
// tutti calls libcufile through its own declarations (lib/datapath/cufile_abi.hpp); where
// cufile.h is installed this program only compiles if they match it. Running it is a formality.
#include <cufile.h>

#include <cstddef>
#include <type_traits>

#include "datapath/cufile_abi.hpp"

namespace cu = tutti::cu;

static_assert(sizeof(cu::Error) == sizeof(CUfileError_t));
static_assert(offsetof(cu::Error, err) == offsetof(CUfileError_t, err));
static_assert(offsetof(cu::Error, cu_err) == offsetof(CUfileError_t, cu_err));
static_assert(sizeof(cu::Descr) == sizeof(CUfileDescr_t));
static_assert(offsetof(cu::Descr, type) == offsetof(CUfileDescr_t, type));
static_assert(offsetof(cu::Descr, handle) == offsetof(CUfileDescr_t, handle));
static_assert(offsetof(cu::Descr, fs_ops) == offsetof(CUfileDescr_t, fs_ops));
static_assert(cu::kSuccess == CU_FILE_SUCCESS);
static_assert(cu::kHandleTypeOpaqueFd == CU_FILE_HANDLE_TYPE_OPAQUE_FD);
static_assert(sizeof(cu::Handle) == sizeof(CUfileHandle_t));
// The functions: same arguments and results, up to the struct names checked above.
static_assert(std::is_same_v<decltype(&cuFileRead), cu::Read>);
static_assert(std::is_same_v<decltype(&cuFileWrite), cu::Write>);
static_assert(std::is_same_v<decltype(&cuFileHandleDeregister), cu::HandleDeregister>);
static_assert(std::is_same_v<decltype(&cuFileBufRegister), CUfileError_t (*)(const void*, size_t, int)>);
static_assert(std::is_same_v<decltype(&cuFileBufDeregister), CUfileError_t (*)(const void*)>);
static_assert(std::is_same_v<decltype(&cuFileHandleRegister), CUfileError_t (*)(CUfileHandle_t*, CUfileDescr_t*)>);
static_assert(std::is_same_v<decltype(&cuFileDriverOpen), CUfileError_t (*)()>);

int main() { return 0; }
