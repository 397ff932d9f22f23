// SPDX-License-Identifier: Apache-2.0
#include "datapath/backend.hpp"

#include "common/error.hpp"
#include "datapath/cufile.hpp"
#include "datapath/gpu_uring.hpp"

namespace tutti {

void remaining_iovecs(IoOp& op) {
  op.rest.clear();
  if (op.iov == nullptr) {
    op.rest.push_back(iovec{op.buf + op.done, op.length - op.done});
    return;
  }
  uint64_t skip = op.done;
  for (int i = 0; i < op.iovcnt; ++i) {
    iovec v = op.iov[i];
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    v.iov_base = static_cast<char*>(v.iov_base) + skip;
    v.iov_len -= skip;
    skip = 0;
    op.rest.push_back(v);
  }
}

namespace {

struct Named {
  BackendKind kind;
  const char* name;
};
constexpr Named kBackends[] = {
    {BackendKind::kAuto, "auto"},   {BackendKind::kUring, "uring"},   {BackendKind::kPosix, "posix"},
    {BackendKind::kGpuUring, "gpu-uring"}, {BackendKind::kCufile, "cufile"}, {BackendKind::kDram, "dram"},
    {BackendKind::kPassthru, "passthru"},  {BackendKind::kNvme, "nvme"},
};

}  // namespace

const char* backend_name(BackendKind kind) {
  for (const Named& b : kBackends)
    if (b.kind == kind) return b.name;
  return "?";
}

std::string backend_names() {
  std::string out;
  for (const Named& b : kBackends) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

BackendKind backend_named(const std::string& name) {
  for (const Named& b : kBackends)
    if (name == b.name) return b.kind;
  fail(TUTTI_EINVAL, "unknown backend '" + name + "' (known: " + backend_names() + ")");
}

BackendKind resolve_backend(BackendKind kind) {
  std::string why;
  switch (kind) {
    case BackendKind::kAuto:
      return uring_unavailable_reason().empty() ? BackendKind::kUring : BackendKind::kPosix;
    case BackendKind::kUring: why = uring_unavailable_reason(); break;
    case BackendKind::kCufile: why = cufile_unavailable_reason(); break;
    case BackendKind::kGpuUring: why = gpu_uring_unavailable_reason(); break;
    default: break;  // posix works anywhere; dram, passthru and nvme are checked against the pool
  }
  if (!why.empty()) fail(TUTTI_EUNSUPPORTED, "backend " + std::string(backend_name(kind)) + ": " + why);
  return kind;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendConfig& cfg) {
  if (kind == BackendKind::kPosix) return make_posix_backend(cfg);
  if (kind == BackendKind::kUring) return make_uring_backend(cfg);
  fail(TUTTI_EINTERNAL, std::string("backend ") + backend_name(kind) + " is not a CPU producer");
}

}  // namespace tutti
