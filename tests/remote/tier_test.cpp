// SPDX-License-Identifier: Apache-2.0
// The shared tier end to end, through the C ABI: runtimes with pools of their own stand for
// machines, a real Redis Cluster on 127.0.0.1 (six redis-server processes) for the tier. Every
// load's bytes are compared with the pattern that was stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/device.hpp"
#include "local_cluster.hpp"
#include "remote/redis_cluster.hpp"
#include "remote/value.hpp"
#include "resolver/key.hpp"
#include "tutti.h"
#include "tutti_fixture.h"

namespace tutti::remote::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kLayers = 4, kBlocks = 128, kBlockTokens = 16, kHeads = 2, kHeadDim = 64, kChunk = 64;
constexpr size_t kTokens = 256;  // four chunks

// A prompt of its own per `which`: its tokens and the pattern's seed.
std::vector<int32_t> prompt(int which) {
  std::vector<int32_t> t(kTokens);
  for (size_t i = 0; i < kTokens; ++i) t[i] = static_cast<int32_t>(1000 * which + i * 7 + 3);
  return t;
}

// A runtime with a pool of its own and a KV cache: one machine. In CUDA memory (`cuda`), the
// pattern is made and checked in a host mirror, copied over whole.
class Machine {
 public:
  Machine(const std::string& tag, std::vector<std::pair<std::string, std::string>> options, bool cuda = false)
      : cuda_(cuda) {
    char dir[256];
    EXPECT_EQ(tf_tmpdir(dir, sizeof dir, tag.c_str()), 0);
    dir_ = dir;
    tutti_kv_layout_init(&host_, kLayers, kBlocks, kBlockTokens, kHeads, kHeadDim, 2, 0);
    mem_.assign(size_t{kLayers} * 2 * kBlocks * host_.block_stride, std::byte{0});
    if (cuda_) dev_ = static_cast<std::byte*>(gpu::alloc(0, mem_.size()));
    for (uint32_t l = 0; l < kLayers; ++l) {
      const size_t k = (2 * l) * kBlocks * host_.block_stride, v = (2 * l + 1) * kBlocks * host_.block_stride;
      k_host_[l] = mem_.data() + k, v_host_[l] = mem_.data() + v;
      k_[l] = (cuda_ ? dev_ : mem_.data()) + k, v_[l] = (cuda_ ? dev_ : mem_.data()) + v;
    }
    layout_ = host_;
    host_.k_base = k_host_.data(), host_.v_base = v_host_.data();
    layout_.k_base = k_.data(), layout_.v_base = v_.data();
    if (cuda_) layout_.memory = TUTTI_MEMORY_CUDA, layout_.device = 0;
    options_ = options;
    open();
  }
  ~Machine() {
    tutti_runtime_close(rt_);
    if (dev_) gpu::free(dev_);
    tf_rmtree(dir_.c_str());
  }
  void open() {
    std::vector<std::string> owned = {"pool", dir_ + "/tutti.pool", "capacity", "64M", "chunk_tokens",
                                      std::to_string(kChunk), "partial_tokens", "0"};
    for (auto& [k, v] : options_) owned.push_back(k), owned.push_back(v);
    std::vector<const char*> pairs;
    for (auto& s : owned) pairs.push_back(s.c_str());
    pairs.push_back(nullptr);
    tutti_options* o = nullptr;
    ASSERT_EQ(tf_options(&o, pairs.data()), 0) << tutti_last_error();
    ASSERT_EQ(tf_open(&rt_, o, &layout_), 0) << tutti_last_error();
    tutti_options_destroy(o);
  }
  void reopen(std::vector<std::pair<std::string, std::string>> options) {
    tutti_runtime_close(rt_);
    rt_ = nullptr;
    options_ = std::move(options);
    open();
  }

  // The blocks prompt `which` uses here: a table of this machine's own.
  std::vector<int32_t> table(int which) const {
    std::vector<int32_t> t(kTokens / kBlockTokens);
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<int32_t>((which * 5 + i * (salt_ + 3)) % kBlocks);
    return t;
  }
  tf_prompt pattern(const std::vector<int32_t>& tokens, const std::vector<int32_t>& table, int which) const {
    return tf_prompt{tokens.data(), tokens.size(), static_cast<uint64_t>(which) + 1, nullptr, table.data()};
  }

  // Tokens [0, end) of a prompt over a block table (both must outlive the batch).
  static tutti_request request(const std::vector<int32_t>& tokens, const std::vector<int32_t>& tbl, size_t end) {
    tutti_request r{};
    r.tokens = tokens.data(), r.num_tokens = tokens.size();
    r.block_table = tbl.data(), r.num_block_ids = tbl.size();
    r.token_end = end;
    return r;
  }
  int move(tutti_op op, int which, size_t end, tutti_result* res = nullptr) {
    const auto tokens = prompt(which);
    const auto tbl = table(which);
    const tutti_request r = request(tokens, tbl, end);
    tutti_batch* b = nullptr;
    int rc = tutti_batch_create(rt_, op, &b);
    if (rc == 0) rc = tutti_batch_add(b, &r, 1);
    if (rc == 0) rc = tutti_batch_submit(b);
    const int waited = rc == 0 ? tutti_batch_wait(b) : rc;
    last_error_ = rc || waited ? tutti_last_error() : "";
    if (res) tutti_batch_result(b, 0, res);
    tutti_batch_destroy(b);
    return rc ? rc : waited;
  }
  int store(int which) {
    const auto tokens = prompt(which);
    const auto tbl = table(which);
    const tf_prompt p = pattern(tokens, tbl, which);
    tf_fill(&host_, &p, 0, kTokens);
    if (cuda_) gpu::copy_to_device(dev_, mem_.data(), mem_.size());
    return move(TUTTI_OP_STORE, which, TUTTI_TOKENS_ALL);
  }
  // Loads [0, end) of prompt `which` into blocks cleared first; the rows it says it loaded
  // must be the pattern's. Returns the tokens loaded.
  size_t load(int which, size_t end, int* status = nullptr) {
    std::fill(mem_.begin(), mem_.end(), std::byte{0});
    if (cuda_) gpu::copy_to_device(dev_, mem_.data(), mem_.size());
    tutti_result res{};
    const int rc = move(TUTTI_OP_LOAD, which, end, &res);
    if (cuda_) gpu::copy_to_host(mem_.data(), dev_, mem_.size());
    if (status) *status = rc;
    const auto tokens = prompt(which);
    const auto tbl = table(which);
    const tf_prompt p = pattern(tokens, tbl, which);
    tf_mismatch m{};
    char why[256];
    EXPECT_EQ(tf_check(&host_, &p, 0, res.tokens, 0, kLayers, &m), 0u) << tf_describe(&m, why, sizeof why);
    return res.tokens;
  }
  // A load of prompt `which` into cleared blocks that waits for layer 0 only: returns that
  // wait's code; `then` runs after it, before the batch's end is waited for. *untouched: every
  // byte of the KV cache is still zero afterwards.
  int wait_first_layer(int which, const std::function<void()>& then, bool* untouched) {
    std::fill(mem_.begin(), mem_.end(), std::byte{0});
    const auto tokens = prompt(which);
    const auto tbl = table(which);
    const tutti_request r = request(tokens, tbl, kTokens);
    tutti_batch* b = nullptr;
    EXPECT_EQ(tutti_batch_create(rt_, TUTTI_OP_LOAD, &b), 0);
    EXPECT_EQ(tutti_batch_add(b, &r, 1), 0);
    EXPECT_EQ(tutti_batch_submit(b), 0);
    const int rc = tutti_batch_wait_layer(b, 0);
    last_error_ = rc ? tutti_last_error() : "";
    then();
    tutti_batch_wait(b);
    tutti_batch_destroy(b);
    *untouched = std::all_of(mem_.begin(), mem_.end(), [](std::byte x) { return x == std::byte{0}; });
    return rc;
  }
  size_t lookup(int which) {
    const auto tokens = prompt(which);
    size_t hit = 0;
    EXPECT_EQ(tutti_lookup(rt_, tokens.data(), tokens.size(), nullptr, 0, &hit), 0);
    return hit;
  }
  tutti_stats stats() const {
    tutti_stats s{};
    s.struct_size = sizeof s;
    EXPECT_EQ(tutti_runtime_stats(rt_, &s), 0);
    return s;
  }
  void set_salt(int s) { salt_ = s; }
  const std::string& last_error() const { return last_error_; }  // of the last move that failed

 private:
  const bool cuda_;
  std::string dir_;
  tutti_kv_layout layout_{}, host_{};  // the runtime's; the host mirror's
  std::vector<std::byte> mem_;
  std::byte* dev_ = nullptr;
  std::vector<void*> k_ = std::vector<void*>(kLayers), v_ = std::vector<void*>(kLayers);
  std::vector<void*> k_host_ = std::vector<void*>(kLayers), v_host_ = std::vector<void*>(kLayers);
  std::vector<std::pair<std::string, std::string>> options_;
  tutti_runtime* rt_ = nullptr;
  int salt_ = 0;
  std::string last_error_;
};

class TierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>();
    if (!cluster_->why.empty()) GTEST_SKIP() << cluster_->why;
  }
  // Options of a runtime on the cluster. The deadline is generous (a loaded CI machine runs
  // these beside other tests), but for the failover test, which times its loads.
  std::vector<std::pair<std::string, std::string>> remote(std::vector<std::pair<std::string, std::string>> more = {},
                                                          const char* timeout_ms = "2000") {
    more.emplace_back("remote", cluster_->seeds());
    more.emplace_back("remote_timeout_ms", timeout_ms);
    return more;
  }
  // The Redis key of prompt `which`'s chunk `chunk`, layer `layer` (the fixture's shape).
  static std::string key_of(int which, size_t chunk, uint32_t layer) {
    const auto tokens = prompt(which);
    const auto keys = chunk_keys(root_key("", nullptr, 0), tokens.data(), tokens.size(), kChunk);
    Shape s;
    s.layers = kLayers, s.heads = kHeads, s.head_dim = kHeadDim, s.elem_bytes = 2, s.chunk_tokens = kChunk;
    return value_key(ValueId{keys.at(chunk), shape_fingerprint(s), layer});
  }
  std::unique_ptr<LocalCluster> cluster_;
};

template <class Pred>
bool eventually(Pred ok, std::chrono::seconds limit = 15s) {
  return LocalCluster::wait_for(ok, limit);
}

TEST_F(TierTest, StoredOnOneMachineLoadsOnAnotherAndIsPromoted) {
  Machine a("tier-a", remote()), b("tier-b", remote());
  b.set_salt(2);  // B's blocks are not A's
  ASSERT_EQ(a.store(1), 0);
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }))
      << "written through: " << a.stats().remote_written_chunks;
  EXPECT_EQ(a.lookup(1), kTokens);
  EXPECT_EQ(b.lookup(1), kTokens);  // B's pool has nothing: all four from the tier
  EXPECT_EQ(b.stats().remote_hit_chunks, 4u);
  EXPECT_EQ(b.lookup(2), 0u);       // a prompt nobody stored
  int status = -1;
  EXPECT_EQ(b.load(1, kTokens, &status), kTokens);  // bytes checked against the pattern
  EXPECT_EQ(status, 0);
  EXPECT_EQ(b.stats().remote_loaded_chunks, 4u);
  EXPECT_EQ(b.stats().bytes_read, 0u) << "B's pool had nothing to read";
  // A range that ends inside a chunk takes that chunk's value and moves its tokens alone.
  EXPECT_EQ(b.load(1, 150, &status), 150u);
  EXPECT_EQ(status, 0);
  // Promotion: B's own pool has the chunks now, and keeps them without the tier.
  ASSERT_TRUE(eventually([&] { return b.stats().remote_promoted_chunks == 4; }))
      << "promoted: " << b.stats().remote_promoted_chunks;
  b.reopen({});
  EXPECT_EQ(b.lookup(1), kTokens);
  EXPECT_EQ(b.load(1, kTokens, &status), kTokens);
  EXPECT_EQ(status, 0);
  EXPECT_GT(b.stats().bytes_read, 0u);
  EXPECT_EQ(b.stats().remote_loaded_chunks, 0u);
}

// A promotion writes the pool beside the DRAM tier, into a slot it may take from an evicted
// chunk whose extents the tier still holds: those must go, or the next load of the promoted
// chunk is served the evicted one's bytes (a checksum failure; with verify=unsafe-off, another
// prompt's KV).
TEST_F(TierTest, APromotionIntoAnEvictedSlotIsNotServedTheDramTiersOldBytes) {
  for (const char* verify : {"on", "unsafe-off"}) {
    SCOPED_TRACE(verify);
    Machine a("tier-a", remote());
    // B's pool holds four chunks (one prompt); its DRAM tier holds more than the pool. What B
    // stores once stays out of the cluster (remote_admit=twice), so a lookup sees B's pool.
    Machine b("tier-b", remote({{"capacity", "1536K"},
                                {"dram_tier", "4M"},
                                {"verify", verify},
                                {"remote_admit", "twice"}}));
    b.set_salt(2);
    ASSERT_EQ(b.store(3), 0) << b.last_error();  // fills B's pool and its tier
    ASSERT_EQ(a.store(1), 0) << a.last_error();
    ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks >= 4; }));
    int status = -1;
    EXPECT_EQ(b.load(1, kTokens, &status), kTokens);  // from the cluster
    EXPECT_EQ(status, 0);
    ASSERT_TRUE(eventually([&] { return b.stats().remote_promoted_chunks == 4; }))
        << "promoted: " << b.stats().remote_promoted_chunks;
    EXPECT_EQ(b.lookup(3), 0u) << "the promotion took prompt 3's slots";
    const uint64_t remote_loads = b.stats().remote_loaded_chunks;
    EXPECT_EQ(b.load(1, kTokens, &status), kTokens);  // from B's own pool: bytes checked
    EXPECT_EQ(status, 0) << b.last_error();
    EXPECT_EQ(b.stats().remote_loaded_chunks, remote_loads) << "served by B's pool, not the cluster";
    EXPECT_EQ(b.stats().failed_chunks, 0u);
    EXPECT_EQ(b.lookup(1), kTokens) << "nothing was discarded as damaged";
  }
}

// The same into CUDA memory (the GPU machine runs it; elsewhere it skips).
TEST_F(TierTest, LoadsIntoCudaMemory) {
  if (const std::string why = gpu::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  Machine a("tier-a", remote(), true), b("tier-b", remote({{"remote_promote", "0"}}), true);
  b.set_salt(2);
  ASSERT_EQ(a.store(1), 0);
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }));
  EXPECT_EQ(b.lookup(1), kTokens);
  int status = -1;
  EXPECT_EQ(b.load(1, kTokens, &status), kTokens);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(b.load(1, 150, &status), 150u);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(b.stats().remote_loaded_chunks, 4u + 3u);  // 150 tokens: three chunks
}

TEST_F(TierTest, AdmissionTwiceWritesWhatALookupFoundAgain) {
  Machine a("tier-a", remote({{"remote_admit", "twice"}, {"remote_min_tokens", "200"}}));
  Machine b("tier-b", remote());
  ASSERT_EQ(a.store(1), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(a.stats().remote_written_chunks, 0u) << "seen once: not admitted";
  EXPECT_EQ(b.lookup(1), 0u);
  EXPECT_EQ(a.lookup(1), kTokens);  // the second sighting
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }));
  EXPECT_EQ(b.lookup(1), kTokens);
  // A prefix shorter than remote_min_tokens stays local, however often it is seen.
  ASSERT_EQ(a.move(TUTTI_OP_STORE, 3, 128), 0);
  EXPECT_EQ(a.lookup(3), 128u);
  EXPECT_EQ(a.lookup(3), 128u);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(a.stats().remote_written_chunks, 4u);
}

// Values that are not what their key names are misses, never bytes handed back: a payload with
// a flipped byte, another chunk's value under this chunk's key, and a value that is no tutti's.
TEST_F(TierTest, CorruptAndForeignValuesAreMisses) {
  Machine a("tier-a", remote({{"remote_promote", "0"}})), b("tier-b", remote({{"remote_promote", "0"}}));
  ASSERT_EQ(a.store(1), 0);
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }));
  Cluster c(parse_seeds(cluster_->seeds()), 2000ms);
  auto get = [&](const std::string& k) { return std::string(c.run(Command{{"GET", k}, k}).str()); };
  auto set = [&](const std::string& k, const std::string& v) {
    ASSERT_EQ(c.run(Command{{"SET", k, v}, k}).str(), "OK");
  };
  // Chunk 3, layer 1: one payload byte flipped.
  std::string v = get(key_of(1, 3, 1));
  ASSERT_EQ(v.size(), kValueHeaderBytes + 2 * kChunk * kHeads * kHeadDim * 2);
  v[kValueHeaderBytes + 1000] ^= 0x10;
  set(key_of(1, 3, 1), v);
  int status = -1;
  EXPECT_EQ(b.load(1, kTokens, &status), 3 * kChunk);
  EXPECT_EQ(status, TUTTI_ENOENT);
  EXPECT_EQ(b.stats().remote_rejected, 1u);
  // Chunk 1, layer 3: chunk 0's layer 3, a sound value of another chunk.
  set(key_of(1, 1, 3), get(key_of(1, 0, 3)));
  EXPECT_EQ(b.load(1, kTokens, &status), 1 * kChunk);
  EXPECT_EQ(status, TUTTI_ENOENT);
  EXPECT_EQ(b.stats().remote_rejected, 3u);  // chunk 3's again, and chunk 1's
  // Chunk 0, layer 0: not a tutti value at all.
  set(key_of(1, 0, 0), "hello");
  EXPECT_EQ(b.load(1, kTokens, &status), 0u);
  EXPECT_EQ(status, TUTTI_ENOENT);
  EXPECT_EQ(b.stats().remote_rejected, 6u);
  // A's pool is the truth for A: its own loads never ask the tier.
  EXPECT_EQ(a.load(1, kTokens, &status), kTokens);
  EXPECT_EQ(status, 0);
}

// A chunk stored while the cluster does not answer goes through once it answers again: the
// write-throughs wait out the tier's rest, and one the cluster refused goes again.
TEST_F(TierTest, StoredDuringAStallIsWrittenThroughAfterIt) {
  Machine a("tier-a", remote({}, "300")), b("tier-b", remote({{"remote_promote", "0"}}));
  cluster_->pause_all();
  ASSERT_EQ(a.store(1), 0);  // the pool takes it at once, whatever the tier does
  ASSERT_TRUE(eventually([&] { return a.stats().remote_errors > 0; })) << "no write-through timed out";
  EXPECT_EQ(a.stats().remote_written_chunks, 0u);  // the tier rests now
  cluster_->resume_all();
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }))
      << a.stats().remote_written_chunks << " of 4 chunks written through after the stall";
  int status = -1;
  EXPECT_EQ(b.load(1, kTokens, &status), kTokens);
  EXPECT_EQ(status, 0);
}

// A load whose remote values come after load_timeout_ms gives up, and the values that arrive
// later (within remote_timeout_ms) never reach the blocks.
TEST_F(TierTest, ValuesArrivingAfterALoadGaveUpStayOutOfTheBlocks) {
  Machine a("tier-a", remote()), b("tier-b", remote({{"remote_promote", "0"}, {"load_timeout_ms", "300"}}, "5000"));
  b.set_salt(1);
  ASSERT_EQ(a.store(1), 0);
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4; }));
  cluster_->pause_all();
  bool untouched = false;
  const int rc = b.wait_first_layer(1, [&] { cluster_->resume_all(); }, &untouched);
  EXPECT_EQ(rc, TUTTI_EIO) << b.last_error();
  EXPECT_NE(b.last_error().find("load_timeout_ms"), std::string::npos) << b.last_error();
  EXPECT_TRUE(untouched) << "bytes of the remote values reached the blocks after the load gave up";
  EXPECT_EQ(b.load(1, kTokens), kTokens);  // the cluster answers again: the next load lands whole
}

std::mutex g_log_mu;
std::vector<std::string> g_warnings;

// Redis gone entirely: each runtime keeps working on its own pool, and says why once.
TEST_F(TierTest, WithoutTheClusterThePoolServesAlone) {
  tutti_set_log_callback(
      [](int level, const char* msg, void*) {
        std::lock_guard lock(g_log_mu);
        if (level <= TUTTI_LOG_WARN) g_warnings.emplace_back(msg);
      },
      nullptr, TUTTI_LOG_WARN);
  cluster_->kill_all();
  const auto t0 = std::chrono::steady_clock::now();
  Machine a("tier-a", remote());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_EQ(a.store(1), 0);
  for (int i = 0; i < 20; ++i) {  // a lookup does not wait for the cluster while it rests
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(a.lookup(1), kTokens);
    EXPECT_EQ(a.lookup(2), 0u);
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 2s);
  }
  int status = -1;
  EXPECT_EQ(a.load(1, kTokens, &status), kTokens);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(a.load(2, kTokens, &status), 0u);  // not stored: a miss, as without a tier
  EXPECT_EQ(status, TUTTI_ENOENT);
  EXPECT_GT(a.stats().remote_errors, 0u);
  tutti_set_log_callback(nullptr, nullptr, 0);
  std::lock_guard lock(g_log_mu);
  size_t said = 0;
  for (const auto& w : g_warnings) said += w.find("does not answer") != std::string::npos;
  EXPECT_EQ(said, 1u) << "one warning for the outage";
}

// A master killed while one machine stores and another loads: every load's bytes are right
// (its chunks loaded, or misses), no call runs past its deadline by much, once a replica took
// over a prompt stored since loads whole, and every prompt whose values the cluster still holds
// loads whole again. (A promoted replica may lack values: Redis replicates asynchronously, and
// those are misses, as they must be.)
TEST_F(TierTest, AMasterKilledDuringLoadsAndStores) {
  Machine a("tier-a", remote({}, "500")), b("tier-b", remote({{"remote_promote", "0"}}, "500"));
  b.set_salt(1);
  constexpr int kPrompts = 6;
  for (int p = 0; p < kPrompts; ++p) ASSERT_EQ(a.store(p), 0);
  ASSERT_TRUE(eventually([&] { return a.stats().remote_written_chunks == 4 * kPrompts; }));
  ASSERT_TRUE(eventually([&] { return cluster_->replicas_in_sync(); }, 30s)) << "a replica never caught up";
  for (int p = 0; p < kPrompts; ++p) EXPECT_EQ(b.load(p, kTokens), kTokens);
  std::atomic<bool> stop{false};
  std::thread storer([&] {  // A goes on storing new prompts meanwhile, whatever the tier does
    for (int p = 100; !stop; ++p) {
      EXPECT_EQ(a.store(p), 0);
      std::this_thread::sleep_for(20ms);
    }
  });
  cluster_->kill(0);
  size_t partial = 0, loads = 0;
  std::string last_short;  // why the last short load was short
  std::vector<bool> whole(kPrompts);  // loaded whole since the kill
  const auto end = std::chrono::steady_clock::now() + 60s;  // a loaded CI machine elects slowly
  while (std::count(whole.begin(), whole.end(), true) < kPrompts && std::chrono::steady_clock::now() < end) {
    for (int p = 0; p < kPrompts; ++p) {
      const auto t0 = std::chrono::steady_clock::now();
      const size_t got = b.load(p, kTokens);  // its bytes checked, whatever it got
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "a load ran past its deadlines";
      ++loads;
      if (got < kTokens) ++partial, last_short = b.last_error();
      else whole[p] = true;
    }
  }
  stop = true;
  storer.join();
  std::printf("%zu loads after the kill, %zu of them short of the prompt\n", loads, partial);
  // The tier serves again: a prompt stored now loads whole on B.
  ASSERT_EQ(a.store(50), 0);
  EXPECT_TRUE(eventually([&] { return b.load(50, kTokens) == kTokens; }, 30s))
      << "a prompt stored after the failover never loaded whole; last: " << b.last_error() << "\n"
      << cluster_->report();
  // A prompt that never loaded whole again is tutti's failure only if the cluster holds its values.
  Cluster c(parse_seeds(cluster_->seeds()), 2000ms);
  for (int p = 0; p < kPrompts; ++p) {
    if (whole[p]) continue;
    size_t held = 0, lost = 0;
    std::string unanswered;
    for (size_t chunk = 0; chunk < kTokens / kChunk; ++chunk)
      for (uint32_t l = 0; l < kLayers; ++l) {
        const std::string k = key_of(p, chunk, l);
        const Reply r = c.run(Command{{"EXISTS", k}, k});
        if (r.type() != Reply::Type::kInteger) unanswered = r.str();
        else (r.integer() == 1 ? held : lost)++;
      }
    if (lost && unanswered.empty())
      std::printf("prompt %d: %zu of its %zu values were lost in the failover; its loads are misses\n", p, lost, held + lost);
    else
      ADD_FAILURE() << "prompt " << p << " never loaded whole again in 60 s, though the cluster "
                    << (unanswered.empty() ? "holds all its values" : "does not answer: " + unanswered)
                    << "; why the last short load was short: " << last_short << "\n"
                    << cluster_->report();
  }
}

}  // namespace
}  // namespace tutti::remote::testing
