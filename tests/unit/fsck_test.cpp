// SPDX-License-Identifier: Apache-2.0
// tutti fsck --repair on two records of one chunk: the newest whose data verifies stays.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "common/checksum.hpp"
#include "common/fd.hpp"
#include "pool/pool.hpp"

#ifndef TUTTI_CLI_PATH
#define TUTTI_CLI_PATH ""
#endif

namespace tutti {
namespace {

int run(const std::string& cmd) {
  const int st = std::system((cmd + " >/dev/null").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Slot 0 holds the chunk (data and record); slot 4 a newer record of the same chunk whose data
// is not there (a copy cut short). Open would take the newer record; repair must keep slot 0.
TEST(Fsck, RepairKeepsTheNewestDuplicateWhoseDataVerifies) {
  char tmpl[] = "/tmp/tutti-fsck-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/pool";
  const Shape shape{2, 2, 64, 2, 32};
  const Key key{41, 42};
  {
    PoolOptions o;
    o.uris.push_back(PoolUri{path, 0});
    o.capacity = 16ull << 20;
    auto p = Pool::open(o, shape);
    AlignedBuffer layer(shape.layer_bytes());
    std::vector<uint64_t> sums;
    for (uint32_t l = 0; l < shape.layers; ++l) {
      for (size_t i = 0; i < shape.layer_bytes(); ++i) layer.data()[i] = static_cast<std::byte>(i * 31 + l);
      p->write_layer(0, l, layer.data());
      sums.push_back(layer_sum(layer.data(), shape.layer_bytes()));
    }
    p->write_records(std::vector<Record>{{0, 1, key, sums}, {4, 9, key, sums}});
  }
  const std::string cli = TUTTI_CLI_PATH;
  ASSERT_FALSE(cli.empty());
  EXPECT_EQ(run(cli + " fsck " + path), 4);
  EXPECT_EQ(run(cli + " fsck --repair " + path), 0);
  EXPECT_EQ(run(cli + " fsck " + path), 0);
  auto p = Pool::open_existing({PoolUri{path, 0}});
  const auto records = p->read_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].slot, 0u);
  EXPECT_EQ(records[0].key, key);
  p.reset();
  EXPECT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace tutti
