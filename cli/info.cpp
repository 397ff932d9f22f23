// tutti info: the version, what the build has, and which backends work on this machine (and
// why not), then every runtime option with its default.
#include <cstdio>
#include <string>

#include "cli.hpp"
#include "datapath/backend.hpp"
#include "datapath/cufile.hpp"
#include "datapath/gpu_uring.hpp"
#include "kernels/device.hpp"
#include "runtime/config.hpp"
#include "tutti.h"

namespace tutti::cli {

int cmd_info() {
  std::printf("tutti %s (C ABI %u)\n", tutti_version_string(), tutti_version_number());
  std::string gpu = gpu::unavailable_reason();
  std::printf("build: liburing, xxhash; CUDA: %s\n",
              gpu.empty() ? ("yes, " + std::to_string(gpu::device_count()) + " device(s)").c_str()
                          : (gpu + " (host memory stands in for the GPU)").c_str());
  std::string why = uring_unavailable_reason();
  std::printf("backends:\n");
  std::printf("  uring      %s\n", why.empty() ? "works (io_uring, O_DIRECT, fixed files and buffers)" : ("unusable: " + why).c_str());
  std::printf("  posix      works (thread pool, preadv/pwritev)\n");
  std::string gwhy = gpu_uring_unavailable_reason();
  std::printf("  gpu-uring  %s\n", gwhy.empty() ? "works (GPU-built SQEs, SQPOLL rings, GPU-polled completions; loads into CUDA memory)"
                                                : ("unusable: " + gwhy).c_str());
  std::string cwhy = cufile_unavailable_reason();
  std::printf("  cufile     %s\n", cwhy.empty() ? ("works (cuFile, " + cufile_mode() + "; loads into CUDA memory)").c_str()
                                                : ("unusable: " + cwhy).c_str());
  std::printf("  passthru   loads through io_uring NVMe passthrough (/dev/ngXnY) for pools on an NVMe namespace\n");
  std::printf("  nvme       loads with NVMe commands on tutti_kmod's queue pairs (SGLs straight into the blocks) for pools\n"
              "             on a namespace shared with a controller dedicated to tutti (kmod/README.md)\n");
  std::printf("  dram       works for pools on tmpfs (/dev/shm): mapped; CUDA memory: copy kernels, no I/O\n");
  std::printf("auto picks: %s (for a pool on tmpfs: posix; on NVMe with a KV cache in host memory: nvme, else passthru)\n",
              why.empty() ? "uring" : "posix");
  std::printf("options (each also from TUTTI_<KEY>):\n");
  for (auto& o : option_table())
    std::printf("  %-17s default %-13s %s\n", o.key, *o.default_value ? o.default_value : "\"\"", o.help);
  return 0;
}

}  // namespace tutti::cli
