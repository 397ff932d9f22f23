// SPDX-License-Identifier: Apache-2.0
// The Redis Cluster client against a real cluster of redis-server processes on 127.0.0.1:
// routing by hash slot, pipelining, MOVED and ASK, a master killed (failover), every node killed
// (errors by the deadline, never a hang). Skips (exit 77) where redis-server is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "local_cluster.hpp"
#include "remote/redis_cluster.hpp"

namespace tutti::remote {
namespace {

using testing::LocalCluster;
using testing::node_command;
using namespace std::chrono_literals;

// A value with every byte value in it, NULs included, different per key.
std::string value_of(size_t i, size_t bytes = 3000) {
  std::string v(bytes, '\0');
  for (size_t k = 0; k < bytes; ++k) v[k] = static_cast<char>((k * 131 + i * 7919) & 0xFF);
  return v;
}

TEST(RedisSlots, Crc16AndHashTagsAsRedisClusterDefinesThem) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // CRC16/XMODEM's check value
  EXPECT_EQ(key_slot("foo"), 12182);      // CLUSTER KEYSLOT foo
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16("foo{}{bar}") % kSlots);  // an empty tag: the whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), crc16("{bar") % kSlots);      // the first { to the first }
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
}

TEST(RedisSlots, SeedsParseOrAreRefused) {
  auto s = parse_seeds("redis://127.0.0.1:7000,localhost:7001,[::1]:7002");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], (Endpoint{"127.0.0.1", 7000}));
  EXPECT_EQ(s[1], (Endpoint{"localhost", 7001}));
  EXPECT_EQ(s[2], (Endpoint{"::1", 7002}));
  for (const char* bad : {"", "redis://", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":7000", "a:1,,b:2", "h:12x"}) {
    try {
      parse_seeds(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), TUTTI_EINVAL) << bad;
    }
  }
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>();
    if (!cluster_->why.empty()) GTEST_SKIP() << cluster_->why;
  }
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(RedisClusterTest, PipelinedWritesAndReadsReachEverySlotsNode) {
  Cluster c(parse_seeds(cluster_->seeds()), 2000ms);
  EXPECT_EQ(c.masters().size(), 3u);
  const size_t n = 600;
  std::vector<std::string> keys, values;
  for (size_t i = 0; i < n; ++i) {
    keys.push_back("tutti:test:" + std::to_string(i));
    values.push_back(value_of(i));
  }
  std::vector<Command> sets, gets;
  for (size_t i = 0; i < n; ++i) {
    sets.push_back({{"SET", keys[i], values[i]}, keys[i]});
    gets.push_back({{"GET", keys[i]}, keys[i]});
  }
  for (const auto& r : c.run(sets)) ASSERT_EQ(r.str(), "OK");
  auto got = c.run(gets);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i].type(), Reply::Type::kString) << got[i].str();
    ASSERT_EQ(got[i].str(), values[i]) << keys[i];
  }
  // The keys really are spread: every master holds some.
  for (const auto& m : c.masters()) EXPECT_NE(node_command(m, "DBSIZE"), "0") << m.describe();
  EXPECT_EQ(c.run(Command{{"GET", "tutti:test:absent"}, "tutti:test:absent"}).type(), Reply::Type::kNil);
  // Redis's own errors come back as they are.
  auto wrong = c.run(Command{{"LPUSH", keys[0], "x"}, keys[0]});
  EXPECT_EQ(wrong.type(), Reply::Type::kError);
  EXPECT_NE(wrong.str().find("WRONGTYPE"), std::string::npos);
  EXPECT_EQ(c.stats().failures, 0u);
}

// Slots resharded under a client that knew the old map: MOVED is followed, and the map learnt.
TEST_F(RedisClusterTest, MovedSlotsAreFollowed) {
  Cluster c(parse_seeds(cluster_->seeds()), 5000ms);
  std::vector<std::string> keys, values;
  std::vector<Command> sets, gets;
  for (size_t i = 0; i < 400; ++i) {
    keys.push_back("moved:" + std::to_string(i));
    values.push_back(value_of(i, 100));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    sets.push_back({{"SET", keys[i], values[i]}, keys[i]});
    gets.push_back({{"GET", keys[i]}, keys[i]});
  }
  for (const auto& r : c.run(sets)) ASSERT_EQ(r.str(), "OK");
  auto masters = c.masters();
  ASSERT_GE(masters.size(), 2u);
  const std::string from = node_command(masters[0], "CLUSTER MYID"), to = node_command(masters[1], "CLUSTER MYID");
  std::string cmd = cluster_->cli() + " --cluster reshard " + masters[0].describe() + " --cluster-from " + from +
                    " --cluster-to " + to + " --cluster-slots 3000 --cluster-yes >" + cluster_->dir() +
                    "/reshard.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << cluster_->dir() << "/reshard.log";
  const uint64_t before = c.stats().redirects;
  auto got = c.run(gets);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(got[i].str(), values[i]) << keys[i];
  EXPECT_GT(c.stats().redirects, before);
  const uint64_t learnt = c.stats().redirects;
  got = c.run(gets);  // the new map is known now
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(got[i].str(), values[i]);
  EXPECT_EQ(c.stats().redirects, learnt);
}

// A slot being migrated: a key the old node no longer has is answered with ASK, and the client
// asks the new node (ASKING first) without changing its map.
TEST_F(RedisClusterTest, AskRedirectsDuringAMigration) {
  Cluster c(parse_seeds(cluster_->seeds()), 2000ms);
  const std::string key = "ask:key";
  const unsigned slot = key_slot(key);
  auto masters = c.masters();
  Endpoint source;
  for (const auto& m : masters)
    if (node_command(m, "CLUSTER COUNTKEYSINSLOT " + std::to_string(slot)) == "0" &&
        node_command(m, "SET " + key + " probe").rfind("MOVED", 0) != 0) {
      source = m;
      node_command(m, "DEL " + key);
    }
  ASSERT_NE(source.port, 0) << "no master owns slot " << slot;
  Endpoint target = masters[0] == source ? masters[1] : masters[0];
  const std::string source_id = node_command(source, "CLUSTER MYID"), target_id = node_command(target, "CLUSTER MYID");
  ASSERT_EQ(node_command(target, "CLUSTER SETSLOT " + std::to_string(slot) + " IMPORTING " + source_id), "OK");
  ASSERT_EQ(node_command(source, "CLUSTER SETSLOT " + std::to_string(slot) + " MIGRATING " + target_id), "OK");
  const std::string value = value_of(1, 500);
  EXPECT_EQ(c.run(Command{{"SET", key, value}, key}).str(), "OK");
  EXPECT_GE(c.stats().redirects, 1u);
  EXPECT_EQ(node_command(target, "CLUSTER COUNTKEYSINSLOT " + std::to_string(slot)), "1");  // it went to the target
  auto got = c.run(Command{{"GET", key}, key});
  EXPECT_EQ(got.str(), value);
  EXPECT_GE(c.stats().redirects, 2u);
}

// A master killed while the client reads and writes: every reply is the value written, a miss,
// or an error by the deadline, never other bytes; a replica takes over and answers again. A
// miss is possible even after WAIT: a replica that was re-syncing with its master when the
// master died is promoted with what it had (Redis replication is asynchronous), and the tier
// then treats those chunks as misses.
TEST_F(RedisClusterTest, AKilledMasterFailsOverAndNothingHangs) {
  const auto timeout = 500ms;
  Cluster c(parse_seeds(cluster_->seeds()), timeout);
  std::vector<std::string> keys, values;
  std::vector<Command> sets, gets;
  for (size_t i = 0; i < 300; ++i) {
    keys.push_back("fo:" + std::to_string(i));
    values.push_back(value_of(i, 200));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    sets.push_back({{"SET", keys[i], values[i]}, keys[i]});
    gets.push_back({{"GET", keys[i]}, keys[i]});
  }
  for (const auto& r : c.run(sets)) ASSERT_EQ(r.str(), "OK");
  // Every write reached a replica: WAIT on the connections that wrote, routed as the writes were
  // (right after the cluster's creation a replica may still be syncing: WAIT then answers 0).
  ASSERT_TRUE(LocalCluster::wait_for([&] {
    std::vector<Command> waits;
    for (const auto& k : keys) waits.push_back({{"WAIT", "1", "400"}, k});
    for (const auto& r : c.run(waits))
      if (r.integer() != 1) return false;
    return true;
  })) << "no replica acknowledged the writes";
  const Endpoint victim = c.masters()[0];
  cluster_->kill(cluster_->index_of(victim));
  size_t errors = 0, right = 0, misses = 0;
  bool all_back = false;
  std::string last_error;
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!all_back && std::chrono::steady_clock::now() < end) {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = c.run(gets);
    // Never a hang: the deadline ends every call (one round trip of slack).
    EXPECT_LT(std::chrono::steady_clock::now() - t0, timeout + 1500ms);
    all_back = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (got[i].type() == Reply::Type::kNil) {
        ++misses;
      } else if (got[i].ok()) {
        ASSERT_EQ(got[i].str(), values[i]) << keys[i];  // right, a miss, or an error: never other bytes
        ++right;
      } else {
        ++errors;
        all_back = false;
        last_error = got[i].str();
      }
    }
  }
  EXPECT_TRUE(all_back) << "no replica took over within 30 s; last error: " << last_error;
  EXPECT_GT(right, 0u);
  if (misses) std::printf("%zu reads were misses after the failover (keys the promoted replica lacked)\n", misses);
  EXPECT_GT(errors, 0u) << "the killed master's keys were never missing?";
  for (const auto& m : c.masters()) EXPECT_FALSE(m == victim);
  EXPECT_GT(c.stats().failures, 0u);
  EXPECT_GT(c.stats().refreshes, 1u);
}

// Every node gone: errors by the deadline; a new client cannot start (EIO), in bounded time.
TEST_F(RedisClusterTest, AClusterThatIsGoneFailsByTheDeadline) {
  const auto timeout = 300ms;
  Cluster c(parse_seeds(cluster_->seeds()), timeout);
  cluster_->kill_all();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.run(Command{{"GET", "gone"}, "gone"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, timeout + 1500ms);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.str().find("no answer within"), std::string::npos) << r.str();
  try {
    Cluster again(parse_seeds(cluster_->seeds()), timeout);
    ADD_FAILURE() << "a client started without a cluster";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EIO) << e.what();
  }
}

}  // namespace
}  // namespace tutti::remote
