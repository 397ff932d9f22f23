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

std::string resolve_backend(const std::string& name) {
  if (name == "posix") return name;
  if (name == "uring" || name == "auto") {
    std::string why = uring_unavailable_reason();
    if (why.empty()) return "uring";
    if (name == "uring") fail(TUTTI_EUNSUPPORTED, "backend uring: " + why);
    return "posix";
  }
  if (name == "dram" || name == "passthru" || name == "nvme") return name;  // checked against the pool at registration
  if (name == "cufile") {
    std::string why = cufile_unavailable_reason();
    if (!why.empty()) fail(TUTTI_EUNSUPPORTED, "backend cufile: " + why);
    return name;
  }  // its pool must be on tmpfs: checked when it is opened
  if (name == "gpu-uring") {
    std::string why = gpu_uring_unavailable_reason();
    if (!why.empty()) fail(TUTTI_EUNSUPPORTED, "backend gpu-uring: " + why);
    return name;
  }
  fail(TUTTI_EINVAL, "unknown backend '" + name + "' (known: auto, uring, posix, gpu-uring, cufile, dram, passthru, nvme)");
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& cfg) {
  if (name == "posix") return make_posix_backend(cfg);
  if (name == "uring") return make_uring_backend(cfg);
  fail(TUTTI_EINVAL, "unknown backend '" + name + "' (known: uring, posix)");
}

}  // namespace tutti
