// SPDX-License-Identifier: Apache-2.0
// tutti bench: stores a synthetic KV cache, loads it back layer by layer and verifies every
// byte, on each backend, next to the raw bandwidth of the same pool file. It drives the public
// C ABI, exactly as an engine would.
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "args.hpp"
#include "bench.hpp"
#include "cli.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "datapath/backend.hpp"
#include "datapath/cufile.hpp"
#include "datapath/gpu_uring.hpp"
#include "kernels/device.hpp"
#include "output.hpp"
#include "pool/pool.hpp"
#include "resolver/uri.hpp"
#include "runtime/config.hpp"

namespace tutti::cli {

namespace {

// The pool files a bench run deletes and creates again: --pool's, and the remote phases' own.
std::vector<std::string> bench_pool_paths(const BenchArgs& a) {
  std::vector<std::string> out{parse_pool_uri(a.pool).path};
  if (!a.remote.empty()) out.insert(out.end(), {a.pool + ".remote-a", a.pool + ".remote-b"});
  return out;
}

// Why bench may not delete what is at `path`, or "": only nothing, an empty file, or a pool no
// runtime holds (never a device, another file, or a live runtime's pool).
std::string not_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "" : path + " cannot be looked at (" + std::strerror(errno) + ")";
  if (!S_ISREG(st.st_mode)) return path + " is not a regular file";
  if (st.st_size == 0) return "";
  try {
    Pool::open_existing({PoolUri{path}});
  } catch (const Error& e) {
    return e.code() == TUTTI_EBUSY ? path + " is the pool of a running runtime" : user_message(e);
  }
  return "";
}

// Parses bench's options into `a`; an exit status when bench stops here (a bad option, --help).
std::optional<int> parse(int argc, char** argv, BenchArgs& a) {
  Args args("bench", argc, argv);
  while (const char* arg = args.next()) {
    const std::string f = arg;
    if (f == "--model") {
      const std::string v = args.value();
      a.model = nullptr;
      for (auto& m : kModels)
        if (v == m.name) a.model = &m;
      if (!a.model)
        return usage_error("bench", "unknown model '%s' (llama3-8b, llama3-70b, qwen2.5-7b, mistral-7b, tiny)", v.c_str());
    } else if (f == "--tokens") {
      a.tokens = args.positive();
    } else if (f == "--requests") {
      a.requests = args.positive();
    } else if (f == "--pool") {
      a.pool = args.value();
    } else if (f == "--backends") {
      a.backends_given = true;
      for (auto& b : split_list(args.value())) {
        try {
          backend_named(b);  // exactly the names `tutti info` lists
        } catch (const Error& e) {
          return usage_error("bench", "--backends: %s", user_message(e).c_str());
        }
        a.backends.push_back(b);
      }
    } else if (f == "--dram-tier") {
      a.dram_tier = args.value();
    } else if (f == "--no-baseline") {
      a.baseline = false;
    } else if (f == "--direct") {
      a.direct = args.value();
    } else if (f == "--block-tokens") {
      a.block_tokens = static_cast<uint32_t>(args.positive(UINT32_MAX));
    } else if (f == "--chunk-tokens") {
      a.chunk_tokens = static_cast<uint32_t>(args.positive(UINT32_MAX));
    } else if (f == "--repeat") {
      a.repeat = static_cast<unsigned>(args.positive(UINT_MAX));
    } else if (f == "--memory") {
      const std::string v = args.value();
      if (v != "host" && v != "cuda") return usage_error("bench", "--memory is host or cuda");
      a.cuda = v == "cuda";
    } else if (f == "--remote") {
      a.remote = args.value();
    } else if (f == "--remote-connections") {
      a.remote_connections = static_cast<unsigned>(args.positive(UINT_MAX));
    } else if (f == "--remote-depth") {
      a.remote_depth = static_cast<unsigned>(args.positive(UINT_MAX));
    } else if (f == "--remote-timeout-ms") {
      a.remote_timeout_ms = static_cast<unsigned>(args.positive(UINT_MAX));
    } else if (f == "--hnd") {
      a.hnd = true;
    } else if (f == "--json") {
      a.json = true;
    } else if (f == "--keep") {
      a.keep = true;
    } else if (f == "--quiet") {
      a.quiet = true;
    } else if (f == "-h" || f == "--help") {
      print_usage(stdout);
      return 0;
    } else {
      return usage_error("bench", "unknown option '%s' (see tutti --help)", f.c_str());
    }
  }
  size_t per_round = 0;
  if (__builtin_mul_overflow(size_t{a.chunk_tokens}, a.requests, &per_round) || a.chunk_tokens % a.block_tokens ||
      a.tokens % per_round)
    return usage_error("bench", "--tokens must be a multiple of --chunk-tokens x --requests, and --chunk-tokens a multiple of --block-tokens");
  // Every run replaces the pool at --pool: what is there must be a pool nobody holds, or nothing.
  for (const std::string& path : bench_pool_paths(a))
    if (const std::string why = not_replaceable(path); !why.empty())
      return usage_error("bench", "--pool: %s; bench replaces the pool there on every run", why.c_str());
  if (a.cuda) {
    std::string why = gpu::unavailable_reason();
    if (!why.empty()) return usage_error("bench", "--memory cuda: %s", why.c_str());
  }
  if (a.backends.empty()) {
    if (a.cuda && gpu_uring_unavailable_reason().empty()) a.backends.push_back("gpu-uring");
    if (uring_unavailable_reason().empty()) a.backends.push_back("uring");
    a.backends.push_back("posix");
    if (a.cuda && cufile_unavailable_reason().empty()) a.backends.push_back("cufile");
    if (on_tmpfs(a.pool)) a.backends.push_back("dram");  // a pool in memory
  }
  return std::nullopt;
}

// With --json, the first line says what ran where: the version, the arguments, every TUTTI_*
// option in force, and the machine's facts, so a row file is read on its own.
void print_run_info(const BenchArgs& a, uint64_t kv_bytes) {
  std::string backends, env;
  for (const std::string& b : a.backends) backends += (backends.empty() ? "" : ",") + json_string(b);
  for (const OptionInfo& o : option_table())
    if (const char* v = std::getenv(option_env_name(o.key).c_str()); v && *v)
      env += (env.empty() ? "" : ",") + json_string(option_env_name(o.key)) + ":" + json_string(v);
  struct utsname u {};
  ::uname(&u);
  const std::string gpu = gpu::unavailable_reason();
  std::printf("{\"schema\":1,\"run_info\":true,\"version\":%s,\"model\":%s,\"tokens\":%zu,\"requests\":%zu,"
              "\"kv_bytes\":%" PRIu64 ",\"memory\":\"%s\",\"pool\":%s,\"backends\":[%s],\"baseline\":%s,"
              "\"direct\":%s,\"dram_tier\":%s,\"block_tokens\":%u,\"chunk_tokens\":%u,\"hnd\":%s,\"repeat\":%u,"
              "\"env\":{%s},\"machine\":{\"host\":%s,\"kernel\":%s,\"cpus\":%ld,\"cuda_devices\":%d}}\n",
              json_string(tutti_version_string()).c_str(), json_string(a.model->name).c_str(), a.tokens, a.requests,
              kv_bytes, a.cuda ? "cuda" : "host", json_string(a.pool).c_str(), backends.c_str(),
              a.baseline ? "true" : "false", json_string(a.direct).c_str(), json_string(a.dram_tier).c_str(),
              a.block_tokens, a.chunk_tokens, a.hnd ? "true" : "false", a.repeat, env.c_str(),
              json_string(u.nodename).c_str(), json_string(u.release).c_str(), ::sysconf(_SC_NPROCESSORS_ONLN),
              gpu.empty() ? gpu::device_count() : 0);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchArgs a;
  if (auto rc = parse(argc, argv, a)) return *rc;
  if (!a.remote.empty()) return run_remote_bench(a);

  const Model& m = *a.model;
  const Printer print{a.json, a.quiet, m.name, a.cuda ? "cuda" : "host", a.tokens};
  KvCache kv(a);
  if (!a.json)
    std::printf("tutti bench: %s (%u layers, %u kv heads, head dim %u), %zu tokens in %zu request(s), KV %s in %s, pool %s\n",
                m.name, m.layers, m.heads, m.head_dim, a.tokens, a.requests, format_bytes(kv.bytes()).c_str(),
                a.cuda ? "CUDA device 0" : "host memory", a.pool.c_str());
  if (a.json) print_run_info(a, kv.bytes());
  print.header();

  std::vector<std::pair<std::string, const char*>> runs;
  for (auto& b : a.backends) runs.emplace_back(b, "object");
  if (a.baseline) {  // on a CPU backend: it issues the I/Os a page-granular tier would
    std::string cpu = "posix";
    for (auto& b : a.backends)
      if (b == "uring" || b == "posix") {
        cpu = b;
        break;
      }
    runs.emplace_back(cpu, "per-block-baseline");
  }

  bool all_ok = true;
  // the two sweeps; raw write, store; raw read, load, verify each
  print.plan(2 + runs.size() * (2 + 3 * size_t{a.repeat}));
  RawFigures raw;
  std::optional<H2dFigures> h2d;
  for (size_t i = 0; i < runs.size(); ++i) {
    print.begin_run("[" + std::to_string(i + 1) + "/" + std::to_string(runs.size()) + "] " + runs[i].first + " " +
                    runs[i].second);
    RunResult r = run_once(a, print, kv, runs[i].first, runs[i].second, &raw);
    if (r.rc) print.end_run(r.unsupported.empty() ? "failed" : "cannot run here");
    if (r.rc && !r.unsupported.empty() && !a.backends_given) {
      std::fprintf(stderr, "tutti bench: skipping %s: it cannot run here\n", runs[i].first.c_str());
      continue;  // a default backend that this machine lacks
    }
    if (r.rc) return r.rc;
    auto raw_row = [&](const char* name, const RawMeasure& m, const RawSetting& at) {
      Row row;
      row.run = i + 1;
      row.bench = name;
      row.backend = "raw";
      row.io_mode = at.label();
      row.bytes = raw.bytes;
      row.gbps = m.gbps;
      row.seconds = m.gbps > 0 ? static_cast<double>(raw.bytes) / m.gbps / 1e9 : 0;
      row.ratio = 1;
      row.cpu_s_per_gb = row.bytes ? m.cpu_s / (static_cast<double>(row.bytes) / 1e9) : 0;
      row.verified = true;
      return row;
    };
    r.store.run = r.load.run = i + 1;
    r.store.ratio = raw.write.gbps > 0 ? r.store.gbps / raw.write.gbps : 0;
    r.load.ratio = raw.read.gbps > 0 ? r.load.gbps / raw.read.gbps : 0;
    print.row(raw_row("raw-write", raw.write, *raw.write_at));
    print.row(r.store);
    print.row(raw_row("raw-read", raw.read, *raw.read_at));
    if (a.cuda) {
      if (!h2d) h2d = h2d_bandwidth(uint64_t{a.chunk_tokens} * a.model->heads * a.model->head_dim * a.model->elem_bytes * 2);
      for (auto [name, gbps, at] : {std::tuple{"raw-h2d", h2d->gbps, &h2d->at},
                                    std::tuple{"raw-h2d-extents", h2d->extents_gbps, &h2d->extents_at},
                                    std::tuple{"raw-h2d-rows", h2d->rows_gbps, &h2d->rows_at}}) {
        if (gbps <= 0) continue;  // no rows figure (chunk-layers over 8 MiB, or no pinned memory for it)
        Row row;
        row.run = i + 1;
        row.bench = name;
        row.backend = "raw";
        row.io_mode = *at;
        row.bytes = h2d->bytes;
        row.gbps = gbps;
        row.seconds = gbps > 0 ? static_cast<double>(h2d->bytes) / gbps / 1e9 : 0;
        row.ratio = h2d->gbps > 0 ? gbps / h2d->gbps : 0;
        row.verified = true;
        print.row(row);
      }
    }
    print.row(r.load);
    all_ok = all_ok && r.load.verified;
    if (!a.keep || i + 1 < runs.size()) ::unlink(r.path.c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "tutti bench: loaded bytes differ from stored bytes\n");
    return 1;
  }
  return 0;
}

}  // namespace tutti::cli
