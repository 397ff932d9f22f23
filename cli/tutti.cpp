// tutti: the command-line tool. `info` says what works here, `bench` measures store and
// layer-wise load of a synthetic KV cache against the raw device, `fsck` and `stats` inspect a
// pool. bench drives the public C ABI, exactly as an engine would.
#include <liburing.h>
#include <dirent.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <atomic>
#include <unordered_map>
#include <vector>

#include "binding/kv_binding.hpp"
#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "common/units.hpp"
#include "datapath/backend.hpp"
#include "datapath/cufile.hpp"
#include "datapath/gpu_uring.hpp"
#include "kernels/device.hpp"
#include "pool/pool.hpp"
#include "resolver/uri.hpp"
#include "runtime/config.hpp"
#include "tutti.h"

namespace {

using tutti::format_bytes;

const char* kUsage =
    "usage: tutti <command> [options]\n"
    "\n"
    "commands:\n"
    "  info                 version, build features, and which backends work here (and why not)\n"
    "  bench [options]      store a synthetic KV cache, load it back layer by layer, verify every\n"
    "                       byte, and compare with the raw O_DIRECT bandwidth of the same pool file\n"
    "                       (1 MiB I/Os, 4 io_uring threads x 32 in flight; on tmpfs one per core,\n"
    "                       up to 16, measured in every run). CPU columns, per layer: cpu = the calling\n"
    "                       (engine) thread, io cpu = the whole process, sched = tutti's scheduler\n"
    "                       and waker threads, sqpoll = io_uring SQPOLL threads (gpu-uring)\n"
    "  fsck POOL... [--repair]\n"
    "                       check superblocks, commit records and every layer checksum;\n"
    "                       --repair clears every record that fails (its chunk becomes a miss);\n"
    "                       exit 0 consistent (or repaired), 4 damage found\n"
    "  stats POOL...        occupancy, chunks and layout fingerprint of a pool\n"
    "\n"
    "bench options:\n"
    "  --model NAME         llama3-8b (default), llama3-70b, qwen2.5-7b, mistral-7b, tiny\n"
    "  --tokens N           prompt tokens to store and load (default 8192)\n"
    "  --requests N         split the tokens over N requests of one batch (default 1)\n"
    "  --pool URI           pool to use; it is recreated for every run (default ./tutti-bench.pool)\n"
    "  --backends LIST      comma-separated backends (default: every one that works here)\n"
    "  --no-baseline        skip the per-block baseline (one I/O per block and K/V)\n"
    "  --dram-tier SIZE     a DRAM tier of SIZE above the pool (option dram_tier); loads that it\n"
    "                       serves are memcpys, and tier_hit_ratio says how many\n"
    "  --direct MODE        auto | on | off: vectored I/O straight into the blocks (default auto)\n"
    "  --block-tokens N     tokens per KV block (default 16)\n"
    "  --chunk-tokens N     tokens per stored chunk (default 256)\n"
    "  --hnd                use the HND block layout (default NHD)\n"
    "  --memory KIND        host (default) or cuda: the KV cache in HBM of CUDA device 0\n"
    "  --repeat N           loads per run, each after a raw read; medians reported (default 3)\n"
    "  --json               one JSON object per line instead of a table\n"
    "  --keep               keep the pool file afterwards\n"
    "  --quiet              no progress output\n"
    "\n"
    "Every runtime option of tutti.h can also be set with its TUTTI_* environment variable\n"
    "(TUTTI_RINGS, TUTTI_QUEUE_DEPTH, TUTTI_STAGING, TUTTI_LOOKAHEAD, TUTTI_THREADS, ...).\n";

struct Model {
  const char* name;
  uint32_t layers, heads, head_dim, elem_bytes;
};
const Model kModels[] = {
    {"llama3-8b", 32, 8, 128, 2},  {"llama3-70b", 80, 8, 128, 2}, {"qwen2.5-7b", 28, 4, 128, 2},
    {"mistral-7b", 32, 8, 128, 2}, {"tiny", 2, 2, 64, 2},
};

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double process_cpu_s() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// CPU time of this process's threads by kind, from /proc/self/task/*/schedstat (nanoseconds on
// a CPU): the scheduler and gpu-uring waker (tutti-sched, tutti-waker) and io_uring's SQPOLL
// threads (iou-sqp-*). Threads that exit between two samples are not counted.
struct ThreadCpu {
  double sched = 0, sqpoll = 0;
};
ThreadCpu thread_cpu_by_kind() {
  ThreadCpu out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    char comm[32] = {}, stat[128] = {};
    FILE* f = std::fopen((task + "/comm").c_str(), "r");
    if (!f) continue;
    bool got = std::fgets(comm, sizeof comm, f) != nullptr;
    std::fclose(f);
    f = std::fopen((task + "/schedstat").c_str(), "r");
    if (!f) continue;
    got = got && std::fgets(stat, sizeof stat, f) != nullptr;
    std::fclose(f);
    if (!got) continue;
    const double sec = std::strtod(stat, nullptr) * 1e-9;
    const std::string name(comm);
    if (name.rfind("tutti-sched", 0) == 0 || name.rfind("tutti-waker", 0) == 0) out.sched += sec;
    else if (name.rfind("iou-sqp", 0) == 0) out.sqpoll += sec;
  }
  ::closedir(d);
  return out;
}

// Is the directory of this pool URI on tmpfs (where the dram backend can keep it)?
bool on_tmpfs(const std::string& pool) {
  std::string dir = tutti::parse_pool_uri(pool).path;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

int die(const char* what, int rc) {
  std::fprintf(stderr, "tutti: %s: %s (%s)\n", what, tutti_strerror(rc), tutti_last_error());
  return 2;
}

// ---- info ---------------------------------------------------------------------------------

int cmd_info() {
  std::printf("tutti %s (C ABI %u)\n", tutti_version_string(), tutti_version_number());
  std::string gpu = tutti::gpu::unavailable_reason();
  std::printf("build: liburing, xxhash; CUDA: %s\n",
              gpu.empty() ? ("yes, " + std::to_string(tutti::gpu::device_count()) + " device(s)").c_str()
                          : (gpu + " (host memory stands in for the GPU)").c_str());
  std::string why = tutti::uring_unavailable_reason();
  std::printf("backends:\n");
  std::printf("  uring      %s\n", why.empty() ? "works (io_uring, O_DIRECT, fixed files and buffers)" : ("unusable: " + why).c_str());
  std::printf("  posix      works (thread pool, preadv/pwritev)\n");
  std::string gwhy = tutti::gpu_uring_unavailable_reason();
  std::printf("  gpu-uring  %s\n", gwhy.empty() ? "works (GPU-built SQEs, SQPOLL rings, GPU-polled completions; loads into CUDA memory)"
                                                : ("unusable: " + gwhy).c_str());
  std::string cwhy = tutti::cufile_unavailable_reason();
  std::printf("  cufile     %s\n", cwhy.empty() ? ("works (cuFile, " + tutti::cufile_mode() + "; loads into CUDA memory)").c_str()
                                                : ("unusable: " + cwhy).c_str());
  std::printf("  passthru   loads through io_uring NVMe passthrough (/dev/ngXnY) for pools on an NVMe namespace\n");
  std::printf("  nvme       loads with NVMe commands on tutti_kmod's queue pairs (SGLs straight into the blocks) for pools\n"
              "             on a namespace shared with a controller dedicated to tutti (kmod/README.md)\n");
  std::printf("  dram       works for pools on tmpfs (/dev/shm): mapped; CUDA memory: copy kernels, no I/O\n");
  std::printf("auto picks: %s (for a pool on tmpfs: posix; on NVMe with a KV cache in host memory: nvme, else passthru)\n",
              why.empty() ? "uring" : "posix");
  std::printf("options (each also from TUTTI_<KEY>):\n");
  for (auto& o : tutti::option_table())
    std::printf("  %-17s default %-13s %s\n", o.key, *o.default_value ? o.default_value : "\"\"", o.help);
  return 0;
}

// ---- bench --------------------------------------------------------------------------------

struct BenchArgs {
  const Model* model = &kModels[0];
  size_t tokens = 8192;
  size_t requests = 1;
  std::string pool = "./tutti-bench.pool";
  std::vector<std::string> backends;
  bool backends_given = false;  // --backends: a backend that cannot run is an error
  bool baseline = true;
  std::string direct = "auto";
  std::string dram_tier;  // --dram-tier: a DRAM tier of this size above the pool
  uint32_t block_tokens = 16;
  uint32_t chunk_tokens = 256;
  bool hnd = false;
  bool json = false;
  bool keep = false;
  bool quiet = false;
  unsigned repeat = 3;
  bool cuda = false;
};

// The synthetic KV cache: one fused tensor per layer [2, blocks, block_tokens, heads, head_dim]
// (or HND), filled with a pattern that is a function of (layer, K/V, logical block, word), so a
// byte that lands in the wrong place is caught.
class KvCache {
 public:
  KvCache(const BenchArgs& a) : a_(a) {
    const Model& m = *a.model;
    blocks_ = static_cast<uint32_t>(a.tokens / a.block_tokens);
    block_bytes_ = uint64_t{a.block_tokens} * m.heads * m.head_dim * m.elem_bytes;
    layer_bytes_ = 2 * uint64_t{blocks_} * block_bytes_;
    std::byte* base;
    if (a.cuda) {
      // In HBM: the pattern is made and checked in a host copy of one layer at a time.
      device_mem_ = static_cast<std::byte*>(tutti::gpu::alloc(0, layer_bytes_ * m.layers));
      host_layer_ = tutti::AlignedBuffer(layer_bytes_, 2 << 20);
      base = device_mem_;
    } else {
      mem_ = tutti::AlignedBuffer(layer_bytes_ * m.layers, 2 << 20);
      base = mem_.data();
    }
    for (uint32_t l = 0; l < m.layers; ++l) bases_.push_back(base + l * layer_bytes_);
    // A shuffled block table, as a paged allocator hands out.
    table_.resize(blocks_);
    for (uint32_t i = 0; i < blocks_; ++i) table_[i] = static_cast<int32_t>(i);
    std::mt19937 rng(42);
    std::shuffle(table_.begin(), table_.end(), rng);
    tokens_.resize(a.tokens);
    for (size_t i = 0; i < a.tokens; ++i) tokens_[i] = static_cast<int32_t>(rng() % 128000);
  }
  ~KvCache() {
    if (device_mem_) tutti::gpu::free(device_mem_);
  }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  tutti_kv_layout layout() const {
    const Model& m = *a_.model;
    tutti_kv_layout l;
    tutti_kv_layout_init(&l, m.layers, blocks_, a_.block_tokens, m.heads, m.head_dim, m.elem_bytes, a_.hnd);
    l.k_base = bases_.data();
    l.v_base = nullptr;
    l.v_offset = uint64_t{blocks_} * block_bytes_;
    if (a_.cuda) l.memory = TUTTI_MEMORY_CUDA, l.device = 0;
    return l;
  }

  void fill() {
    for (uint32_t l = 0; l < a_.model->layers; ++l) {
      walk(l, host(l), [](uint64_t* w, uint64_t v) { *w = v; return true; });
      if (device_mem_) tutti::gpu::copy_to_device(bases_[l], host_layer_.data(), layer_bytes_);
    }
  }
  void clear() {
    if (device_mem_)
      tutti::gpu::fill_zero(device_mem_, layer_bytes_ * a_.model->layers);
    else
      std::memset(mem_.data(), 0, mem_.size());
  }
  bool verify() {
    for (uint32_t l = 0; l < a_.model->layers; ++l) {
      if (device_mem_) tutti::gpu::copy_to_host(host_layer_.data(), bases_[l], layer_bytes_);
      if (!walk(l, host(l), [](uint64_t* w, uint64_t v) { return *w == v; })) return false;
    }
    return true;
  }

  uint64_t bytes() const { return layer_bytes_ * a_.model->layers; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& table() const { return table_; }

 private:
  std::byte* host(uint32_t l) { return device_mem_ ? host_layer_.data() : static_cast<std::byte*>(bases_[l]); }

  template <class Fn>
  bool walk(uint32_t l, std::byte* layer, Fn fn) {
    const uint64_t words = block_bytes_ / 8;
    for (uint32_t side = 0; side < 2; ++side)
      for (uint32_t logical = 0; logical < blocks_; ++logical) {
        auto* w = reinterpret_cast<uint64_t*>(layer + side * uint64_t{blocks_} * block_bytes_ +
                                              uint64_t(table_[logical]) * block_bytes_);
        uint64_t x = (uint64_t{l} << 40) ^ (uint64_t{side} << 39) ^ (uint64_t{logical} << 8) ^ 0x9E3779B97F4A7C15ull;
        for (uint64_t i = 0; i < words; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
          if (!fn(w + i, x)) return false;
        }
      }
    return true;
  }

  const BenchArgs& a_;
  uint32_t blocks_ = 0;
  uint64_t block_bytes_ = 0, layer_bytes_ = 0;
  tutti::AlignedBuffer mem_, host_layer_;
  std::byte* device_mem_ = nullptr;
  std::vector<void*> bases_;
  std::vector<int32_t> table_, tokens_;
};

struct Row {
  size_t run = 0;
  std::string bench, backend, io_mode;
  bool direct = false;
  uint64_t bytes = 0;
  double seconds = 0, gbps = 0, ratio = 0, cpu_us_layer = 0, io_cpu_us_layer = 0, ios_layer = 0;
  double sched_us_layer = 0, sqpoll_us_layer = 0;
  double tier_hit_ratio = -1;  // loads: share of chunk-layers the DRAM tier served; -1 without one
  bool verified = false;
  bool has_cpu = false;
};

// Raw O_DIRECT bandwidth of a byte range of the pool file, the device figure every ratio refers
// to: 1 MiB I/Os from 4 threads with an io_uring ring each, 32 in flight per ring (128 in all),
// writes followed by one fdatasync. Plain sequential I/O with no KV logic at all. `threads`
// receives how many threads it used.
double raw_bandwidth(const std::string& path, uint64_t offset, uint64_t bytes, bool write, unsigned* threads = nullptr) {
  tutti::Fd fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC));
  // tmpfs (with or without O_DIRECT): each copy runs in its submitting thread, so a thread per
  // core, up to 16.
  const bool page_cache = !fd || on_tmpfs(path);
  if (!fd) fd = tutti::Fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC));
  if (!fd) return 0;
  constexpr uint64_t kIo = 1 << 20;
  constexpr unsigned kDepth = 32;
  const unsigned kThreads = page_cache ? std::clamp(std::thread::hardware_concurrency(), 4u, 16u) : 4;
  if (threads) *threads = kThreads;
  const uint64_t count = (bytes + kIo - 1) / kIo;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  // Buffers and rings are set up before the clock starts.
  std::vector<tutti::AlignedBuffer> bufs;
  std::vector<io_uring> rings(kThreads);
  for (unsigned t = 0; t < kThreads; ++t) {
    bufs.emplace_back(kIo * kDepth);
    if (io_uring_queue_init(kDepth, &rings[t], 0) != 0) return 0;
  }
  auto worker = [&](unsigned t) {
    tutti::AlignedBuffer& buf = bufs[t];
    io_uring& ring = rings[t];
    unsigned inflight = 0, slot = 0;
    bool more = true;
    while ((more || inflight) && ok) {
      while (more && inflight < kDepth) {
        uint64_t i = next.fetch_add(1);
        if (i >= count) {
          more = false;
          break;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        void* p = buf.data() + (slot++ % kDepth) * kIo;  // content is irrelevant
        unsigned len = static_cast<unsigned>(std::min(kIo, bytes - i * kIo));
        if (write)
          io_uring_prep_write(sqe, fd.get(), p, len, offset + i * kIo);
        else
          io_uring_prep_read(sqe, fd.get(), p, len, offset + i * kIo);
        ++inflight;
      }
      if (!inflight) break;
      io_uring_submit_and_wait(&ring, 1);
      io_uring_cqe* cqe;
      while (io_uring_peek_cqe(&ring, &cqe) == 0) {
        if (cqe->res <= 0) ok = false;
        io_uring_cqe_seen(&ring, cqe);
        --inflight;
      }
    }
  };
  double t0 = now_s();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < kThreads; ++t) workers.emplace_back(worker, t);
  for (auto& t : workers) t.join();
  if (write) ::fdatasync(fd.get());
  double t = now_s() - t0;
  for (auto& r : rings) io_uring_queue_exit(&r);
  return ok && t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
}

void print_row(const BenchArgs& a, const Row& r) {
  if (a.json) {
    std::printf(
        "{\"run\":%zu,\"bench\":\"%s\",\"backend\":\"%s\",\"io_mode\":\"%s\",\"memory\":\"%s\",\"direct\":%s,\"model\":\"%s\",\"tokens\":%zu,"
        "\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.3f,\"ratio_to_raw\":%.3f,\"cpu_us_per_layer\":%s,"
        "\"io_cpu_us_per_layer\":%s,\"sched_cpu_us_per_layer\":%s,\"sqpoll_cpu_us_per_layer\":%s,"
        "\"ios_per_layer\":%s,\"tier_hit_ratio\":%s,\"verified\":%s}\n",
        r.run, r.bench.c_str(), r.backend.c_str(), r.io_mode.c_str(), a.cuda ? "cuda" : "host", r.direct ? "true" : "false",
        a.model->name, a.tokens,
        r.bytes, r.seconds, r.gbps, r.ratio, r.has_cpu ? std::to_string(r.cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.io_cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sched_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sqpoll_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.ios_layer).c_str() : "null",
        r.tier_hit_ratio >= 0 ? std::to_string(r.tier_hit_ratio).c_str() : "null", r.verified ? "true" : "false");
  } else {
    if (!r.has_cpu)
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %12s %14s %14s %15s %10s %s\n", r.bench.c_str(), r.backend.c_str(),
                  r.io_mode.c_str(), r.gbps, r.ratio, "-", "-", "-", "-", "-", "-");
    else
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %12.1f %14.1f %14.1f %15.1f %10.0f %s\n", r.bench.c_str(),
                  r.backend.c_str(), r.io_mode.c_str(), r.gbps, r.ratio, r.cpu_us_layer, r.io_cpu_us_layer,
                  r.sched_us_layer, r.sqpoll_us_layer, r.ios_layer, r.verified ? "yes" : "NO");
  }
  std::fflush(stdout);
}

void progress(const BenchArgs& a, const std::string& s) {
  if (a.quiet) return;
  std::fputs(s.c_str(), stderr);
  std::fflush(stderr);
}

struct RunResult {
  Row store, load;
  uint64_t data_offset = 0, data_bytes = 0;
  std::string path;
  int rc = 0;
  std::string unsupported;  // why this backend cannot run here (open or register said so)
};

// One store + load of the whole cache with one backend and I/O mode. Every run measures the device on its own pool, right before tutti touches it: a raw write of
// the region the store will write, a raw read of what the store wrote right before the load.
// Each ratio compares figures taken seconds apart on the same bytes (shared disks drift). Each
// raw figure is the second of two passes: a virtual disk is markedly faster on bytes it has
// seen once (host caching, thin provisioning), and tutti always meets them second.
struct RawFigures {
  double read = 0, write = 0;
  uint64_t bytes = 0;
  unsigned threads = 0;
};

RunResult run_once(const BenchArgs& a, KvCache& kv, const std::string& backend, const char* io_mode, RawFigures* raw) {
  RunResult out;
  const Model& m = *a.model;
  tutti::PoolUri uri = tutti::parse_pool_uri(a.pool);
  out.path = uri.path;
  ::unlink(uri.path.c_str());  // a fresh pool each run: nothing may be found already stored

  tutti::Shape shape{m.layers, m.heads, m.head_dim, m.elem_bytes, a.chunk_tokens};
  const size_t chunks = a.tokens / a.chunk_tokens;
  tutti_options* o = nullptr;
  tutti_options_create(&o);
  tutti_options_set(o, "pool", a.pool.c_str());
  std::string cap = std::to_string(tutti::Geometry::file_bytes_for(shape, chunks + 1));
  tutti_options_set(o, "capacity", cap.c_str());
  tutti_options_set(o, "chunk_tokens", std::to_string(a.chunk_tokens).c_str());
  tutti_options_set(o, "backend", backend.c_str());
  tutti_options_set(o, "io_mode", io_mode);
  tutti_options_set(o, "direct_to_blocks", a.direct.c_str());
  if (!a.dram_tier.empty()) tutti_options_set(o, "dram_tier", a.dram_tier.c_str());
  if (a.cuda)  // a load into HBM stages whole layers: room for the default lookahead of 4
    tutti_options_set(o, "staging", std::to_string(std::max<uint64_t>(256ull << 20, 4 * chunks * shape.layer_bytes())).c_str());
  tutti_runtime* rt = nullptr;
  int rc = tutti_runtime_open(o, &rt);
  tutti_options_destroy(o);
  if (rc) {
    if (rc == TUTTI_EUNSUPPORTED) out.unsupported = tutti_last_error();
    out.rc = die("open", rc);
    return out;
  }
  tutti_kv_layout layout = kv.layout();
  if ((rc = tutti_runtime_register_kv(rt, &layout))) {
    if (rc == TUTTI_EUNSUPPORTED) out.unsupported = tutti_last_error();
    out.rc = die("register", rc);
    tutti_runtime_close(rt);
    return out;
  }
  // A new pool hands out its lowest slots first: the chunks land in slots [0, chunks).
  tutti::Geometry g(shape, 1, chunks + 1);
  out.data_offset = g.data_offset();
  out.data_bytes = chunks * shape.slot_bytes();
  progress(a, "  " + backend + " " + io_mode + ": raw write...");
  raw_bandwidth(out.path, out.data_offset, out.data_bytes, true);
  raw->write = raw_bandwidth(out.path, out.data_offset, out.data_bytes, true, &raw->threads);
  raw->bytes = out.data_bytes;

  // Requests: the prompt split into `requests` equal prompts (distinct token ids), each with
  // its share of the block table.
  const size_t per = a.tokens / a.requests;
  std::vector<tutti_request> reqs(a.requests);
  for (size_t i = 0; i < a.requests; ++i) {
    tutti_request& r = reqs[i];
    std::memset(&r, 0, sizeof r);
    r.tokens = kv.tokens().data() + i * per;
    r.num_tokens = per;
    r.block_table = kv.table().data() + i * per / a.block_tokens;
    r.num_block_ids = per / a.block_tokens;
    r.token_end = TUTTI_TOKENS_ALL;
  }

  auto run_batch = [&](tutti_op op, Row& row) {
    row.bench = op == TUTTI_OP_LOAD ? "load" : "store";
    row.backend = backend;
    row.io_mode = std::string(io_mode) + (a.dram_tier.empty() ? "" : "+tier");
    tutti_stats s0{}, s1{};
    s0.struct_size = s1.struct_size = sizeof(tutti_stats);
    tutti_runtime_stats(rt, &s0);
    const ThreadCpu k0 = thread_cpu_by_kind();
    double p0 = process_cpu_s(), t0 = now_s();
    double c0 = thread_cpu_s();
    tutti_batch* b = nullptr;
    int r = tutti_batch_create(rt, op, &b);
    if (!r) r = tutti_batch_add(b, reqs.data(), reqs.size());
    if (!r) r = tutti_batch_submit(b);
    for (uint32_t l = 0; l < m.layers && !r; ++l) r = tutti_batch_wait_layer(b, l);
    if (!r) r = tutti_batch_wait(b);
    double c1 = thread_cpu_s();
    double t1 = now_s(), p1 = process_cpu_s();
    const ThreadCpu k1 = thread_cpu_by_kind();
    tutti_runtime_stats(rt, &s1);
    size_t moved = 0;
    for (size_t i = 0; i < reqs.size() && !r; ++i) {
      tutti_result res;
      tutti_batch_result(b, i, &res);
      moved += res.tokens;
    }
    tutti_batch_destroy(b);
    if (r) return die(op == TUTTI_OP_LOAD ? "load" : "store", r);
    if (moved != (per / a.chunk_tokens) * a.chunk_tokens * a.requests) {
      std::fprintf(stderr, "tutti: %s moved %zu tokens, expected all\n", row.bench.c_str(), moved);
      return 2;
    }
    row.bytes = op == TUTTI_OP_LOAD ? s1.bytes_read - s0.bytes_read : s1.bytes_written - s0.bytes_written;
    row.seconds = t1 - t0;
    row.gbps = static_cast<double>(row.bytes) / row.seconds / 1e9;
    row.cpu_us_layer = (c1 - c0) * 1e6 / m.layers;
    row.io_cpu_us_layer = (p1 - p0) * 1e6 / m.layers;
    row.sched_us_layer = (k1.sched - k0.sched) * 1e6 / m.layers;
    row.sqpoll_us_layer = (k1.sqpoll - k0.sqpoll) * 1e6 / m.layers;
    row.ios_layer = static_cast<double>(s1.ios - s0.ios) / m.layers;
    if (!a.dram_tier.empty() && op == TUTTI_OP_LOAD) {
      const uint64_t hits = s1.tier_hits - s0.tier_hits, all = hits + s1.tier_misses - s0.tier_misses;
      row.tier_hit_ratio = all ? static_cast<double>(hits) / static_cast<double>(all) : 0;
    }
    row.has_cpu = true;
    return 0;
  };

  kv.fill();
  progress(a, " store...");
  if ((out.rc = run_batch(TUTTI_OP_STORE, out.store))) {
    tutti_runtime_close(rt);
    return out;
  }
  // Loads are repeated, each right after a raw read of the same bytes; the medians are
  // reported (this kind of disk varies by 2x from one pass to the next).
  raw_bandwidth(out.path, out.data_offset, out.data_bytes, false);  // first pass, not counted
  std::vector<double> raws;
  std::vector<Row> loads;
  out.load.verified = true;
  for (unsigned rep = 0; rep < a.repeat; ++rep) {
    kv.clear();
    progress(a, " raw read...");
    raws.push_back(raw_bandwidth(out.path, out.data_offset, out.data_bytes, false));
    progress(a, " load...");
    size_t hit = 0;
    tutti_lookup(rt, reqs[0].tokens, reqs[0].num_tokens, nullptr, 0, &hit);
    Row row;
    if ((out.rc = run_batch(TUTTI_OP_LOAD, row))) {
      tutti_runtime_close(rt);
      return out;
    }
    loads.push_back(row);
    progress(a, " verify...");
    out.load.verified = out.load.verified && hit == (per / a.chunk_tokens) * a.chunk_tokens && kv.verify();
  }
  std::sort(raws.begin(), raws.end());
  std::sort(loads.begin(), loads.end(), [](const Row& x, const Row& y) { return x.gbps < y.gbps; });
  raw->read = raws[raws.size() / 2];
  bool verified = out.load.verified;
  out.load = loads[loads.size() / 2];
  out.load.verified = verified;
  out.store.verified = out.load.verified;  // a store is verified by the loads that follow
  out.store.direct = out.load.direct = std::string(io_mode) == "object" && a.direct != "off" &&
                                       tutti::KvBinding(layout, a.chunk_tokens).direct_capable();
  progress(a, out.load.verified ? " ok\n" : " MISMATCH\n");
  tutti_runtime_close(rt);
  return out;
}

int cmd_bench(int argc, char** argv) {
  BenchArgs a;
  auto need_value = [&](int& i) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tutti bench: %s needs a value\n", argv[i]);
      std::exit(2);
    }
    return argv[++i];
  };
  auto number = [&](const char* flag, const char* v) -> size_t {
    auto n = tutti::parse_size(v);
    if (!n || *n == 0) {
      std::fprintf(stderr, "tutti bench: %s: '%s' is not a positive number\n", flag, v);
      std::exit(2);
    }
    return *n;
  };
  for (int i = 0; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--model") {
      std::string v = need_value(i);
      a.model = nullptr;
      for (auto& m : kModels)
        if (v == m.name) a.model = &m;
      if (!a.model) {
        std::fprintf(stderr, "tutti bench: unknown model '%s' (llama3-8b, llama3-70b, qwen2.5-7b, mistral-7b, tiny)\n", v.c_str());
        return 2;
      }
    } else if (f == "--tokens") {
      a.tokens = number("--tokens", need_value(i));
    } else if (f == "--requests") {
      a.requests = number("--requests", need_value(i));
    } else if (f == "--pool") {
      a.pool = need_value(i);
    } else if (f == "--backends") {
      a.backends_given = true;
      std::string v = need_value(i);
      for (size_t s = 0; s <= v.size();) {
        size_t e = v.find(',', s);
        if (e == std::string::npos) e = v.size();
        if (e > s) a.backends.push_back(v.substr(s, e - s));
        s = e + 1;
      }
    } else if (f == "--dram-tier") {
      a.dram_tier = need_value(i);
    } else if (f == "--no-baseline") {
      a.baseline = false;
    } else if (f == "--direct") {
      a.direct = need_value(i);
    } else if (f == "--block-tokens") {
      a.block_tokens = static_cast<uint32_t>(number("--block-tokens", need_value(i)));
    } else if (f == "--chunk-tokens") {
      a.chunk_tokens = static_cast<uint32_t>(number("--chunk-tokens", need_value(i)));
    } else if (f == "--repeat") {
      a.repeat = static_cast<unsigned>(number("--repeat", need_value(i)));
    } else if (f == "--memory") {
      std::string v = need_value(i);
      if (v != "host" && v != "cuda") {
        std::fprintf(stderr, "tutti bench: --memory is host or cuda\n");
        return 2;
      }
      a.cuda = v == "cuda";
    } else if (f == "--hnd") {
      a.hnd = true;
    } else if (f == "--json") {
      a.json = true;
    } else if (f == "--keep") {
      a.keep = true;
    } else if (f == "--quiet") {
      a.quiet = true;
    } else if (f == "-h" || f == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "tutti bench: unknown option '%s' (see tutti --help)\n", f.c_str());
      return 2;
    }
  }
  if (a.chunk_tokens % a.block_tokens || a.tokens % (a.chunk_tokens * a.requests)) {
    std::fprintf(stderr, "tutti bench: --tokens must be a multiple of --chunk-tokens x --requests, and --chunk-tokens a multiple of --block-tokens\n");
    return 2;
  }
  if (a.cuda) {
    std::string why = tutti::gpu::unavailable_reason();
    if (!why.empty()) {
      std::fprintf(stderr, "tutti bench: --memory cuda: %s\n", why.c_str());
      return 2;
    }
  }
  if (a.backends.empty()) {
    if (a.cuda && tutti::gpu_uring_unavailable_reason().empty()) a.backends.push_back("gpu-uring");
    if (tutti::uring_unavailable_reason().empty()) a.backends.push_back("uring");
    a.backends.push_back("posix");
    if (a.cuda && tutti::cufile_unavailable_reason().empty()) a.backends.push_back("cufile");
    if (on_tmpfs(a.pool)) a.backends.push_back("dram");  // a pool in memory
  }

  const Model& m = *a.model;
  KvCache kv(a);
  if (!a.json) {
    std::printf("tutti bench: %s (%u layers, %u kv heads, head dim %u), %zu tokens in %zu request(s), KV %s in %s, pool %s\n",
                m.name, m.layers, m.heads, m.head_dim, a.tokens, a.requests, format_bytes(kv.bytes()).c_str(),
                a.cuda ? "CUDA device 0" : "host memory", a.pool.c_str());
    std::printf("%-10s %-9s %-20s %8s %7s %12s %14s %14s %15s %10s %s\n", "bench", "backend", "io_mode", "GB/s", "x raw",
                "cpu us/layer", "io cpu us/layer", "sched us/layer", "sqpoll us/layer", "I/Os/layer", "verified");
  }

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
  for (size_t i = 0; i < runs.size(); ++i) {
    progress(a, "[" + std::to_string(i + 1) + "/" + std::to_string(runs.size()) + "]");
    RawFigures raw;
    RunResult r = run_once(a, kv, runs[i].first, runs[i].second, &raw);
    if (r.rc && !r.unsupported.empty() && !a.backends_given) {
      std::fprintf(stderr, "tutti bench: skipping %s: it cannot run here\n", runs[i].first.c_str());
      continue;  // a default backend that this machine lacks
    }
    if (r.rc) return r.rc;
    auto raw_row = [&](const char* name, double gbps) {
      Row row;
      row.run = i + 1;
      row.bench = name;
      row.backend = "raw";
      row.io_mode = "1MiB-" + std::to_string(raw.threads) + "x32";
      row.bytes = raw.bytes;
      row.gbps = gbps;
      row.seconds = gbps > 0 ? static_cast<double>(raw.bytes) / gbps / 1e9 : 0;
      row.ratio = 1;
      row.verified = true;
      return row;
    };
    r.store.run = r.load.run = i + 1;
    r.store.ratio = raw.write > 0 ? r.store.gbps / raw.write : 0;
    r.load.ratio = raw.read > 0 ? r.load.gbps / raw.read : 0;
    print_row(a, raw_row("raw-write", raw.write));
    print_row(a, r.store);
    print_row(a, raw_row("raw-read", raw.read));
    print_row(a, r.load);
    all_ok = all_ok && r.load.verified;
    if (!a.keep || i + 1 < runs.size()) ::unlink(r.path.c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "tutti bench: loaded bytes differ from stored bytes\n");
    return 1;
  }
  return 0;
}

// ---- fsck and stats -----------------------------------------------------------------------

std::vector<tutti::PoolUri> pool_args(int argc, char** argv, bool* repair) {
  std::vector<tutti::PoolUri> uris;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (repair && a == "--repair")
      *repair = true;
    else
      uris.push_back(tutti::parse_pool_uri(a));
  }
  if (uris.empty()) tutti::fail(TUTTI_EINVAL, "name the pool file(s)");
  return uris;
}

int cmd_stats(int argc, char** argv) {
  auto pool = tutti::Pool::open_existing(pool_args(argc, argv, nullptr));
  const auto& g = pool->geometry();
  uint64_t torn = 0;
  auto records = pool->read_records(&torn);
  std::printf("pool %s: %zu file(s), format version %u\n", tutti::uuid_string(pool->uuid()).c_str(), pool->files(),
              tutti::kFormatVersion);
  for (size_t i = 0; i < pool->files(); ++i)
    std::printf("  file %zu: %s%s\n", i, pool->file(i).path.c_str(), pool->file(i).direct ? "" : " (buffered: no O_DIRECT)");
  std::printf("layout: %s\n", g.shape().describe().c_str());
  std::printf("slot: %s (%s per layer), %" PRIu64 " slots\n", format_bytes(g.shape().slot_bytes()).c_str(),
              format_bytes(g.shape().layer_bytes()).c_str(), g.slots());
  std::printf("chunks: %zu committed (%.1f%% full, %s of KV), %" PRIu64 " unreadable records\n", records.size(),
              g.slots() ? 100.0 * static_cast<double>(records.size()) / static_cast<double>(g.slots()) : 0.0,
              format_bytes(records.size() * g.shape().slot_bytes()).c_str(), torn);
  return 0;
}

// Checks every superblock, record and data extent. Exit 0: consistent; 4: bad chunks or
// records found (run with --repair); --repair tombstones every record that is unreadable,
// foreign, misplaced, a stale duplicate or whose data fails its checksum, and then the pool
// passes fsck (exit 0).
int cmd_fsck(int argc, char** argv) {
  bool repair = false;
  auto pool = tutti::Pool::open_existing(pool_args(argc, argv, &repair));
  const auto& g = pool->geometry();
  uint64_t unreadable = 0;
  std::vector<std::pair<uint64_t, tutti::DecodeStatus>> bad_records;
  auto records = pool->read_records(&unreadable, &bad_records);
  std::printf("superblocks: ok (%zu file(s), %s)\n", pool->files(), g.shape().describe().c_str());
  std::printf("commit records: %zu valid, %zu not\n", records.size(), bad_records.size());
  for (const auto& [slot, why] : bad_records)
    std::printf("  slot %" PRIu64 ": record %s\n", slot, tutti::describe(why));
  std::vector<uint64_t> drop;
  for (const auto& br : bad_records) drop.push_back(br.first);
  // A key in two records: the newer generation wins, as on open.
  std::unordered_map<tutti::Key, const tutti::Record*, tutti::KeyHash> newest;
  for (const auto& r : records) {
    auto [it, fresh] = newest.emplace(r.key, &r);
    if (fresh) continue;
    const tutti::Record* loser = it->second->generation < r.generation ? it->second : &r;
    if (loser != &r) it->second = &r;
    std::printf("  slot %" PRIu64 ": stale duplicate of a newer record of the same chunk\n", loser->slot);
    drop.push_back(loser->slot);
  }
  tutti::AlignedBuffer buf(g.shape().layer_bytes());
  size_t bad_data = 0;
  double last = now_s();
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    for (uint32_t l = 0; l < g.shape().layers; ++l) {
      tutti::Extent e = g.layer_extent(r.slot, l);
      const auto& f = pool->file(e.file);
      ssize_t n = ::pread(f.fd.get(), buf.data(), e.length, static_cast<off_t>(e.offset));
      if (n != static_cast<ssize_t>(e.length)) {
        std::printf("  slot %" PRIu64 ": layer %u cannot be read (%s)\n", r.slot, l,
                    n < 0 ? std::strerror(errno) : "short read");
      } else if (tutti::layer_sum(buf.data(), e.length) != r.layer_sums[l]) {
        std::printf("  slot %" PRIu64 ": layer %u fails its checksum\n", r.slot, l);
      } else {
        continue;
      }
      drop.push_back(r.slot);
      ++bad_data;
      break;
    }
    if (now_s() - last > 1.0) {
      std::fprintf(stderr, "  checked %zu of %zu chunks\n", i + 1, records.size());
      last = now_s();
    }
  }
  std::printf("data: %zu of %zu chunks verified, %zu bad\n", records.size() - bad_data, records.size(), bad_data);
  std::sort(drop.begin(), drop.end());
  drop.erase(std::unique(drop.begin(), drop.end()), drop.end());
  if (drop.empty()) return 0;
  if (!repair) {
    std::printf("run with --repair to clear %zu record(s) (their chunks become misses)\n", drop.size());
    return 4;
  }
  pool->write_tombstones(drop);
  std::printf("repaired: cleared %zu record(s)\n", drop.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("tutti %s\n", tutti_version_string());
    return 0;
  }
  try {
    if (cmd == "info") return cmd_info();
    if (cmd == "bench") return cmd_bench(argc - 2, argv + 2);
    if (cmd == "stats") return cmd_stats(argc - 2, argv + 2);
    if (cmd == "fsck") return cmd_fsck(argc - 2, argv + 2);
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "tutti %s: %s (%s)\n", cmd.c_str(), e.what(), tutti_strerror(e.code()));
    return 2;
  }
  std::fprintf(stderr, "tutti: unknown command '%s' (see tutti --help)\n", cmd.c_str());
  return 2;
}
