// SPDX-License-Identifier: Apache-2.0
// URIs, sizes and options.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <algorithm>

#include "common/error.hpp"
#include "common/units.hpp"
#include "resolver/uri.hpp"
#include "runtime/config.hpp"

namespace tutti {

TEST(Units, Sizes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64G"), 64ull << 30);
  EXPECT_EQ(parse_size("512m"), 512ull << 20);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("G"));
  EXPECT_FALSE(parse_size("12x"));
  EXPECT_FALSE(parse_size("99999999999999999999T"));
}

TEST(Uri, Forms) {
  auto u = parse_pool_uri("file:///nvme0/kv.pool?size=64G");
  EXPECT_EQ(u.path, "/nvme0/kv.pool");
  EXPECT_EQ(u.size, 64ull << 30);
  EXPECT_EQ(parse_pool_uri("rel/pool").path, "rel/pool");
  EXPECT_EQ(parse_pool_uri("/tmp").path, "/tmp/tutti.pool");  // a directory
  EXPECT_THROW(parse_pool_uri("file://relative"), Error);
  EXPECT_THROW(parse_pool_uri("s3://bucket/x"), Error);
  EXPECT_THROW(parse_pool_uri("file:///x?size=lots"), Error);
  EXPECT_THROW(parse_pool_uri("file:///x?colour=red"), Error);
  EXPECT_THROW(parse_pool_uri(""), Error);
}

TEST(Options, DefaultsEnvironmentAndOverrides) {
  ::setenv("TUTTI_CHUNK_TOKENS", "512", 1);
  ::setenv("TUTTI_POOL", "/a/p0,/b/p1", 1);
  Options o;
  Config c = o.resolve();
  EXPECT_EQ(c.chunk_tokens, 512u);
  ASSERT_EQ(c.pools.size(), 2u);
  EXPECT_EQ(c.pools[1].path, "/b/p1");
  EXPECT_EQ(c.lookahead, 4u);
  EXPECT_FALSE(c.high_load_priority);
  o.set("load_priority", "high");
  EXPECT_TRUE(o.resolve().high_load_priority);
  EXPECT_TRUE(c.gpu_completions);
  o.set("gpu_uring_completions", "cpu");
  EXPECT_FALSE(o.resolve().gpu_completions);
  o.set("chunk_tokens", "128");
  o.set("pool", "/c/p");
  c = o.resolve();
  EXPECT_EQ(c.chunk_tokens, 128u);
  ASSERT_EQ(c.pools.size(), 1u);
  ::unsetenv("TUTTI_CHUNK_TOKENS");
  ::unsetenv("TUTTI_POOL");
}

// threads=auto leaves four of the CPUs this process may use to the engine, 4 to 16 in all.
TEST(Options, AutoThreadsLeaveTheEngineCores) {
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  const long expect = std::clamp<long>(CPU_COUNT(&set) - 4, 4, 16);
  Options o;
  EXPECT_EQ(o.resolve().threads, static_cast<uint32_t>(expect));
  o.set("threads", "3");
  EXPECT_EQ(o.resolve().threads, 3u);
  o.set("async_reads", "on");
  EXPECT_EQ(o.resolve().async_reads, std::optional<bool>(true));
  EXPECT_THROW(o.set("async_reads", "sometimes"), Error);
}

TEST(Options, BadInputIsRefusedAtSet) {
  Options o;
  EXPECT_THROW(o.set("colour", "red"), Error);
  EXPECT_THROW(o.set("backend", "magic"), Error);
  EXPECT_THROW(o.set("capacity", "-1"), Error);
  EXPECT_THROW(o.set("verify", "maybe"), Error);
  EXPECT_THROW(o.set("load_priority", "urgent"), Error);
  EXPECT_THROW(o.set("gpu_uring_completions", "both"), Error);
  ::setenv("TUTTI_RINGS", "zero", 1);
  try {
    o.resolve();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TUTTI_RINGS"), std::string::npos);
  }
  ::unsetenv("TUTTI_RINGS");
}

}  // namespace tutti
