// Pool files: creation, fingerprint checks, commit records and their recovery.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "pool/pool.hpp"

namespace tutti {

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tutti-pool-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { EXPECT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }
  PoolOptions opts(int files = 1) {
    PoolOptions o;
    for (int i = 0; i < files; ++i) o.uris.push_back(PoolUri{dir_ + "/p" + std::to_string(i), 0});
    o.capacity = 16ull << 20;
    return o;
  }
  std::string dir_;
  Shape shape_{2, 2, 64, 2, 32};
};

TEST_F(PoolTest, CreateThenReopenFindsRecords) {
  Uuid uuid;
  uint64_t slots;
  {
    auto p = Pool::open(opts(2), shape_);
    EXPECT_TRUE(p->created());
    slots = p->geometry().slots();
    ASSERT_GT(slots, 2u);
    uuid = p->uuid();
    EXPECT_TRUE(p->read_records().empty());
    p->write_records(std::vector<Record>{{1, 3, Key{7, 8}, {11, 12}}, {2, 4, Key{9, 10}, {13, 14}}});
  }
  auto p = Pool::open(opts(2), shape_);
  EXPECT_FALSE(p->created());
  EXPECT_EQ(p->uuid(), uuid);
  EXPECT_EQ(p->geometry().slots(), slots);
  auto rs = p->read_records();
  ASSERT_EQ(rs.size(), 2u);
  std::sort(rs.begin(), rs.end(), [](const Record& a, const Record& b) { return a.slot < b.slot; });
  EXPECT_EQ(rs[0].key, (Key{7, 8}));
  EXPECT_EQ(rs[0].layer_sums, (std::vector<uint64_t>{11, 12}));
  p->write_tombstones(std::vector<uint64_t>{1});
  EXPECT_EQ(p->read_records().size(), 1u);
}

TEST_F(PoolTest, OtherShapeIsRefused) {
  Pool::open(opts(), shape_);
  Shape other = shape_;
  other.heads = 4;
  try {
    Pool::open(opts(), other);
    FAIL() << "opened with another shape";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_ELAYOUT);
    EXPECT_NE(std::string(e.what()).find("created for"), std::string::npos);
  }
}

TEST_F(PoolTest, TornRecordIsFree) {
  uint64_t off;
  {
    auto p = Pool::open(opts(), shape_);
    p->write_records(std::vector<Record>{{0, 1, Key{1, 2}, {0, 0}}});
    off = p->geometry().record_offset(0);
  }
  int fd = ::open((dir_ + "/p0").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char junk = 0x77;
  ASSERT_EQ(::pwrite(fd, &junk, 1, static_cast<off_t>(off + 100)), 1);  // flip a byte
  ::close(fd);
  auto p = Pool::open(opts(), shape_);
  uint64_t torn = 0;
  EXPECT_TRUE(p->read_records(&torn).empty());
  EXPECT_EQ(torn, 1u);
}

TEST_F(PoolTest, NotAPoolIsNeverOverwritten) {
  std::string path = dir_ + "/p0";
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_EQ(::write(fd, "precious data", 13), 13);
  ::close(fd);
  try {
    Pool::open(opts(), shape_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_ECORRUPT);
  }
}

TEST_F(PoolTest, SecondOpenIsBusy) {
  auto p = Pool::open(opts(), shape_);
  try {
    Pool::open(opts(), shape_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EBUSY);
  }
}

TEST_F(PoolTest, TooSmallForOneChunk) {
  PoolOptions o = opts();
  o.capacity = 8192;
  try {
    Pool::open(o, shape_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EINVAL);
  }
}

}  // namespace tutti
