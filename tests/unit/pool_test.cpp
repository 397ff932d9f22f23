// SPDX-License-Identifier: Apache-2.0
// Pool files: creation, fingerprint checks, commit records and their recovery.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
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

// stats and fsck read a pool that a runtime holds: a read-only view takes no lock, sees what
// the holder writes, says the pool is live, and never writes.
TEST_F(PoolTest, ReadOnlyViewBesideTheHolder) {
  auto holder = Pool::open(opts(2), shape_);
  try {
    Pool::open_existing(opts(2).uris);
    FAIL() << "an exclusive open beside the holder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EBUSY);
  }
  auto view = Pool::open_existing(opts(2).uris, true);
  EXPECT_TRUE(view->read_only());
  EXPECT_TRUE(view->live());
  EXPECT_FALSE(holder->live());  // held exclusively: no one else holds it
  EXPECT_EQ(view->uuid(), holder->uuid());
  holder->write_records(std::vector<Record>{{1, 3, Key{7, 8}, {11, 12}}});
  ASSERT_EQ(view->read_records().size(), 1u);
  Record r;
  EXPECT_EQ(view->read_record(1, &r), DecodeStatus::kOk);
  EXPECT_EQ(r.key, (Key{7, 8}));
  EXPECT_EQ(view->read_record(0, &r), DecodeStatus::kBlank);
  try {
    view->write_tombstones(std::vector<uint64_t>{1});
    FAIL() << "a read-only view wrote";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EACCES);
  }
  EXPECT_EQ(holder->read_records().size(), 1u);
  holder.reset();
  EXPECT_FALSE(view->live());
  auto again = Pool::open(opts(2), shape_);  // the view held nothing
  EXPECT_FALSE(again->created());
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

// Two ranks of one pool: disjoint equal shares over both files, each reading only its own
// records; fsck and stats (kEveryRank) see every record; the rank count is fixed at creation.
TEST_F(PoolTest, RanksOwnDisjointShares) {
  PoolOptions o = opts(2);
  o.ranks = 2;
  auto r0 = Pool::open(o, shape_);
  o.rank = 1;
  auto r1 = Pool::open(o, shape_);
  EXPECT_EQ(r0->ranks(), 2u);
  const uint64_t slots = r0->geometry().slots();
  EXPECT_EQ(r0->owned().first, 0u);
  EXPECT_EQ(r0->owned().count, slots / 2);
  EXPECT_EQ(r1->owned().first, slots / 2);
  EXPECT_EQ(r1->owned().count, slots / 2);
  const uint64_t mine = r0->owned().count - 1, theirs = r1->owned().first;
  r0->write_records(std::vector<Record>{{mine, 3, Key{1, 2}, {5, 6}}});
  r1->write_records(std::vector<Record>{{theirs, 4, Key{3, 4}, {7, 8}}});
  ASSERT_EQ(r0->read_records().size(), 1u);
  EXPECT_EQ(r0->read_records()[0].slot, mine);
  ASSERT_EQ(r1->read_records().size(), 1u);
  EXPECT_EQ(r1->read_records()[0].slot, theirs);
  r0.reset();
  r1.reset();
  auto all = Pool::open_existing(o.uris);
  EXPECT_EQ(all->ranks(), 2u);
  EXPECT_EQ(all->owned().count, slots);
  EXPECT_EQ(all->read_records().size(), 2u);
  all.reset();
  o.ranks = 4;
  o.rank = 0;
  try {
    Pool::open(o, shape_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_ELAYOUT);
  }
}

// A truncated shared pool is refused as damaged, by a rank and by fsck, never a crash while the
// half-open pool unwinds.
TEST_F(PoolTest, TruncatedSharedPoolIsRefused) {
  PoolOptions o = opts();
  o.ranks = 2;
  Pool::open(o, shape_).reset();
  ASSERT_EQ(::truncate(o.uris[0].path.c_str(), 1 << 20), 0);
  for (uint32_t rank : {0u, kEveryRank}) {
    o.rank = rank;
    try {
      rank == kEveryRank ? Pool::open_existing(o.uris) : Pool::open(o, shape_);
      FAIL() << "rank " << rank;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), TUTTI_ECORRUPT) << e.what();
    }
  }
}

TEST_F(PoolTest, RankedSuperblockRoundTrips) {
  Superblock sb;
  sb.shape = shape_;
  sb.slots_per_file = 8;
  sb.file_bytes = Geometry::file_bytes_for(shape_, 8);
  std::vector<uint8_t> buf(4096);
  for (uint32_t ranks : {1u, 2u, 8u}) {
    sb.ranks = ranks;
    encode_superblock(sb, buf.data());
    Superblock out;
    ASSERT_EQ(decode_superblock(buf.data(), &out), DecodeStatus::kOk);
    EXPECT_EQ(out.ranks, ranks);
  }
  sb.ranks = 9;  // more ranks than slots: not every rank would own one
  encode_superblock(sb, buf.data());
  Superblock out;
  EXPECT_EQ(decode_superblock(buf.data(), &out), DecodeStatus::kBadGeometry);
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
  o.capacity = 16ull << 20;
  o.ranks = 1000;  // fewer slots than ranks
  try {
    Pool::open(o, shape_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EINVAL);
  }
}

// Whose CPU moves a file's bytes decides where io_uring reads it (option async_reads): a pool
// on tmpfs is copied by the submitting thread; one on a disk's filesystem is not.
TEST_F(PoolTest, KnowsWhenTheCpuMovesTheBytes) {
  struct statfs fs;
  ASSERT_EQ(::statfs(dir_.c_str(), &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {  // /tmp on a disk (on zram it would be true, rightly)
    auto p = Pool::open(opts(), shape_);
    EXPECT_FALSE(p->file(0).in_memory);
    EXPECT_FALSE(p->file(0).cpu_moved);
  }
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  PoolOptions o = opts();
  o.uris[0].path = "/dev/shm/tutti-pool-test-" + std::to_string(::getpid());
  {
    auto shm = Pool::open(o, shape_);
    EXPECT_TRUE(shm->file(0).in_memory);
    EXPECT_TRUE(shm->file(0).cpu_moved);
  }
  ::unlink(o.uris[0].path.c_str());
}

}  // namespace tutti
