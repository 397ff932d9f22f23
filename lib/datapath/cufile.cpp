// SPDX-License-Identifier: Apache-2.0
#include "datapath/cufile.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "datapath/cufile_abi.hpp"
#include "kernels/device.hpp"

namespace tutti {
namespace {

struct Api {
  void* lib = nullptr;
  cu::DriverOpen driver_open = nullptr;
  cu::HandleRegister handle_register = nullptr;
  cu::HandleDeregister handle_deregister = nullptr;
  cu::BufRegister buf_register = nullptr;
  cu::BufDeregister buf_deregister = nullptr;
  cu::Read read = nullptr;
  cu::Write write = nullptr;
  const char* (*status_error)(int) = nullptr;  // cuFile's message for an error, where exported
  std::string why;  // "" once usable
};

std::string describe(const Api& a, cu::Error e) {
  std::string s = "cuFile error " + std::to_string(e.err);
  if (a.status_error)
    if (const char* m = a.status_error(e.err)) s += ": " + std::string(m);
  return s;
}

// Loaded and its driver opened once per process; never closed (cuFile's own advice for
// libraries: other users in the process may share the driver).
const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::string why = gpu::unavailable_reason(); !why.empty()) {
      a.why = why;
      return;
    }
    for (const char* name : {"libcufile.so.0", "libcufile.so"})
      if ((a.lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!a.lib) {
      a.why = std::string("libcufile is not installed (") + ::dlerror() + ")";
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(a.lib, name));
      if (!fn && a.why.empty()) a.why = std::string("libcufile lacks ") + name;
    };
    sym(a.driver_open, "cuFileDriverOpen");
    sym(a.handle_register, "cuFileHandleRegister");
    sym(a.handle_deregister, "cuFileHandleDeregister");
    sym(a.buf_register, "cuFileBufRegister");
    sym(a.buf_deregister, "cuFileBufDeregister");
    sym(a.read, "cuFileRead");
    sym(a.write, "cuFileWrite");
    if (!a.why.empty()) return;
    a.status_error = reinterpret_cast<const char* (*)(int)>(::dlsym(a.lib, "cufileop_status_error"));
    cu::Error e = a.driver_open();
    if (e.err != cu::kSuccess) a.why = "cuFileDriverOpen failed (" + describe(a, e) + ")";
  });
  return a;
}

// cuFileRead/Write: bytes moved, -1 with errno, or a negative cuFile error.
int64_t result(ssize_t n, uint64_t want) {
  if (n == static_cast<ssize_t>(want)) return static_cast<int64_t>(want);
  if (n >= 0) return -EIO;  // short: past the end of the pool file
  if (n == -1) return errno ? -errno : -EIO;
  return -EIO;
}

class Files {
 public:
  Files(const std::vector<int>& fds, void* arena, size_t bytes) : arena_(arena) {
    const Api& a = api();
    for (int fd : fds) {
      cu::Descr d{};
      d.type = cu::kHandleTypeOpaqueFd;
      d.handle.fd = fd;
      cu::Handle h = nullptr;
      cu::Error e = a.handle_register(&h, &d);
      if (e.err != cu::kSuccess) {
        close();
        fail(TUTTI_EUNSUPPORTED, "cufile: cuFileHandleRegister failed (" + describe(a, e) + ")");
      }
      handles_.push_back(h);
    }
    // Registration only speeds up GDS; compatibility mode works without it.
    registered_ = a.buf_register(arena, bytes, 0).err == cu::kSuccess;
  }
  ~Files() { close(); }
  cu::Handle operator[](uint32_t file) const { return handles_[file]; }
  std::byte* arena() const { return static_cast<std::byte*>(arena_); }

 private:
  void close() {
    const Api& a = api();
    if (registered_) a.buf_deregister(arena_);
    registered_ = false;
    for (cu::Handle h : handles_) a.handle_deregister(h);
    handles_.clear();
  }
  void* arena_;
  bool registered_ = false;
  std::vector<cu::Handle> handles_;
};

}  // namespace

std::string cufile_unavailable_reason() { return api().why; }

std::string cufile_mode() {
  return ::access("/proc/driver/nvidia-fs/stats", F_OK) == 0 ? "GDS (nvidia-fs)" : "compatibility mode (no nvidia-fs)";
}

std::unique_ptr<Backend> make_cufile_backend(const BackendConfig& cfg, void* arena, size_t arena_bytes) {
  if (std::string why = cufile_unavailable_reason(); !why.empty()) fail(TUTTI_EUNSUPPORTED, "backend cufile: " + why);
  auto files = std::make_shared<Files>(cfg.fds, arena, arena_bytes);
  return make_thread_backend(cfg, "cufile", "cuFileRead/cuFileWrite, " + cufile_mode(), [files](IoOp& op) -> int64_t {
    // Whole extents in one call, as base + offset into the registered arena.
    const off_t at = static_cast<off_t>(op.buf - files->arena());
    const off_t off = static_cast<off_t>(op.offset);
    if (op.iov || !op.buf) return -EINVAL;  // only staged transfers reach cuFile
    errno = 0;
    return op.write ? result(api().write((*files)[op.file], files->arena(), op.length, off, at), op.length)
                    : result(api().read((*files)[op.file], files->arena(), op.length, off, at), op.length);
  });
}

}  // namespace tutti
