// SPDX-License-Identifier: Apache-2.0
// tutti info: the version, what the build has, which backends work on this machine (and why
// not), and every runtime option with the value it would have here and where that comes from
// (its default or its TUTTI_* environment variable). --json: the same as one JSON document.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "cli.hpp"
#include "common/error.hpp"
#include "datapath/backend.hpp"
#include "datapath/cufile.hpp"
#include "datapath/gpu_uring.hpp"
#include "kernels/device.hpp"
#include "output.hpp"
#include "runtime/config.hpp"
#include "tutti.h"

namespace tutti::cli {

namespace {

#if TUTTI_HAVE_REMOTE
constexpr bool kRemoteTier = true;  // option remote works (the build has hiredis)
#else
constexpr bool kRemoteTier = false;
#endif

struct BackendState {
  const char* name;
  std::string works;  // what it does, when it works here
  std::string why;    // why not, when it does not; empty when it works or depends on the pool
  bool on_pool = false;  // works where the pool lies (said, not tried)
};

struct OptionState {
  const OptionInfo* info;
  std::string value, source, error;  // source: "default" or the environment variable's name
};

std::vector<BackendState> backends() {
  std::vector<BackendState> b;
  b.push_back({"uring", "io_uring, O_DIRECT, fixed files and buffers", uring_unavailable_reason()});
  b.push_back({"posix", "thread pool, preadv/pwritev", ""});
  b.push_back({"gpu-uring", "GPU-built SQEs, SQPOLL rings, GPU- or CPU-reaped completions; loads into CUDA memory",
               gpu_uring_unavailable_reason()});
  std::string cwhy = cufile_unavailable_reason();
  b.push_back({"cufile", cwhy.empty() ? "cuFile, " + cufile_mode() + "; loads into CUDA memory" : "", cwhy});
  b.push_back({"passthru", "for pools on an NVMe namespace: io_uring NVMe passthrough (/dev/ngXnY)", "", true});
  b.push_back({"nvme", "for pools on a namespace shared with a controller dedicated to tutti: NVMe commands on "
                       "tutti_kmod's queue pairs, SGLs straight into the blocks (kmod/README.md)", "", true});
  b.push_back({"dram", "for pools on tmpfs (/dev/shm): mapped; CUDA memory: copy kernels, no I/O", "", true});
  return b;
}

std::vector<OptionState> options() {
  std::vector<OptionState> out;
  for (const OptionInfo& o : option_table()) {
    OptionState s{&o, o.default_value, "default", ""};
    const std::string env = option_env_name(o.key);
    if (const char* e = std::getenv(env.c_str()); e && *e) {
      s.value = e, s.source = env;
      if (std::string(o.key) != "pool") {  // (a pool list is checked when it is opened)
        try {
          Options().set(o.key, e);
        } catch (const Error& err) {
          s.error = user_message(err);
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

void print_json(const std::string& gpu, const std::vector<BackendState>& bs, const std::vector<OptionState>& os,
                const char* picks) {
  std::printf("{\"schema\":1,\"version\":%s,\"abi\":%u,", json_string(tutti_version_string()).c_str(),
              tutti_version_number());
  std::printf("\"remote_tier\":%s,", kRemoteTier ? "true" : "false");
  std::printf("\"cuda\":{\"available\":%s,\"devices\":%d,\"why_not\":%s},", gpu.empty() ? "true" : "false",
              gpu.empty() ? gpu::device_count() : 0, json_string(gpu).c_str());
  std::printf("\"backends\":[");
  for (size_t i = 0; i < bs.size(); ++i)
    std::printf("%s{\"name\":%s,\"works\":%s,\"what\":%s,\"why_not\":%s}", i ? "," : "", json_string(bs[i].name).c_str(),
                bs[i].why.empty() ? "true" : "false", json_string(bs[i].works).c_str(), json_string(bs[i].why).c_str());
  std::printf("],\"auto\":%s,\"options\":[", json_string(picks).c_str());
  for (size_t i = 0; i < os.size(); ++i) {
    const OptionState& o = os[i];
    std::printf("%s{\"key\":%s,\"value\":%s,\"default\":%s,\"source\":%s,\"env\":%s,\"error\":%s,\"help\":%s}",
                i ? "," : "", json_string(o.info->key).c_str(), json_string(o.value).c_str(),
                json_string(o.info->default_value).c_str(), json_string(o.source).c_str(),
                json_string(option_env_name(o.info->key)).c_str(), o.error.empty() ? "null" : json_string(o.error).c_str(),
                json_string(o.info->help).c_str());
  }
  std::printf("]}\n");
}

}  // namespace

int cmd_info(int argc, char** argv) {
  bool json = false;
  Args args("info", argc, argv);
  while (const char* f = args.next()) {
    if (std::string(f) == "--json")
      json = true;
    else
      return usage_error("info", "unknown argument '%s' (info takes only --json)", f);
  }
  const std::string gpu = gpu::unavailable_reason();
  const auto bs = backends();
  const auto os = options();
  const char* picks = uring_unavailable_reason().empty() ? "uring" : "posix";
  bool env_errors = false;
  for (const OptionState& o : os) env_errors |= !o.error.empty();
  if (json) {
    print_json(gpu, bs, os, picks);
    return env_errors ? 2 : 0;
  }
  std::printf("tutti %s (C ABI %u)\n", tutti_version_string(), tutti_version_number());
  std::printf("build: liburing, xxhash%s; CUDA: %s\n", kRemoteTier ? ", hiredis (remote tier)" : " (no hiredis: no remote tier)",
              gpu.empty() ? ("yes, " + std::to_string(gpu::device_count()) + " device(s)").c_str()
                          : (gpu + " (host memory stands in for the GPU)").c_str());
  std::printf("backends:\n");
  for (const BackendState& b : bs)
    std::printf("  %-10s %s\n", b.name,
                (!b.why.empty() ? "unusable: " + b.why : b.on_pool ? "works " + b.works : "works (" + b.works + ")").c_str());
  std::printf("auto picks: %s (for a pool on tmpfs: dram; on NVMe with a KV cache in host memory: nvme, else passthru)\n",
              picks);
  std::printf("options (the value here, and where it comes from: its default or TUTTI_<KEY>):\n");
  for (const OptionState& o : os) {
    std::printf("  %-17s %-13s %-20s %s\n", o.info->key, o.value.empty() ? "\"\"" : o.value.c_str(),
                o.source.c_str(), o.info->help);
    if (!o.error.empty()) std::printf("  %-17s ^ refused: %s\n", "", o.error.c_str());
  }
  return env_errors ? 2 : 0;
}

}  // namespace tutti::cli
