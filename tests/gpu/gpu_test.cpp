// SPDX-License-Identifier: Apache-2.0
// KV caches in CUDA device memory: store from HBM, load back into HBM, compare every byte. The
// stored bytes are the shared fixture's pattern (tests/fixture/), filled on the host and copied in.
// Skips visibly (exit 77) where there is no CUDA device; runs for real on the GPU machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/checksum.hpp"
#include "kernels/device.hpp"
#include "resolver/layout.hpp"
#include "tutti.h"
#include "tutti_fixture.h"

#ifndef TUTTI_FAULTSHIM_PATH  // tests/integrity/faultshim.c, built beside these tests
#define TUTTI_FAULTSHIM_PATH ""
#endif

namespace {

struct Dir {
  // Under /tmp (a disk: O_DIRECT), or /dev/shm (tmpfs: the page-cache path).
  explicit Dir(bool shm = false) {
    std::string t = std::string(shm ? "/dev/shm" : "/tmp") + "/tutti-gpu-XXXXXX";
    path = mkdtemp(t.data());
  }
  ~Dir() {
    if (std::system(("rm -rf " + path).c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path.c_str());
  }
  std::string path;
};

// A KV cache of `layers` fused [2, blocks, bt, heads, dim] tensors in HBM, with a host copy of
// what was written into it: the fixture's pattern in the rows of the prompts filled, a poison
// byte everywhere else.
struct DeviceKv {
  DeviceKv(uint32_t layers, uint32_t blocks, uint32_t bt, uint32_t heads, uint32_t dim, int hnd, bool k_only = false) {
    tutti_kv_layout_init(&layout, layers, blocks, bt, heads, dim, 2, hnd);
    layout.flags = k_only ? TUTTI_KV_K_ONLY : 0;  // (the V half of the memory then stays as it is)
    layer_bytes = 2 * uint64_t{blocks} * layout.block_stride;
    mem = static_cast<std::byte*>(tutti::gpu::alloc(0, layer_bytes * layers));
    for (uint32_t l = 0; l < layers; ++l) bases.push_back(mem + l * layer_bytes);
    layout.k_base = bases.data();
    layout.v_offset = uint64_t{blocks} * layout.block_stride;
    layout.memory = TUTTI_MEMORY_CUDA;
    layout.device = 0;
    ref.assign(layer_bytes * layers, std::byte{0xA5});
    tutti::gpu::copy_to_device(mem, ref.data(), ref.size());
  }
  ~DeviceKv() { tutti::gpu::free(mem); }
  void zero() { tutti::gpu::fill_zero(mem, ref.size()); }
  // The layout with its addresses moved into a host buffer of the cache's size.
  tutti_kv_layout on_host(std::byte* host, std::vector<void*>& host_bases) const {
    tutti_kv_layout h = layout;
    host_bases.clear();
    for (uint32_t l = 0; l < layout.num_layers; ++l) host_bases.push_back(host + l * layer_bytes);
    h.k_base = host_bases.data();
    h.memory = TUTTI_MEMORY_HOST;
    return h;
  }
  // Writes the pattern of the prompt's tokens into its blocks of the reference, then copies the
  // reference into HBM.
  void fill(const std::vector<int32_t>& tokens, const int32_t* table, uint64_t seed = 0) {
    std::vector<void*> host_bases;
    const tutti_kv_layout h = on_host(ref.data(), host_bases);
    const tf_prompt p{tokens.data(), tokens.size(), seed, nullptr, table};
    tf_fill(&h, &p, 0, tokens.size());
    tutti::gpu::copy_to_device(mem, ref.data(), ref.size());
  }
  // The rows of the prompt's tokens [begin, end) in HBM (or in a device copy of the cache at
  // `from`) against the pattern: "" where all are equal, else how many rows differ and the
  // first byte that does, with both values.
  std::string check(const std::vector<int32_t>& tokens, const int32_t* table, size_t begin, size_t end,
                    uint64_t seed = 0, const void* from = nullptr) const {
    std::vector<std::byte> got(ref.size());
    tutti::gpu::copy_to_host(got.data(), from ? from : mem, got.size());
    std::vector<void*> host_bases;
    const tutti_kv_layout h = on_host(got.data(), host_bases);
    const tf_prompt p{tokens.data(), tokens.size(), seed, nullptr, table};
    tf_mismatch m;
    if (tf_check(&h, &p, begin, end, 0, layout.num_layers, &m) == 0) return "";
    char msg[256];
    return std::to_string(m.rows) + " rows differ from the stored bytes; first: " + tf_describe(&m, msg, sizeof msg);
  }
  // Bytes of block `b` (K and V, every layer) in HBM equal the reference?
  bool block_matches(int32_t b) const {
    std::vector<std::byte> got(layout.block_stride);
    for (uint32_t l = 0; l < layout.num_layers; ++l)
      for (int side = 0; side < 2; ++side) {
        uint64_t off = l * layer_bytes + side * layout.v_offset + uint64_t(b) * layout.block_stride;
        tutti::gpu::copy_to_host(got.data(), mem + off, got.size());
        if (std::memcmp(got.data(), ref.data() + off, got.size()) != 0) return false;
      }
    return true;
  }
  tutti_kv_layout layout;
  uint64_t layer_bytes = 0;
  std::byte* mem = nullptr;
  std::vector<void*> bases;
  std::vector<std::byte> ref;
};

// Opens a runtime with the options `opts` (name, value) and registers `l`. On failure: null,
// with the code in *rc_out, or a test failure where rc_out is null.
tutti_runtime* open_with(const std::vector<std::pair<std::string, std::string>>& opts, const tutti_kv_layout& l,
                         int* rc_out = nullptr) {
  tutti_options* o = nullptr;
  tutti_options_create(&o);
  int rc = 0;
  for (const auto& [k, v] : opts)
    if (rc == 0) rc = tutti_options_set(o, k.c_str(), v.c_str());
  tutti_runtime* rt = nullptr;
  if (rc == 0) rc = tutti_runtime_open(o, &rt);
  tutti_options_destroy(o);
  if (rc == 0) rc = tutti_runtime_register_kv(rt, &l);
  if (rc_out) *rc_out = rc;
  if (rc != 0) {
    if (!rc_out) ADD_FAILURE() << "open/register: " << tutti_strerror(rc) << ": " << tutti_last_error();
    tutti_runtime_close(rt);
    return nullptr;
  }
  return rt;
}

tutti_runtime* open_runtime(const std::string& pool, const char* backend, const tutti_kv_layout& l, bool verify = true,
                            const char* io_mode = "object", int* rc_out = nullptr,
                            const char* device_staging = nullptr, const char* staging = nullptr,
                            const char* option = nullptr) {
  std::vector<std::pair<std::string, std::string>> opts = {
      {"pool", pool},        {"capacity", "256M"}, {"chunk_tokens", "64"},
      {"backend", backend}, {"io_mode", io_mode}, {"verify", verify ? "on" : "unsafe-off"}};
  if (device_staging) opts.emplace_back("device_staging", device_staging);
  if (staging) opts.emplace_back("staging", staging);
  if (option) {  // "key=value"
    const std::string kv = option;
    opts.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
  }
  return open_with(opts, l, rc_out);
}

// A test parameter "backend" or "backend key=value": the backend, and the option (null: none).
std::pair<std::string, const char*> backend_and_option(const char* param) {
  const char* space = std::strchr(param, ' ');
  return {space ? std::string(param, space) : std::string(param), space ? space + 1 : nullptr};
}

// Block ids 0 .. blocks-1 in an order of their own (the seed's).
std::vector<int32_t> shuffled_blocks(uint32_t blocks, uint32_t seed) {
  std::vector<int32_t> table(blocks);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  return table;
}

// A request for every whole chunk of `tokens`, whose blocks are table[0], table[1], ...
tutti_request whole_prompt(const std::vector<int32_t>& tokens, const int32_t* table, uint32_t bt) {
  tutti_request r{};
  r.tokens = tokens.data(), r.num_tokens = tokens.size(), r.block_table = table;
  r.num_block_ids = (tokens.size() + bt - 1) / bt, r.token_end = TUTTI_TOKENS_ALL;
  return r;
}

// Runs one batch over `reqs`, waiting layer by layer; returns the batch's status.
int run(tutti_runtime* rt, tutti_op op, std::vector<tutti_request>& reqs, uint32_t layers) {
  tutti_batch* b = nullptr;
  int rc = tutti_batch_create(rt, op, &b);
  if (!rc) rc = tutti_batch_add(b, reqs.data(), reqs.size());
  if (!rc) rc = tutti_batch_submit(b);
  for (uint32_t l = 0; l < layers && !rc; ++l) rc = tutti_batch_wait_layer(b, l);
  if (!rc) rc = tutti_batch_wait(b);
  tutti_batch_destroy(b);
  return rc;
}

struct Case {
  const char* backend;
  int hnd;
  bool verify;
  bool shm = false;  // pool on tmpfs
  const char* io_mode = "object";
  // Option device_staging (null: the default). The chunk-layers here are 256 KiB: "0" makes the
  // copy kernels read host memory in place, "512K" moves one chunk per DMA and scatter, "1M" two.
  const char* device_staging = nullptr;
  // Option staging (null: the default). Below a layer of the batch ("1M": four chunk-layers, a
  // layer here has up to 22) a load into HBM goes in waves, each scattered as its reads land.
  const char* staging = nullptr;
  const char* option = nullptr;  // one more option, "key=value"
};

class GpuRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(GpuRoundTrip, StoreFromHbmLoadIntoHbm) {
  const Case c = GetParam();
  Dir dir(c.shm);
  const uint32_t layers = 4, blocks = 96, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, c.hnd);
  int rc = 0;
  tutti_runtime* rt = open_runtime(dir.path + "/pool", c.backend, kv.layout, c.verify, c.io_mode, &rc,
                                   c.device_staging, c.staging, c.option);
  if (rc == TUTTI_EUNSUPPORTED && std::string(c.backend) == "cufile") GTEST_SKIP() << tutti_last_error();
  ASSERT_NE(rt, nullptr) << tutti_strerror(rc) << ": " << tutti_last_error();

  // Three prompts of 256, 512 and 640 tokens over a shuffled block table.
  std::vector<int32_t> table = shuffled_blocks(blocks, 3);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<tutti_request> reqs;
  size_t used = 0;
  for (size_t n : {256, 512, 640}) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(n * 1000 + i);
    prompts.push_back(t);
    tutti_request r{};
    r.num_tokens = n;
    r.block_table = table.data() + used;
    r.num_block_ids = n / bt;
    r.token_end = TUTTI_TOKENS_ALL;
    reqs.push_back(r);
    used += n / bt;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].tokens = prompts[i].data();
    kv.fill(prompts[i], reqs[i].block_table);
  }

  ASSERT_EQ(run(rt, TUTTI_OP_STORE, reqs, layers), 0) << tutti_last_error();
  for (auto& p : prompts) {
    size_t hit = 0;
    ASSERT_EQ(tutti_lookup(rt, p.data(), p.size(), nullptr, 0, &hit), 0);
    EXPECT_EQ(hit, p.size());
  }
  kv.zero();
  ASSERT_EQ(run(rt, TUTTI_OP_LOAD, reqs, layers), 0) << tutti_last_error();
  for (size_t i = 0; i < used; ++i) EXPECT_TRUE(kv.block_matches(table[i])) << "block " << table[i];
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(kv.check(prompts[i], reqs[i].block_table, 0, prompts[i].size()), "") << "prompt " << i;
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRoundTrip,
                         ::testing::Values(Case{"uring", 0, true}, Case{"posix", 0, true}, Case{"uring", 1, true},
                                           Case{"uring", 0, false}, Case{"gpu-uring", 0, true},
                                           Case{"gpu-uring", 1, true}, Case{"gpu-uring", 0, true, true},
                                           Case{"gpu-uring", 0, false}, Case{"posix", 1, true, true},
                                           Case{"dram", 0, true, true}, Case{"dram", 1, false, true},
                                           Case{"cufile", 0, true}, Case{"cufile", 1, true, true},
                                           Case{"uring", 0, true, false, "per-block-baseline"},
                                           Case{"posix", 0, true, true, "per-block-baseline"},
                                           Case{"uring", 0, true, false, "object", "0"},
                                           Case{"posix", 1, true, false, "object", "512K"},
                                           Case{"uring", 0, true, false, "object", "1536K"},
                                           Case{"dram", 0, true, true, "object", "0"},
                                           Case{"dram", 1, true, true, "object", "1536K"},
                                           Case{"uring", 0, true, false, "object", nullptr, "1M"},
                                           Case{"posix", 1, true, true, "object", "512K", "256K"},
                                           Case{"uring", 0, true, false, "object", "0", "768K"},
                                           Case{"gpu-uring", 0, true, false, "object", "0"},
                                           Case{"gpu-uring", 1, true, false, "object", "512K"},
                                           Case{"gpu-uring", 0, true, false, "object", nullptr, nullptr,
                                                "load_priority=high"},
                                           Case{"posix", 1, true, true, "object", nullptr, nullptr, "load_priority=high"},
                                           Case{"gpu-uring", 0, true, false, "object", nullptr, nullptr,
                                                "gpu_uring_completions=cpu"},
                                           Case{"gpu-uring", 1, true, true, "object", nullptr, nullptr,
                                                "gpu_uring_completions=cpu"}));

// store_sums=gpu: each store's checksums come from the gather's checksum kernel, and every load
// is checked against them where it lands: a prompt ending inside a chunk (its partial chunk
// holds zeros past its 48 tokens) loads back whole through each path and staging kind.
class GpuStoreSums : public ::testing::TestWithParam<Case> {};

TEST_P(GpuStoreSums, LoadsCheckAgainstGpuHashedStores) {
  const Case c = GetParam();
  ::setenv("TUTTI_STORE_SUMS", "gpu", 1);
  Dir dir(c.shm);
  const uint32_t layers = 3, bt = 16, n = 304, nb = n / bt, blocks = 2 * nb;  // chunks of 64: 4 and 48 tokens
  DeviceKv kv(layers, blocks, bt, 8, 128, c.hnd);
  int rc = 0;
  tutti_runtime* rt = open_runtime(dir.path + "/pool", c.backend, kv.layout, true, c.io_mode, &rc, c.device_staging,
                                   c.staging);
  ::unsetenv("TUTTI_STORE_SUMS");
  ASSERT_NE(rt, nullptr) << tutti_strerror(rc) << ": " << tutti_last_error();
  std::vector<int32_t> table = shuffled_blocks(blocks, 11);
  const int32_t* st = table.data();
  const int32_t* ld = table.data() + nb;
  std::vector<int32_t> tokens(n);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(9000 + i * 7);
  kv.fill(tokens, st);
  // token_end n, not TUTTI_TOKENS_ALL (whole chunks only): the store writes the partial chunk too
  std::vector<tutti_request> reqs{whole_prompt(tokens, st, bt)};
  reqs[0].token_end = n;
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, reqs, layers), 0) << tutti_last_error();
  size_t hit = 0;
  ASSERT_EQ(tutti_lookup(rt, tokens.data(), tokens.size(), nullptr, 0, &hit), 0);
  EXPECT_EQ(hit, n);
  reqs = {whole_prompt(tokens, ld, bt)};
  reqs[0].token_end = n;
  ASSERT_EQ(run(rt, TUTTI_OP_LOAD, reqs, layers), 0) << tutti_last_error();  // ECORRUPT if a sum were off
  EXPECT_EQ(kv.check(tokens, ld, 0, n), "");
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuStoreSums,
                         ::testing::Values(Case{"uring", 0, true}, Case{"posix", 1, true},
                                           Case{"gpu-uring", 0, true}, Case{"dram", 0, true, true},
                                           Case{"dram", 1, true, true, "object", "0"},
                                           Case{"uring", 0, true, false, "object", "0"},
                                           Case{"posix", 1, true, false, "object", "512K"},
                                           Case{"uring", 0, true, false, "object", nullptr, "1M"}));

// Ranges that start and end inside chunks, over blocks that divide the chunk (16), do not (24),
// or are larger than it (80): a load writes exactly the range's rows into HBM, every other byte
// of the cache stays as it was, and the checks pass (the checksum kernel reads the rows left
// out from the chunk's staging); the same for K-only (MLA) caches.
struct SpanCase {
  const char* backend;
  int hnd;
  uint32_t bt;
  bool shm = false;
  bool mla = false;  // K only: one latent of 576 per token
};

class GpuSpans : public ::testing::TestWithParam<SpanCase> {};

TEST_P(GpuSpans, LoadsExactlyTheRange) {
  const SpanCase c = GetParam();
  Dir dir(c.shm);
  const uint32_t layers = 3, bt = c.bt, n = 300;
  const uint32_t nb = (n + bt - 1) / bt, blocks = 2 * nb + 2;
  DeviceKv kv(layers, blocks, bt, c.mla ? 1 : 8, c.mla ? 576 : 128, c.hnd, c.mla);
  int rc = 0;
  tutti_runtime* rt = open_runtime(dir.path + "/pool", c.backend, kv.layout, true, "object", &rc);
  if (rc == TUTTI_EUNSUPPORTED && std::string(c.backend) == "cufile") GTEST_SKIP() << tutti_last_error();
  ASSERT_NE(rt, nullptr) << tutti_strerror(rc) << ": " << tutti_last_error();
  std::vector<int32_t> table = shuffled_blocks(blocks, bt);
  const int32_t* st = table.data();
  const int32_t* ld = table.data() + nb;
  std::vector<int32_t> tokens(n);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(7000 + i * 3);
  kv.fill(tokens, st);
  std::vector<tutti_request> reqs{whole_prompt(tokens, st, bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, reqs, layers), 0) << tutti_last_error();  // chunks of 64: 256 tokens
  for (auto [lo, hi] : {std::pair{5u, 250u}, std::pair{64u, 100u}, std::pair{70u, 71u}, std::pair{0u, 256u}}) {
    SCOPED_TRACE("tokens [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
    tutti_request r = whole_prompt(tokens, ld, bt);
    r.token_begin = lo, r.token_end = hi;
    reqs = {r};
    ASSERT_EQ(run(rt, TUTTI_OP_LOAD, reqs, layers), 0) << tutti_last_error();
    EXPECT_EQ(kv.check(tokens, ld, lo, hi), "");
    // Every byte of the cache: the reference with the range's rows written, nothing else.
    std::vector<std::byte> expect = kv.ref;
    std::vector<void*> host_bases;
    const tutti_kv_layout h = kv.on_host(expect.data(), host_bases);
    const tf_prompt p{tokens.data(), tokens.size(), 0, nullptr, ld};
    tf_fill(&h, &p, lo, hi);
    std::vector<std::byte> got(kv.ref.size());
    tutti::gpu::copy_to_host(got.data(), kv.mem, got.size());
    EXPECT_TRUE(got == expect) << "bytes outside the range changed";
    tutti::gpu::copy_to_device(kv.mem, kv.ref.data(), kv.ref.size());  // back to the reference
  }
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuSpans,
                         ::testing::Values(SpanCase{"uring", 0, 16}, SpanCase{"uring", 1, 24}, SpanCase{"posix", 0, 80},
                                           SpanCase{"gpu-uring", 0, 24}, SpanCase{"gpu-uring", 1, 80},
                                           SpanCase{"dram", 0, 24, true}, SpanCase{"dram", 1, 16, true},
                                           SpanCase{"cufile", 0, 24}, SpanCase{"uring", 0, 16, false, true},
                                           SpanCase{"gpu-uring", 0, 24, false, true},
                                           SpanCase{"dram", 0, 32, true, true}));

// A byte flipped in a stored extent on disk: with the default checks, whichever path loads it
// (the CPU producers, gpu-uring, dram, cufile, the per-block baseline), that chunk fails with
// TUTTI_ECORRUPT and every other chunk lands intact. The GPU paths check where the bytes
// landed, with the checksum kernel.
class GpuCorrupt : public ::testing::TestWithParam<Case> {};

TEST_P(GpuCorrupt, FlippedByteIsCaught) {
  const Case c = GetParam();
  Dir dir(c.shm);
  const uint32_t layers = 3, blocks = 32, bt = 16, chunk = 64, n = 512;
  DeviceKv kv(layers, blocks, bt, 8, 128, c.hnd);
  const std::string pool = dir.path + "/pool";
  int rc = 0;
  tutti_runtime* rt =
      open_runtime(pool, c.backend, kv.layout, true, c.io_mode, &rc, c.device_staging, c.staging, c.option);
  if (rc == TUTTI_EUNSUPPORTED && std::string(c.backend) == "cufile") GTEST_SKIP() << tutti_last_error();
  ASSERT_NE(rt, nullptr) << tutti_strerror(rc) << ": " << tutti_last_error();
  std::vector<int32_t> table(blocks), tokens(n);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 5) % blocks);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i * 3 + 1);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r(1);
  r[0] = tutti_request{};
  r[0].tokens = tokens.data(), r[0].num_tokens = n, r[0].block_table = table.data(), r[0].num_block_ids = n / bt;
  r[0].token_end = n;
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();
  tutti_runtime_close(rt);

  // Chunks fill the lowest slots first: flip one byte of chunk 3's layer 1, inside V.
  const tutti::Shape shape{layers, 8, 128, 2, chunk};
  const tutti::Geometry g(shape, 1, tutti::Geometry::slots_for(shape, 256ull << 20));
  const tutti::Extent e = g.layer_extent(3, 1);
  FILE* f = std::fopen(pool.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const long at = static_cast<long>(e.offset + shape.v_offset() + 777);
  std::fseek(f, at, SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(byte ^ 0x10, f);
  std::fclose(f);

  rt = open_runtime(pool, c.backend, kv.layout, true, c.io_mode, nullptr, c.device_staging, c.staging, c.option);
  ASSERT_NE(rt, nullptr);
  kv.zero();
  tutti_batch* b = nullptr;
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
  ASSERT_EQ(tutti_batch_add(b, r.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(b), 0);
  EXPECT_EQ(tutti_batch_wait(b), TUTTI_ECORRUPT);
  int status[8];
  size_t got_n = 0;
  ASSERT_EQ(tutti_batch_chunk_status(b, 0, status, 8, &got_n), 0);
  tutti_result res;
  ASSERT_EQ(tutti_batch_result(b, 0, &res), 0);
  tutti_batch_destroy(b);
  EXPECT_EQ(status[3], TUTTI_ECORRUPT);
  EXPECT_EQ(res.tokens, 3u * chunk);
  for (uint32_t i = 0; i < 3 * chunk / bt; ++i) EXPECT_TRUE(kv.block_matches(table[i])) << "block " << table[i];
  EXPECT_EQ(kv.check(tokens, table.data(), 0, 3 * chunk), "");
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuCorrupt,
                         ::testing::Values(Case{"uring", 0, true}, Case{"posix", 1, true}, Case{"gpu-uring", 0, true},
                                           Case{"gpu-uring", 1, true, true}, Case{"dram", 0, true, true},
                                           Case{"gpu-uring", 0, true, false, "object", nullptr, nullptr,
                                                "gpu_uring_completions=cpu"},
                                           Case{"dram", 1, true, true}, Case{"cufile", 0, true},
                                           Case{"uring", 0, true, false, "per-block-baseline"},
                                           Case{"posix", 0, true, false, "object", "0"},
                                           Case{"posix", 0, true, false, "object", "1M"},
                                           Case{"dram", 0, true, true, "object", "1M"},
                                           Case{"uring", 0, true, false, "object", nullptr, "512K"}));

// Device staging must hold one chunk-layer each way (two in all): less is refused when the KV
// cache is registered, with the option's name in the error.
TEST(Gpu, DeviceStagingBelowTwoChunkLayersIsRefused) {
  if (!tutti::gpu::unavailable_reason().empty()) GTEST_SKIP() << tutti::gpu::unavailable_reason();
  Dir dir(false);
  DeviceKv kv(2, 8, 16, 8, 128, 0);
  int rc = 0;
  tutti_runtime* rt = open_runtime(dir.path + "/pool", "uring", kv.layout, true, "object", &rc, "256K");
  EXPECT_EQ(rt, nullptr);
  EXPECT_EQ(rc, TUTTI_EINVAL);
  EXPECT_NE(std::string(tutti_last_error()).find("device_staging"), std::string::npos) << tutti_last_error();
}

// The GPU's warp-parallel page hash equals the CPU's (libxxhash) on random and edge pages.
TEST(Gpu, WarpPageHashEqualsCpu) {
  const size_t pages = 64;
  std::vector<uint8_t> host(pages * 4096);
  std::mt19937_64 rng(21);
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  std::fill(host.begin(), host.begin() + 4096, 0);
  std::fill(host.begin() + 4096, host.begin() + 8192, 0xff);
  void* dev = tutti::gpu::alloc(0, host.size());
  tutti::gpu::copy_to_device(dev, host.data(), host.size());
  tutti::gpu::Device d(0);
  uint64_t dev_out = 0;
  auto* out = static_cast<uint64_t*>(d.host_alloc(pages * sizeof(uint64_t), &dev_out));
  d.page_hashes(dev, pages, reinterpret_cast<uint64_t*>(dev_out));
  for (size_t i = 0; i < pages; ++i) EXPECT_EQ(out[i], tutti::page_hash(host.data() + i * 4096)) << "page " << i;
  d.host_free(out);
  tutti::gpu::free(dev);
}

// A CUDA graph that waits on every layer and then copies the layer out, captured once and
// replayed against fresh loads of two different prompts: each replay must see its own bytes,
// never the zeros the blocks held before the load.
class GpuGraph : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuGraph, ReplayWaitsForEachLoad) {
  const auto [backend, option] = backend_and_option(GetParam());
  Dir dir(backend == "dram");
  const uint32_t layers = 3, blocks = 32, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  tutti_runtime* rt = open_runtime(dir.path + "/pool", backend.c_str(), kv.layout, true, "object", nullptr, nullptr,
                                   nullptr, option);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table(blocks);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(blocks - 1 - i);
  const size_t n = 512;
  std::vector<std::vector<int32_t>> prompts(2, std::vector<int32_t>(n));
  std::vector<std::vector<std::byte>> refs;
  for (int p = 0; p < 2; ++p) {
    for (size_t i = 0; i < n; ++i) prompts[p][i] = static_cast<int32_t>(p * 100000 + i);
    kv.fill(prompts[p], table.data());  // prompt p's own KV bytes, in every block
    refs.push_back(kv.ref);
    std::vector<tutti_request> r(1);
    r[0] = tutti_request{};
    r[0].tokens = prompts[p].data(), r[0].num_tokens = n, r[0].block_table = table.data(), r[0].num_block_ids = n / bt;
    r[0].token_end = TUTTI_TOKENS_ALL;
    ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();
  }
  void* snap = tutti::gpu::alloc(0, kv.ref.size());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  for (int round = 0; round < 4; ++round) {
    const int p = round % 2;
    kv.zero();
    tutti::gpu::fill_zero(snap, kv.ref.size());
    tutti_request r{};
    r.tokens = prompts[p].data(), r.num_tokens = n, r.block_table = table.data(), r.num_block_ids = n / bt;
    r.token_end = TUTTI_TOKENS_ALL;
    tutti_batch* b = nullptr;
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
    ASSERT_EQ(tutti_batch_add(b, &r, 1), 0);
    ASSERT_EQ(tutti_batch_submit(b), 0);
    if (!exec) {  // capture once, with the first batch
      cudaGraph_t g;
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      for (uint32_t l = 0; l < layers; ++l) {
        ASSERT_EQ(tutti_batch_wait_layer_async(b, l, s), 0) << tutti_last_error();
        ASSERT_EQ(cudaMemcpyAsync(static_cast<std::byte*>(snap) + l * kv.layer_bytes, kv.mem + l * kv.layer_bytes,
                                  kv.layer_bytes, cudaMemcpyDeviceToDevice, s),
                  cudaSuccess);
      }
      ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
      cudaGraphDestroy(g);
    }
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(tutti_batch_wait(b), 0);
    tutti_batch_destroy(b);
    // Every block of the prompt, every layer, K and V: the snapshot holds prompt p's bytes.
    std::vector<std::byte> got(kv.ref.size());
    tutti::gpu::copy_to_host(got.data(), snap, got.size());
    for (uint32_t l = 0; l < layers; ++l)
      for (int side = 0; side < 2; ++side)
        for (size_t i = 0; i < n / bt; ++i) {
          uint64_t off = l * kv.layer_bytes + side * kv.layout.v_offset + uint64_t(table[i]) * kv.layout.block_stride;
          ASSERT_EQ(std::memcmp(got.data() + off, refs[p].data() + off, kv.layout.block_stride), 0)
              << "round " << round << " layer " << l << " side " << side << " block " << table[i];
        }
  }
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  tutti::gpu::free(snap);
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuGraph,
                         ::testing::Values("uring", "gpu-uring", "gpu-uring gpu_uring_completions=cpu", "dram"));

// Ends the process with a message if the test has not finished within 60 s (a hang is a
// failure, not a stuck CI job); an early return of an ASSERT stops it too.
class Watchdog {
 public:
  explicit Watchdog(std::string what) : t_([this, what = std::move(what)] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return done_; })) {
        std::fprintf(stderr, "%s in 60 s\n", what.c_str());
        std::_Exit(1);
      }
    }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};

// An engine whose stream-ordered waits sit on the legacy default stream (torch's default
// stream): tutti's own threads must never queue work behind them, or the layer a wait is for
// never lands. The per-block baseline's copies once did, and hung.
struct LegacyCase {
  const char* backend;
  const char* io_mode;
};

class GpuLegacyStream : public ::testing::TestWithParam<LegacyCase> {};

TEST_P(GpuLegacyStream, WaitsThereDoNotBlockTheLoad) {
  const LegacyCase c = GetParam();
  Dir dir(std::string(c.backend) == "dram");
  const uint32_t layers = 4, blocks = 32, bt = 16;
  const size_t n = 512;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  tutti_runtime* rt = open_runtime(dir.path + "/pool", c.backend, kv.layout, true, c.io_mode);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table(blocks), tokens(n);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i * 3 + 1);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r{whole_prompt(tokens, table.data(), bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();
  kv.zero();

  // Every layer's wait is queued on the legacy stream before its bytes can have landed; a
  // watchdog turns a hang into a failure.
  Watchdog watchdog(std::string("GpuLegacyStream: the load did not finish (") + c.backend + ", " + c.io_mode + ")");
  tutti_batch* b = nullptr;
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
  ASSERT_EQ(tutti_batch_add(b, r.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(b), 0);
  for (uint32_t l = 0; l < layers; ++l) ASSERT_EQ(tutti_batch_wait_layer_async(b, l, nullptr), 0) << tutti_last_error();
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(tutti_batch_wait(b), 0) << tutti_last_error();
  tutti_batch_destroy(b);
  EXPECT_EQ(kv.check(tokens, table.data(), 0, n), "");
  tutti_runtime_close(rt);
}

// Sets an environment variable (a TUTTI_* option) for the runtimes opened while it lives.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
  const char* name;
};

// Two load batches in flight: a large one, then a small one that lands first. A stream-ordered
// wait for the older batch must not pass on the newer batch's layer having landed, or the
// engine's work for the older batch would read blocks still being loaded. Both ways of
// waiting (option stream_wait: the host blocks, or a kernel spins on the stream); gpu-uring,
// whose copies a thread of its own queues once the reads are over, the host way (a spinning
// wait may hold a hardware queue its read kernels need: tutti.h).
struct EpochCase {
  const char* wait;
  const char* backend;
};
class GpuEpochs : public ::testing::TestWithParam<EpochCase> {};

TEST_P(GpuEpochs, AWaitNeverPassesBeforeAnOlderBatchsLayer) {
  Dir dir;
  const uint32_t layers = 8, blocks = 512, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  ScopedEnv wait_mode("TUTTI_STREAM_WAIT", GetParam().wait);
  tutti_runtime* rt = open_runtime(dir.path + "/pool", GetParam().backend, kv.layout);
  ASSERT_NE(rt, nullptr) << tutti_last_error();
  std::vector<int32_t> table(blocks), big(240 * bt), small(64);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(i * 5 + 3);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<int32_t>(900000 + i);
  const int32_t* small_table = table.data() + 480;  // blocks of its own
  kv.fill(big, table.data());
  kv.fill(small, small_table, 1);
  std::vector<tutti_request> r{whole_prompt(big, table.data(), bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();
  r = {whole_prompt(small, small_table, bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();

  for (int round = 0; round < 3; ++round) {
    kv.zero();
    void* snap = tutti::gpu::alloc(0, kv.ref.size());
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    tutti_batch *a = nullptr, *b = nullptr;
    tutti_request ra = whole_prompt(big, table.data(), bt), rb = whole_prompt(small, small_table, bt);
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &a), 0);
    ASSERT_EQ(tutti_batch_add(a, &ra, 1), 0);
    ASSERT_EQ(tutti_batch_submit(a), 0);
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
    ASSERT_EQ(tutti_batch_add(b, &rb, 1), 0);
    ASSERT_EQ(tutti_batch_submit(b), 0);
    // The engine's work for the big batch, queued after the small one was submitted.
    for (uint32_t l = 0; l < layers; ++l) {
      ASSERT_EQ(tutti_batch_wait_layer_async(a, l, s), 0) << tutti_last_error();
      ASSERT_EQ(cudaMemcpyAsync(static_cast<std::byte*>(snap) + l * kv.layer_bytes, kv.mem + l * kv.layer_bytes,
                                kv.layer_bytes, cudaMemcpyDeviceToDevice, s),
                cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(tutti_batch_wait(a), 0) << tutti_last_error();
    EXPECT_EQ(tutti_batch_wait(b), 0) << tutti_last_error();
    tutti_batch_destroy(a);
    tutti_batch_destroy(b);
    // What the engine's copies saw of the big batch: its bytes, every layer, none read early.
    EXPECT_EQ(kv.check(big, table.data(), 0, big.size(), 0, snap), "") << "round " << round;
    cudaStreamDestroy(s);
    tutti::gpu::free(snap);
  }
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(WaitModes, GpuEpochs,
                         ::testing::Values(EpochCase{"host", "posix"}, EpochCase{"gpu", "posix"},
                                           EpochCase{"host", "gpu-uring"}));

// A store by layer whose layers are declared ready on a CUDA stream that is still busy (a host
// function sleeps on it before each layer's bytes are copied in): tutti's writer waits for the
// stream by event, so what it stores is the computed KV, never the zeros there before; the
// engine's thread never blocks. Then a load brings the bytes back. uring and dram.
class GpuByLayer : public ::testing::TestWithParam<Case> {};

TEST_P(GpuByLayer, WritesWhatTheStreamComputed) {
  const Case c = GetParam();
  Dir dir(c.shm);
  const uint32_t layers = 4, blocks = 64, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  std::vector<int32_t> table(blocks), tokens(48 * bt);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 11) % blocks);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 + 3);
  kv.fill(tokens, table.data());
  void* computed = tutti::gpu::alloc(0, kv.ref.size());  // what the "model" writes, layer by layer
  tutti::gpu::copy_to_device(computed, kv.ref.data(), kv.ref.size());
  kv.zero();
  tutti_runtime* rt = open_runtime(dir.path + "/pool", c.backend, kv.layout);
  ASSERT_NE(rt, nullptr);
  Watchdog watchdog("GpuByLayer: the store did not finish");
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  tutti_batch* b = nullptr;
  tutti_request r = whole_prompt(tokens, table.data(), bt);
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_STORE_BY_LAYER, &b), 0);
  ASSERT_EQ(tutti_batch_add(b, &r, 1), 0);
  ASSERT_EQ(tutti_batch_submit(b), 0);
  auto nap = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
  for (uint32_t l = 0; l < layers; ++l) {
    ASSERT_EQ(cudaLaunchHostFunc(s, nap, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(kv.mem + l * kv.layer_bytes, static_cast<std::byte*>(computed) + l * kv.layer_bytes,
                              kv.layer_bytes, cudaMemcpyDeviceToDevice, s),
              cudaSuccess);
    ASSERT_EQ(tutti_batch_layer_ready(b, l, s), 0) << tutti_last_error();
  }
  EXPECT_EQ(tutti_batch_wait(b), 0) << tutti_last_error();
  tutti_batch_destroy(b);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  kv.zero();
  std::vector<tutti_request> reqs{r};
  ASSERT_EQ(run(rt, TUTTI_OP_LOAD, reqs, layers), 0) << tutti_last_error();
  EXPECT_EQ(kv.check(tokens, table.data(), 0, tokens.size()), "");
  cudaStreamDestroy(s);
  tutti::gpu::free(computed);
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuByLayer, ::testing::Values(Case{"uring", 0, true}, Case{"dram", 0, true, true}));

// Two loads in flight at once, each with a layer of 60 chunk-layers, through a staging of four:
// each layer goes into HBM in waves that free their buffers as their copy kernels run, so
// neither batch waits for buffers the other holds (loads that staged whole layers refused this
// and, with two batches that fit alone, could deadlock). Both land their own bytes.
TEST(GpuWaves, ConcurrentLoadsThroughStagingSmallerThanALayer) {
  Dir dir;
  const uint32_t layers = 6, blocks = 480, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  tutti_runtime* rt = open_runtime(dir.path + "/pool", "uring", kv.layout, true, "object", nullptr, nullptr, "1M");
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table(blocks), one(240 * bt), two(240 * bt);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 7) % blocks);
  for (size_t i = 0; i < one.size(); ++i) one[i] = static_cast<int32_t>(i * 3 + 1), two[i] = static_cast<int32_t>(i * 5 + 2);
  const int32_t* table_two = table.data() + 240;
  kv.fill(one, table.data());
  kv.fill(two, table_two, 1);
  std::vector<tutti_request> r{whole_prompt(one, table.data(), bt), whole_prompt(two, table_two, bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();

  Watchdog watchdog("GpuWaves: the loads did not finish");
  for (int round = 0; round < 3; ++round) {
    kv.zero();
    tutti_batch *a = nullptr, *b = nullptr;
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &a), 0);
    ASSERT_EQ(tutti_batch_add(a, &r[0], 1), 0);
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
    ASSERT_EQ(tutti_batch_add(b, &r[1], 1), 0);
    ASSERT_EQ(tutti_batch_submit(a), 0);
    ASSERT_EQ(tutti_batch_submit(b), 0);
    EXPECT_EQ(tutti_batch_wait(b), 0) << tutti_last_error();
    EXPECT_EQ(tutti_batch_wait(a), 0) << tutti_last_error();
    tutti_batch_destroy(a);
    tutti_batch_destroy(b);
    EXPECT_EQ(kv.check(one, table.data(), 0, one.size()), "") << "round " << round;
    EXPECT_EQ(kv.check(two, table_two, 0, two.size(), 1), "") << "round " << round;
  }
  tutti_runtime_close(rt);
}

// An engine with many streams (more than the device's hardware queues, so they share them)
// waits on each of them for every layer of a load that is slower than its work, and queues
// work behind each wait. With host waits (the default) the GPU never waits for tutti, so this
// cannot deadlock by construction (a spinning wait kernel deadlocked a transformers prefill
// on the H200 in such a setting); what is checked is that every stream drains and that work
// queued after a wait on any of them sees the layer's bytes.
TEST(GpuStreams, HostWaitsServeManyStreams) {
  Dir dir;
  const uint32_t layers = 8, blocks = 512, bt = 16;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  ScopedEnv host_waits("TUTTI_STREAM_WAIT", "host");
  ScopedEnv one_thread("TUTTI_THREADS", "1");  // a slow load
  tutti_runtime* rt = open_runtime(dir.path + "/pool", "posix", kv.layout);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table(blocks), tokens(384 * bt);  // 192 MiB of KV: within the pool's 256M
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 7) % blocks);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 11 + 5);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r{whole_prompt(tokens, table.data(), bt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();
  kv.zero();

  Watchdog watchdog("GpuStreams: the streams did not drain");
  const int n = 48;
  std::vector<cudaStream_t> streams(n);
  for (auto& s : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* scratch = tutti::gpu::alloc(0, n * 4096);
  void* snap = tutti::gpu::alloc(0, kv.ref.size());
  tutti_batch* b = nullptr;
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
  ASSERT_EQ(tutti_batch_add(b, r.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(b), 0);
  for (uint32_t l = 0; l < layers; ++l)
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(tutti_batch_wait_layer_async(b, l, streams[i]), 0) << tutti_last_error();
      ASSERT_EQ(cudaMemsetAsync(static_cast<std::byte*>(scratch) + i * 4096, int(l), 4096, streams[i]), cudaSuccess);
      if (i == int(l) % n) {  // what one engine stream reads of the layer right after its wait
        ASSERT_EQ(cudaMemcpyAsync(static_cast<std::byte*>(snap) + l * kv.layer_bytes, kv.mem + l * kv.layer_bytes,
                                  kv.layer_bytes, cudaMemcpyDeviceToDevice, streams[i]),
                  cudaSuccess);
      }
    }
  for (auto& s : streams) EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(tutti_batch_wait(b), 0) << tutti_last_error();
  tutti_batch_destroy(b);
  EXPECT_EQ(kv.check(tokens, table.data(), 0, tokens.size(), 0, snap), "");
  for (auto& s : streams) cudaStreamDestroy(s);
  tutti::gpu::free(scratch);
  tutti::gpu::free(snap);
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuLegacyStream,
                         ::testing::Values(LegacyCase{"uring", "per-block-baseline"}, LegacyCase{"uring", "object"},
                                           LegacyCase{"gpu-uring", "object"}, LegacyCase{"dram", "object"}));

// Reads that fail (the pool file cut short under the runtime) fail their chunks, and those
// chunks' blocks are left as they were: no wrong bytes reach the KV cache.
class GpuFailedRead : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuFailedRead, LeavesBlocksAlone) {
  Dir dir;
  const uint32_t layers = 2, blocks = 32, bt = 16, chunk = 64, n = 512;
  DeviceKv kv(layers, blocks, bt, 8, 128, 0);
  const std::string pool = dir.path + "/pool";
  const auto [backend, option] = backend_and_option(GetParam());
  tutti_runtime* rt = open_runtime(pool, backend.c_str(), kv.layout, true, "object", nullptr, nullptr, nullptr, option);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table(blocks), tokens(n);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i * 7);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r(1);
  r[0] = tutti_request{};
  r[0].tokens = tokens.data(), r[0].num_tokens = n, r[0].block_table = table.data(), r[0].num_block_ids = n / bt;
  r[0].token_end = TUTTI_TOKENS_ALL;
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, layers), 0) << tutti_last_error();

  // A fresh pool fills its lowest slots first: chunks 0-7 sit in slots 0-7. Cut the file
  // where slot 5 begins.
  const tutti::Shape shape{layers, 8, 128, 2, chunk};
  const tutti::Geometry g(shape, 1, tutti::Geometry::slots_for(shape, 256ull << 20));
  ASSERT_EQ(::truncate(pool.c_str(), static_cast<off_t>(g.slot_extent(5).offset)), 0);
  kv.zero();
  tutti_batch* b = nullptr;
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
  ASSERT_EQ(tutti_batch_add(b, r.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(b), 0);
  EXPECT_EQ(tutti_batch_wait(b), TUTTI_EIO);
  int status[8];
  size_t got_n = 0;
  ASSERT_EQ(tutti_batch_chunk_status(b, 0, status, 8, &got_n), 0);
  ASSERT_EQ(got_n, 8u);
  tutti_batch_destroy(b);
  const uint32_t per_chunk = chunk / bt;
  std::vector<std::byte> got(kv.layout.block_stride), zero(kv.layout.block_stride);
  for (uint32_t c = 0; c < 8; ++c) {
    EXPECT_EQ(status[c], c < 5 ? 0 : TUTTI_EIO) << "chunk " << c;
    for (uint32_t k = 0; k < per_chunk; ++k) {
      const int32_t blk = table[c * per_chunk + k];
      if (c < 5) {
        EXPECT_TRUE(kv.block_matches(blk)) << "chunk " << c << " block " << blk;
        continue;
      }
      for (uint32_t l = 0; l < layers; ++l)
        for (int side = 0; side < 2; ++side) {
          tutti::gpu::copy_to_host(got.data(), kv.mem + l * kv.layer_bytes + side * kv.layout.v_offset +
                                                  uint64_t(blk) * kv.layout.block_stride, got.size());
          EXPECT_EQ(std::memcmp(got.data(), zero.data(), got.size()), 0) << "failed chunk " << c << " block " << blk;
        }
    }
  }
  EXPECT_EQ(kv.check(tokens, table.data(), 0, 5 * chunk), "");
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuFailedRead,
                         ::testing::Values("uring", "gpu-uring", "gpu-uring gpu_uring_completions=cpu"));

// One layer of 8 fused blocks in host memory (bases[0] must point at 1 MiB).
tutti_kv_layout host_layout(void** bases) {
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, 1, 8, 16, 2, 64, 2, 0);
  l.k_base = bases;
  l.v_offset = 8 * l.block_stride;
  return l;
}

TEST(Gpu, GpuUringRefusesHostMemory) {
  Dir dir;
  std::vector<std::byte> host(1 << 20);
  void* bases[1] = {host.data()};
  tutti_kv_layout l = host_layout(bases);
  int rc = 0;
  EXPECT_EQ(open_runtime(dir.path + "/pool", "gpu-uring", l, false, "object", &rc), nullptr);
  EXPECT_EQ(rc, TUTTI_EUNSUPPORTED);
  EXPECT_NE(std::string(tutti_last_error()).find("CUDA memory"), std::string::npos) << tutti_last_error();
}

TEST(Gpu, HostPointersAreNotCudaMemory) {
  Dir dir;
  std::vector<std::byte> host(1 << 20);
  void* bases[1] = {host.data()};
  tutti_kv_layout l = host_layout(bases);
  l.memory = TUTTI_MEMORY_CUDA;
  int rc = 0;
  EXPECT_EQ(open_runtime(dir.path + "/pool", "uring", l, false, "object", &rc), nullptr);
  EXPECT_EQ(rc, TUTTI_EINVAL);
  EXPECT_NE(std::string(tutti_last_error()).find("not memory of CUDA device"), std::string::npos);
}

// The per-block baseline copies each block's K (V) whole: HND blocks, where a token's rows are
// not contiguous, are refused.
TEST(Gpu, PerBlockBaselineNeedsNhd) {
  Dir dir;
  DeviceKv hnd(2, 8, 16, 2, 64, 1);
  int rc = 0;
  EXPECT_EQ(open_runtime(dir.path + "/pool", "uring", hnd.layout, false, "per-block-baseline", &rc), nullptr);
  EXPECT_EQ(rc, TUTTI_EUNSUPPORTED);
  EXPECT_NE(std::string(tutti_last_error()).find("NHD"), std::string::npos) << tutti_last_error();
}

// ---- load_timeout_ms into HBM --------------------------------------------------------------
// A load whose reads stall gives up at load_timeout_ms, its waits say so (TUTTI_EIO), and no
// byte it read late reaches HBM, through the copy kernels (object: staged-cuda) or the per-block
// copies. The reads are stalled by tests/integrity/faultshim.c, which must be preloaded: the
// test runs itself again in a child process with the shim (LD_PRELOAD), and the child, seeing
// TUTTI_TEST_STALL_DIR, does the stalled part. Without the shim the same loads land every byte.

struct DeadlineCase {
  const char* backend;
  const char* io_mode;
};

class GpuLoadDeadline : public ::testing::TestWithParam<DeadlineCase> {};

constexpr uint32_t kDeadlineLayers = 2, kDeadlineBlocks = 32, kDeadlineBt = 16, kDeadlineTokens = 128;

// Runs this test again in a child process with the fault shim preloaded on `dir` and `env` set
// (the child's part of the test reads one of them); the child must pass and leave `dir`/child-ran.
void run_child_under_shim(const std::string& dir, const std::vector<std::pair<const char*, std::string>>& env) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("LD_PRELOAD", TUTTI_FAULTSHIM_PATH, 1);
    setenv("TUTTI_FAULT_PREFIX", dir.c_str(), 1);
    for (const auto& [k, v] : env) setenv(k, v.c_str(), 1);
    execl("/proc/self/exe", "tutti_gpu_tests", filter.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child under the fault shim failed (its output above)";
  EXPECT_EQ(access((dir + "/child-ran").c_str(), F_OK), 0) << "the child ran nothing (" << filter << ")";
}

bool faultshim_built() { return !std::string(TUTTI_FAULTSHIM_PATH).empty() && access(TUTTI_FAULTSHIM_PATH, R_OK) == 0; }

void mark_child_ran(const std::string& dir) {
  if (FILE* f = std::fopen((dir + "/child-ran").c_str(), "w")) std::fclose(f);
}

tutti_runtime* open_with_deadline(const std::string& pool, const DeadlineCase& c, const tutti_kv_layout& l) {
  return open_with({{"pool", pool},
                    {"capacity", "64M"},
                    {"chunk_tokens", "64"},
                    {"backend", c.backend},
                    {"io_mode", c.io_mode},
                    {"threads", "16"},
                    {"load_timeout_ms", "200"}},
                   l);
}

// The child's part, under stalled reads: three loads give up (waiting for layer 0 on the host,
// for the batch, for layer 0 on a stream), and HBM keeps the poison the loads found there.
void stalled_loads(const std::string& dir, const DeadlineCase& c) {
  DeviceKv kv(kDeadlineLayers, kDeadlineBlocks, kDeadlineBt, 2, 64, 0);
  tutti_runtime* rt = open_with_deadline(dir + "/pool", c, kv.layout);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table = shuffled_blocks(kDeadlineBlocks, 5), tokens(kDeadlineTokens);
  for (uint32_t i = 0; i < kDeadlineTokens; ++i) tokens[i] = static_cast<int32_t>(i * 13 + 1);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r{whole_prompt(tokens, table.data(), kDeadlineBt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, kDeadlineLayers), 0) << tutti_last_error();  // writes: not stalled

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<std::byte> poison(kv.ref.size(), std::byte{0x5A});
  std::vector<std::byte> got(kv.ref.size());
  for (const char* wait : {"wait_layer", "wait", "wait_layer_async"}) {
    SCOPED_TRACE(wait);
    ASSERT_EQ(cudaMemset(kv.mem, 0x5A, poison.size()), cudaSuccess);
    tutti_batch* b = nullptr;
    ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &b), 0);
    ASSERT_EQ(tutti_batch_add(b, r.data(), 1), 0);
    ASSERT_EQ(tutti_batch_submit(b), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string w = wait;
    const int waited = w == "wait" ? tutti_batch_wait(b)
                       : w == "wait_layer" ? tutti_batch_wait_layer(b, 0)
                                           : tutti_batch_wait_layer_async(b, 0, stream);
    const std::string why = tutti_last_error();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(waited, TUTTI_EIO) << why;
    EXPECT_NE(why.find("load_timeout_ms"), std::string::npos) << why;
    EXPECT_LT(s, 1.2) << "the wait took " << s << " s; the reads stall 1.5 s";  // gave up, did not wait them out
    // Every later wait fails at once, and the stream is not held by the load.
    EXPECT_EQ(tutti_batch_wait_layer_async(b, kDeadlineLayers - 1, stream), TUTTI_EIO);
    EXPECT_EQ(tutti_batch_wait_layer(b, kDeadlineLayers - 1), TUTTI_EIO);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    tutti_result res{};
    EXPECT_EQ(tutti_batch_result(b, 0, &res), 0);
    EXPECT_EQ(res.status, TUTTI_EIO);
    EXPECT_EQ(res.tokens, 0u);
    tutti_batch_destroy(b);  // waits out the reads: they came back, and were kept out
    tutti::gpu::copy_to_host(got.data(), kv.mem, got.size());
    size_t changed = 0;
    for (size_t i = 0; i < got.size(); ++i) changed += got[i] != poison[i];
    EXPECT_EQ(changed, 0u) << "bytes of HBM changed after the load gave up";
  }
  tutti_stats st{};
  st.struct_size = sizeof st;
  ASSERT_EQ(tutti_runtime_stats(rt, &st), 0);
  EXPECT_EQ(st.load_timeouts, 3u);
  cudaStreamDestroy(stream);
  tutti_runtime_close(rt);
  mark_child_ran(dir);
}

TEST_P(GpuLoadDeadline, StalledReadsGiveUpAndNoLateByteLands) {
  if (const char* dir = std::getenv("TUTTI_TEST_STALL_DIR")) return stalled_loads(dir, GetParam());
  if (!faultshim_built()) GTEST_SKIP() << "the fault shim is not built";
  Dir dir;
  run_child_under_shim(dir.path, {{"TUTTI_FAULT_PLAN", "pread:data:stall:1:0;preadv:data:stall:1:0"},
                                  {"TUTTI_FAULT_STALL_MS", "1500"},
                                  {"TUTTI_TEST_STALL_DIR", dir.path}});
}

// Without stalls, loads under load_timeout_ms land every byte.
TEST_P(GpuLoadDeadline, LoadsInTimeLandEveryByte) {
  if (std::getenv("TUTTI_TEST_STALL_DIR")) GTEST_SKIP() << "the stalled child";
  Dir dir;
  DeviceKv kv(kDeadlineLayers, kDeadlineBlocks, kDeadlineBt, 2, 64, 0);
  tutti_runtime* rt = open_with_deadline(dir.path + "/pool", GetParam(), kv.layout);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table = shuffled_blocks(kDeadlineBlocks, 6), tokens(kDeadlineTokens);
  for (uint32_t i = 0; i < kDeadlineTokens; ++i) tokens[i] = static_cast<int32_t>(i * 17 + 3);
  kv.fill(tokens, table.data());
  std::vector<tutti_request> r{whole_prompt(tokens, table.data(), kDeadlineBt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, kDeadlineLayers), 0) << tutti_last_error();
  kv.zero();
  ASSERT_EQ(run(rt, TUTTI_OP_LOAD, r, kDeadlineLayers), 0) << tutti_last_error();
  EXPECT_EQ(kv.check(tokens, table.data(), 0, kDeadlineTokens), "");
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuLoadDeadline,
                         ::testing::Values(DeadlineCase{"posix", "object"}, DeadlineCase{"posix", "per-block-baseline"}),
                         [](const auto& info) {
                           return std::string(info.param.backend) +
                                  (std::string(info.param.io_mode) == "object" ? "_staged" : "_per_block");
                         });

// gpu-uring takes a load's staging whole when the load is submitted. A second load submitted
// while the first holds all of it waits there, on its submitter, for the first to land; taken
// on the loader thread (as before), that wait stopped the thread that issues the first's
// remaining layers, and both loads hung.
// (Both ways of reaping: the host's books every stream's completions while it waits for one.)
class GpuUringLoads : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuUringLoads, TwoLoadsInFlightShareTheStaging) {
  constexpr uint32_t kLayers = 4, kBt = 16, kBlocks = 40;
  Dir dir;
  DeviceKv kv(kLayers, kBlocks, kBt, 8, 128, 0);  // a chunk-layer of 64 tokens: 256 KiB
  tutti_runtime* rt = open_with({{"pool", dir.path + "/pool"},
                                 {"capacity", "256M"},
                                 {"chunk_tokens", "64"},
                                 {"backend", "gpu-uring"},
                                 {"gpu_uring_completions", GetParam()},
                                 {"staging", "2M"},  // 8 chunk-layers: one layer of A takes them all
                                 {"lookahead", "2"}},
                                kv.layout);
  ASSERT_NE(rt, nullptr);
  std::vector<int32_t> table = shuffled_blocks(kBlocks, 21);
  std::vector<int32_t> a(512), b(64);  // 8 chunks and 1
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(100 + i * 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(90000 + i * 3);
  const int32_t* ta = table.data();
  const int32_t* tb = table.data() + 32;
  kv.fill(a, ta, 1);
  kv.fill(b, tb, 2);
  std::vector<tutti_request> ra{whole_prompt(a, ta, kBt)}, rb{whole_prompt(b, tb, kBt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, ra, kLayers), 0) << tutti_last_error();
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, rb, kLayers), 0) << tutti_last_error();
  kv.zero();
  tutti_batch* la = nullptr;
  tutti_batch* lb = nullptr;
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &la), 0);
  ASSERT_EQ(tutti_batch_add(la, ra.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(la), 0) << tutti_last_error();
  ASSERT_EQ(tutti_batch_create(rt, TUTTI_OP_LOAD, &lb), 0);
  ASSERT_EQ(tutti_batch_add(lb, rb.data(), 1), 0);
  ASSERT_EQ(tutti_batch_submit(lb), 0) << tutti_last_error();  // waits for A's staging
  EXPECT_EQ(tutti_batch_wait(lb), 0) << tutti_last_error();
  EXPECT_EQ(tutti_batch_wait(la), 0) << tutti_last_error();
  tutti_batch_destroy(la);
  tutti_batch_destroy(lb);
  EXPECT_EQ(kv.check(a, ta, 0, a.size(), 1), "");
  EXPECT_EQ(kv.check(b, tb, 0, b.size(), 2), "");
  tutti_runtime_close(rt);
}

INSTANTIATE_TEST_SUITE_P(Completions, GpuUringLoads, ::testing::Values("gpu", "cpu"));

// A copy kernel gives each chunk a grid row, and a grid has at most 65535 rows: a layer of more
// chunks goes in slices (mapped-cuda without device staging moves all of a batch's at once).
TEST(GpuLaunch, MoreChunksThanAGridHasRows) {
  constexpr uint32_t kChunks = 70000, kBt = 16;
  Dir dir(true);
  DeviceKv kv(1, kChunks, kBt, 1, 8, 0);
  std::vector<int32_t> table = shuffled_blocks(kChunks, 7), tokens(size_t{kChunks} * kBt);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 + 5);
  kv.fill(tokens, table.data());
  tutti_runtime* rt = open_with({{"pool", dir.path + "/pool"},
                                 {"capacity", "1G"},
                                 {"chunk_tokens", "16"},
                                 {"backend", "dram"},
                                 {"device_staging", "0"}},
                                kv.layout);
  ASSERT_NE(rt, nullptr);
  std::vector<tutti_request> r{whole_prompt(tokens, table.data(), kBt)};
  ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, 1), 0) << tutti_last_error();
  kv.zero();
  ASSERT_EQ(run(rt, TUTTI_OP_LOAD, r, 1), 0) << tutti_last_error();
  EXPECT_EQ(kv.check(tokens, table.data(), 0, tokens.size()), "");
  tutti_runtime_close(rt);
}

// A store from HBM through the mapped pool (backend dram) whose slot's tombstone cannot be
// written must not write the slot: the record of the chunk that had it stays on disk, and a
// reopen must find that chunk's own bytes there, never the failed store's. A pool of two slots
// holds prompt A (parent); a child under the fault shim, every record write failing, stores
// prompt B over A's slots and gets TUTTI_EIO; the parent reopens and loads A.
constexpr uint32_t kTombLayers = 2, kTombBlocks = 16, kTombBt = 16, kTombTokens = 128;

tutti_runtime* open_two_slots(const std::string& pool, const tutti_kv_layout& l) {
  // 1 MiB of superblock and records, and two 64 KiB slots (64 tokens x 2 layers x 2 x 2 x 64 x 2 B).
  return open_with({{"pool", pool}, {"capacity", "1152K"}, {"chunk_tokens", "64"}, {"backend", "dram"}}, l);
}

std::vector<int32_t> tomb_tokens(int32_t which) {
  std::vector<int32_t> t(kTombTokens);
  for (uint32_t i = 0; i < kTombTokens; ++i) t[i] = static_cast<int32_t>(1000 * which + i * 7 + 1);
  return t;
}

TEST(GpuStore, AFailedTombstoneLeavesTheSlotUnwrittenThroughTheMapping) {
  DeviceKv kv(kTombLayers, kTombBlocks, kTombBt, 2, 64, 0);
  std::vector<int32_t> table_a(8), table_b(8);
  for (int32_t i = 0; i < 8; ++i) table_a[i] = i, table_b[i] = 8 + i;
  if (const char* dir = std::getenv("TUTTI_TEST_TOMBSTONE_DIR")) {  // the child, under the shim
    tutti_runtime* rt = open_two_slots(std::string(dir) + "/pool", kv.layout);
    ASSERT_NE(rt, nullptr);
    const auto tokens = tomb_tokens(2);
    kv.fill(tokens, table_b.data(), 2);
    std::vector<tutti_request> r{whole_prompt(tokens, table_b.data(), kTombBt)};
    EXPECT_EQ(run(rt, TUTTI_OP_STORE, r, kTombLayers), TUTTI_EIO) << "B's store evicts A: its tombstones fail";
    tutti_runtime_close(rt);
    return mark_child_ran(dir);
  }
  if (!faultshim_built()) GTEST_SKIP() << "the fault shim is not built";
  Dir dir(true);  // the mapped pool on tmpfs
  const std::string pool = dir.path + "/pool";
  const auto tokens = tomb_tokens(1);
  std::vector<tutti_request> r{whole_prompt(tokens, table_a.data(), kTombBt)};
  {
    tutti_runtime* rt = open_two_slots(pool, kv.layout);
    ASSERT_NE(rt, nullptr);
    kv.fill(tokens, table_a.data(), 1);
    ASSERT_EQ(run(rt, TUTTI_OP_STORE, r, kTombLayers), 0) << tutti_last_error();
    tutti_runtime_close(rt);
  }
  run_child_under_shim(dir.path, {{"TUTTI_FAULT_PLAN", "pwrite:rec:eio:1:0;pwritev:rec:eio:1:0"},
                                  {"TUTTI_TEST_TOMBSTONE_DIR", dir.path}});
  tutti_runtime* rt = open_two_slots(pool, kv.layout);
  ASSERT_NE(rt, nullptr);
  size_t hit = 0;
  ASSERT_EQ(tutti_lookup(rt, tokens.data(), tokens.size(), nullptr, 0, &hit), 0);
  EXPECT_EQ(hit, kTombTokens) << "A's records survived the failed tombstones";
  kv.zero();
  EXPECT_EQ(run(rt, TUTTI_OP_LOAD, r, kTombLayers), 0) << tutti_last_error();
  EXPECT_EQ(kv.check(tokens, table_a.data(), 0, kTombTokens, 1), "");
  tutti_runtime_close(rt);
}

// gpu-uring's read kernel cannot be told to give up: no deadline there yet, and the refusal
// says so.
TEST(Gpu, GpuUringRefusesLoadTimeout) {
  Dir dir;
  DeviceKv kv(2, 8, 16, 2, 64, 0);
  tutti_options* o = nullptr;
  tutti_options_create(&o);
  tutti_options_set(o, "pool", (dir.path + "/pool").c_str());
  tutti_options_set(o, "capacity", "16M");
  tutti_options_set(o, "backend", "gpu-uring");
  tutti_options_set(o, "load_timeout_ms", "100");
  tutti_runtime* rt = nullptr;
  ASSERT_EQ(tutti_runtime_open(o, &rt), 0) << tutti_last_error();
  tutti_options_destroy(o);
  EXPECT_EQ(tutti_runtime_register_kv(rt, &kv.layout), TUTTI_EUNSUPPORTED);
  EXPECT_NE(std::string(tutti_last_error()).find("load_timeout_ms"), std::string::npos) << tutti_last_error();
  tutti_runtime_close(rt);
}

}  // namespace

int main(int argc, char** argv) {
  std::string why = tutti::gpu::unavailable_reason();
  if (!why.empty()) {
    std::printf("SKIPPED: GPU tests need a CUDA device: %s\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
