// SPDX-License-Identifier: Apache-2.0
// The plan register_kv settles: refusals before any pool file exists, what auto becomes for the
// pool it opened, and the layer paths.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "binding/kv_binding.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "runtime/plan.hpp"

namespace tutti {
namespace {

constexpr uint32_t kBlocks = 8;

// A host KV cache: 32 KiB blocks, direct-capable unless `misaligned`.
struct HostKv {
  AlignedBuffer mem{2 * kBlocks * 32768 + 4096};
  void* k[1];
  tutti_kv_layout l;
  explicit HostKv(bool misaligned = false) {
    tutti_kv_layout_init(&l, 1, kBlocks, 16, 8, 128, 2, 0);
    k[0] = mem.data() + (misaligned ? 64 : 0);
    l.k_base = k;
    l.v_offset = kBlocks * l.block_stride;
  }
  KvBinding binding() const { return KvBinding(l, 256); }
};

int code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return 0;
}

TEST(Plan, RefusesBeforeThePoolExists) {
  HostKv kv;
  Config c;
  c.backend = BackendKind::kGpuUring;  // loads into CUDA memory
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), TUTTI_EUNSUPPORTED);
  c.backend = BackendKind::kPassthru;
  c.io_mode = IoMode::kPerBlockBaseline;  // passthru moves whole extents
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), TUTTI_EUNSUPPORTED);
  c.backend = BackendKind::kUring;
  c.io_mode = IoMode::kObject;
  c.dram_tier = 1 << 20;
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), 0);
  c.backend = BackendKind::kDram;  // the tier sits in front of CPU producers only
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), TUTTI_EUNSUPPORTED);
}

// direct_to_blocks=on with blocks that cannot take it: a named CPU backend is refused at once;
// auto waits until it is settled (passthru, which stages, would take it).
TEST(Plan, DirectOnIsCheckedOnceTheBackendIsKnown) {
  HostKv kv(/*misaligned=*/true);
  Config c;
  c.direct = DirectMode::kOn;
  c.backend = BackendKind::kPosix;
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), TUTTI_EINVAL);
  c.backend = BackendKind::kPassthru;
  EXPECT_EQ(code_of([&] { make_plan(c, c.backend, kv.binding()); }), 0);
  c.backend = BackendKind::kAuto;
  EXPECT_EQ(code_of([&] { make_plan(c, BackendKind::kUring, kv.binding()); }), 0);
}

class PlanPool : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st;
    if (::stat("/dev/shm", &st) != 0) GTEST_SKIP() << "no /dev/shm here";
    char tmpl[] = "/dev/shm/tutti-plan-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      EXPECT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
    }
  }
  std::unique_ptr<Pool> open(const KvBinding& kv) {
    PoolOptions o;
    o.uris.push_back(PoolUri{dir_ + "/p", 0});
    o.capacity = 16ull << 20;
    return Pool::open(o, kv.shape());
  }
  static BackendConfig fds(const Pool& p) {
    BackendConfig bc;
    for (size_t i = 0; i < p.files(); ++i) bc.fds.push_back(p.file(i).fd.get());
    return bc;
  }
  std::string dir_;
};

// A pool on tmpfs moves fastest through its mapping: auto takes dram, with the reason; the
// per-block baseline and a DRAM tier need a CPU backend, and get posix.
TEST_F(PlanPool, AutoOnTmpfsIsDramWithTheReason) {
  HostKv kv;
  const KvBinding b = kv.binding();
  Config c;
  Plan plan = make_plan(c, BackendKind::kUring, b);
  auto pool = open(b);
  settle_plan(plan, c, b, *pool, fds(*pool));
  EXPECT_EQ(plan.backend, BackendKind::kDram);
  EXPECT_NE(plan.why.find("tmpfs"), std::string::npos) << plan.why;
  EXPECT_EQ(plan.load, PathKind::kHost);
  EXPECT_EQ(plan.store, PathKind::kHost);
  EXPECT_TRUE(plan.direct);
  EXPECT_FALSE(plan.uring_stores);
}

TEST_F(PlanPool, AutoOnTmpfsIsPosixForTheBaselineAndUnderATier) {
  HostKv kv;
  const KvBinding b = kv.binding();
  auto pool = open(b);
  for (int tier = 0; tier < 2; ++tier) {
    Config c;
    if (tier) c.dram_tier = 64ull << 20;
    else c.io_mode = IoMode::kPerBlockBaseline;
    Plan plan = make_plan(c, BackendKind::kUring, b);
    settle_plan(plan, c, b, *pool, fds(*pool));
    EXPECT_EQ(plan.backend, BackendKind::kPosix) << (tier ? "dram_tier" : "per-block-baseline");
    EXPECT_NE(plan.why.find("tmpfs"), std::string::npos) << plan.why;
  }
}

TEST_F(PlanPool, NamedBackendsKeepTheirNameAndPaths) {
  HostKv kv;
  const KvBinding b = kv.binding();
  Config c;
  c.backend = BackendKind::kUring;
  c.io_mode = IoMode::kPerBlockBaseline;
  Plan plan = make_plan(c, c.backend, b);
  auto pool = open(b);
  settle_plan(plan, c, b, *pool, fds(*pool));
  EXPECT_EQ(plan.backend, BackendKind::kUring);
  EXPECT_TRUE(plan.why.empty());
  EXPECT_EQ(plan.load, PathKind::kHostPerBlock);
  EXPECT_FALSE(plan.direct);  // the baseline always stages
}

TEST_F(PlanPool, AutoWithDirectOnAndMisalignedBlocksIsRefusedOnceSettled) {
  HostKv kv(/*misaligned=*/true);
  const KvBinding b = kv.binding();
  Config c;
  c.direct = DirectMode::kOn;
  Plan plan = make_plan(c, BackendKind::kUring, b);
  auto pool = open(b);
  EXPECT_EQ(code_of([&] { settle_plan(plan, c, b, *pool, fds(*pool)); }), TUTTI_EINVAL);
}

}  // namespace
}  // namespace tutti
