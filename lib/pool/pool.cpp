// SPDX-License-Identifier: Apache-2.0
#include "pool/pool.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/units.hpp"

namespace tutti {
namespace {

void pread_full(const PoolFile& f, void* buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(f.fd.get(), static_cast<char*>(buf) + done, len - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(errno, "read " + f.path);
    if (n == 0) fail(TUTTI_ECORRUPT, f.path + " is shorter than its pool header says");
    done += static_cast<size_t>(n);
  }
}

void pwrite_full(const PoolFile& f, const void* buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(f.fd.get(), static_cast<const char*>(buf) + done, len - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(errno, "write " + f.path);
    done += static_cast<size_t>(n);
  }
}

// Whether the process holding a flock on (dev, ino) is alive, from /proc/locks. A runtime that
// was just killed can hold its lock a moment longer (its io_uring rings, which reference the
// files, are torn down asynchronously): only then is it worth waiting.
bool lock_holder_alive(const struct stat& st) {
  FILE* f = std::fopen("/proc/locks", "re");
  if (!f) return true;
  char line[256];
  bool alive = false;
  while (std::fgets(line, sizeof line, f)) {
    int pid = 0;
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    char kind[16] = {};
    if (std::sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", kind, &pid, &maj, &min, &ino) != 5) continue;
    if (std::strcmp(kind, "FLOCK") != 0 || ino != st.st_ino || makedev(maj, min) != st.st_dev) continue;
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno == EPERM) alive = true;
  }
  std::fclose(f);
  return alive;
}

// A pool file is locked by one runtime alone (flock exclusive), or by the ranks that share it
// (flock shared; each rank then locks its share, see Pool::claim_share). Ranks that start
// together meet each other's creation of the pool: they retry (Contended) rather than fail.
enum class LockMode { kAlone, kRanks };
struct Contended {};

void lock_file(const PoolFile& f, int op, LockMode mode) {
  for (int tries = 0; ::flock(f.fd.get(), op | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK) fail_errno(errno, "cannot lock pool file " + f.path);
    if (mode == LockMode::kRanks) throw Contended{};
    struct stat st;
    if (tries == 100 || ::fstat(f.fd.get(), &st) != 0 || lock_holder_alive(st))
      fail(TUTTI_EBUSY, "pool file " + f.path + " is in use by another tutti runtime");
    ::usleep(10000);
  }
}

// Whether the block device `dev` (or the disk it is a partition of) is memory that the CPU of
// the submitting thread copies (or compresses) into: zram, brd (ram0...), pmem. Its name, from
// /sys/dev/block/MAJ:MIN -> .../block/<disk>[/<partition>].
bool memory_block_device(dev_t dev) {
  char link[64], target[512];
  std::snprintf(link, sizeof link, "/sys/dev/block/%u:%u", major(dev), minor(dev));
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  const char* disk = std::strstr(target, "/block/");
  if (!disk) return false;
  disk += 7;
  auto is = [&](const char* prefix) { return std::strncmp(disk, prefix, std::strlen(prefix)) == 0; };
  return is("zram") || is("ram") || is("pmem");
}

// lock_op 0: no lock (a read-only view, which then never writes).
PoolFile open_file(const std::string& path, bool create, int lock_op, LockMode mode) {
  PoolFile f;
  f.path = path;
  int flags = (lock_op ? O_RDWR : O_RDONLY) | O_CLOEXEC | (create ? O_CREAT : 0);
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {  // tmpfs and a few others: no O_DIRECT
    fd = ::open(path.c_str(), flags, 0644);
    f.direct = false;
  }
  if (fd < 0) fail_errno(errno, "cannot open pool file " + path);
  f.fd = Fd(fd);
  struct statfs fs;
  f.in_memory = ::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
  struct stat st;
  f.cpu_moved = f.in_memory ||
                (::fstat(fd, &st) == 0 && memory_block_device(S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev));
  if (lock_op) lock_file(f, lock_op, mode);
  return f;
}

uint64_t file_size(const PoolFile& f) {
  struct stat st;
  if (::fstat(f.fd.get(), &st) != 0) fail_errno(errno, "stat " + f.path);
  if (S_ISBLK(st.st_mode)) {
    uint64_t bytes = 0;
    if (::ioctl(f.fd.get(), BLKGETSIZE64, &bytes) != 0) fail_errno(errno, "size of " + f.path);
    return bytes;
  }
  return static_cast<uint64_t>(st.st_size);
}

bool is_block_device(const PoolFile& f) {
  struct stat st;
  return ::fstat(f.fd.get(), &st) == 0 && S_ISBLK(st.st_mode);
}

// What the start of a pool path holds.
struct Head {
  DecodeStatus status = DecodeStatus::kBlank;
  uint32_t version = 0;  // the format version it carries, if any
  bool empty = false;    // a file of 0 bytes
};

// Reads the superblock. Only an empty file is blank; a file whose first 4 KiB are zero is
// someone's data (or a pool that lost its superblock: fsck's business), except on a raw block
// device, which the caller named as a whole.
Head read_superblock(const PoolFile& f, Superblock* sb) {
  Head h;
  const uint64_t size = file_size(f);
  if (size == 0) {
    h.empty = true;
    return h;
  }
  AlignedBuffer buf(Geometry::kSuperblockBytes);  // zero-filled past a short file's end
  if (size < Geometry::kSuperblockBytes) {
    // O_DIRECT cannot read a partial block: read through a second, buffered descriptor.
    Fd plain(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!plain || ::pread(plain.get(), buf.data(), size, 0) != static_cast<ssize_t>(size))
      fail_errno(errno, "read " + f.path);
  } else {
    pread_full(f, buf.data(), Geometry::kSuperblockBytes, 0);
  }
  const auto* in = reinterpret_cast<const uint8_t*>(buf.data());
  h.status = decode_superblock(in, sb);
  h.version = version_of(in);
  if (h.status == DecodeStatus::kBlank && !is_block_device(f)) h.status = DecodeStatus::kBadMagic;
  return h;
}

void check_superblock(const Head& h, const std::string& path) {
  switch (h.status) {
    case DecodeStatus::kOk:
      return;
    case DecodeStatus::kBadMagic:
      fail(TUTTI_ECORRUPT, path + " is not a tutti pool (its first 4 KiB carry no pool superblock); "
                           "tutti never overwrites such a file: give another path, or delete it");
    case DecodeStatus::kBadChecksum:
      fail(TUTTI_ECORRUPT, path + ": pool superblock checksum mismatch (damaged); see tutti fsck " + path);
    case DecodeStatus::kBadVersion:
      fail(TUTTI_ECORRUPT, path + ": pool format " + std::to_string(h.version) + ", but this tutti reads format " +
                               std::to_string(kFormatVersion) +
                               (h.version < kFormatVersion ? " (an older tutti made it; with create=1 it is made anew)"
                                                           : " (a newer tutti made it)"));
    case DecodeStatus::kBadGeometry:
      fail(TUTTI_ECORRUPT, path + ": pool superblock has impossible or inconsistent sizes (damaged or crafted)");
    case DecodeStatus::kBlank:
      fail(TUTTI_ECORRUPT, path + " is blank (no superblock): not a tutti pool");
    case DecodeStatus::kForeign:
    case DecodeStatus::kMisplaced:
      break;
  }
  fail(TUTTI_EINTERNAL, path + ": unexpected superblock status");
}

// Makes a rename into `path`'s directory durable.
void sync_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) fail_errno(errno, "fsync directory " + dir);
}

// A pool of an older format is a cache tutti itself wrote: with create=1 it is made anew.
bool replaceable(const Head& h) {
  return h.status == DecodeStatus::kBadVersion && h.version != 0 && h.version < kFormatVersion;
}

// Where a rank's lock lies in file 0: a byte-range lock of one byte per rank, past any data.
constexpr off_t kShareLockAt = off_t{1} << 62;

bool share_lock(const PoolFile& f, uint32_t rank, short type) {
  struct flock l = {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = kShareLockAt + rank;
  l.l_len = 1;
  return ::fcntl(f.fd.get(), F_OFD_SETLK, &l) == 0;
}

}  // namespace

Pool::~Pool() {
  // Unlock explicitly: io_uring may still hold the file for a moment after its ring is gone,
  // and a reopen must not find the pool busy.
  if (share_ >= 0) share_lock(files_[0], static_cast<uint32_t>(share_), F_UNLCK);
  for (auto& f : files_)
    if (f.fd) ::flock(f.fd.get(), LOCK_UN);
}

std::unique_ptr<Pool> Pool::open(const PoolOptions& opts, const Shape& shape) {
  TUTTI_EXPECT(!opts.uris.empty(), "no pool location given");
  const std::string bad_shape = shape_problem(shape);
  TUTTI_EXPECT(bad_shape.empty(), "KV shape " + shape.describe() + ": " + bad_shape);
  TUTTI_EXPECT(opts.ranks >= 1 && (opts.rank < opts.ranks || opts.rank == kEveryRank),
               "rank " + std::to_string(opts.rank) + " of " + std::to_string(opts.ranks) + " ranks");
  // Ranks of one engine start together: one creates the pool, the others wait for it (a
  // large pool on a raw device takes a while to create: its record area is cleared).
  const auto start = std::chrono::steady_clock::now();
  bool told = false;
  for (uint32_t backoff = 1;; backoff = std::min(backoff * 2, 64u)) {
    try {
      return open_once(opts, shape);
    } catch (const Contended&) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > std::chrono::seconds(kRankWaitSeconds))
        fail(TUTTI_EBUSY, "pool file " + opts.uris[0].path + " stayed locked for " +
                              std::to_string(kRankWaitSeconds) +
                              " s: a runtime that does not share it holds it, or a rank creating it is stuck");
      if (!told && waited > std::chrono::seconds(2)) {
        told = true;
        log(TUTTI_LOG_INFO, "rank " + std::to_string(opts.rank) + " waits for pool file " + opts.uris[0].path +
                                ": another rank is creating it, or a runtime that does not share it holds it");
      }
      ::usleep(backoff * 1000 + static_cast<uint32_t>(::getpid()) % 1000);
    }
  }
}

std::unique_ptr<Pool> Pool::open_once(const PoolOptions& opts, const Shape& shape) {
  std::unique_ptr<Pool> pool(new Pool());
  const size_t n = opts.uris.size();
  TUTTI_EXPECT(!opts.read_only || (!opts.create && opts.rank == kEveryRank), "a read-only pool is opened whole, never created");
  const LockMode mode = opts.ranks > 1 && opts.rank != kEveryRank ? LockMode::kRanks : LockMode::kAlone;
  // How the pool is held once open; a read-only view holds no lock.
  const int hold = opts.read_only ? 0 : mode == LockMode::kRanks ? LOCK_SH : LOCK_EX;
  pool->read_only_ = opts.read_only;
  // A missing file is made under a temporary name and renamed into place once its superblock
  // is durable: a crash while creating leaves no zero-headed file at the pool's path (which
  // no open would accept). Files this call creates are removed again, and files it found
  // empty are emptied again, if the pool cannot be opened: a failed open leaves every path
  // as it was.
  std::vector<std::pair<std::string, std::string>> made;  // (temporary name, path)
  std::vector<size_t> was_empty;
  // Files found empty are emptied again only by a runtime that holds them alone: a rank that
  // lost a race to create the pool must not truncate what the winner wrote.
  bool exclusive = mode == LockMode::kAlone && !opts.read_only;
  try {
    std::vector<Superblock> sbs(n);
    std::vector<Head> heads(n);
    std::vector<std::pair<dev_t, ino_t>> ids;
    size_t existing = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string& path = opts.uris[i].path;
      struct stat st;
      const bool exists = ::stat(path.c_str(), &st) == 0;
      if (!exists && !opts.create) fail(TUTTI_EACCES, "pool file " + path + " does not exist (create=0)");
      if (exists) {
        for (auto& [d, ino] : ids)
          TUTTI_EXPECT(!(d == st.st_dev && ino == st.st_ino), "pool file " + path + " is given twice");
        ids.emplace_back(st.st_dev, st.st_ino);
      }
      if (exists) {
        pool->files_.push_back(open_file(path, opts.create, hold, mode));
      } else {
        // Locked, so a live creator elsewhere means EBUSY (or, for a rank, a sibling creating
        // it: wait); a dead one's leftovers are cleared.
        const std::string tmp = path + ".tutti-new";
        pool->files_.push_back(open_file(tmp, true, LOCK_EX, mode));
        made.emplace_back(tmp, path);
        if (::stat(path.c_str(), &st) == 0) throw Contended{};  // a sibling rank made it meanwhile
        if (::ftruncate(pool->files_.back().fd.get(), 0) != 0) fail_errno(errno, "truncate " + tmp);
        pool->files_.back().path = path;
      }
      heads[i] = read_superblock(pool->files_[i], &sbs[i]);
      if (heads[i].empty && exists) was_empty.push_back(i);
      if (heads[i].status == DecodeStatus::kBlank) continue;
      if (opts.create && replaceable(heads[i])) {
        heads[i].status = DecodeStatus::kBlank;
        continue;
      }
      check_superblock(heads[i], path);
      ++existing;
    }
    if (existing == 0) {
      TUTTI_EXPECT_CODE(opts.create, TUTTI_EACCES, "pool is blank and create=0");
      // Only one runtime writes a new pool: a rank holds its files shared until now.
      if (mode == LockMode::kRanks)
        for (auto& f : pool->files_) lock_file(f, LOCK_EX, mode);
      exclusive = true;
      pool->create(opts, shape);
      for (const auto& [tmp, path] : made) {
        if (::rename(tmp.c_str(), path.c_str()) != 0) fail_errno(errno, "rename " + tmp + " to " + path);
        sync_dir(path);
      }
      made.clear();
      was_empty.clear();  // a pool now: never emptied again by this open
      if (mode == LockMode::kRanks)
        for (auto& f : pool->files_) lock_file(f, LOCK_SH, mode);  // a downgrade: never contended
    } else {
      TUTTI_EXPECT_CODE(existing == n, TUTTI_ELAYOUT,
                        "pool has " + std::to_string(existing) + " existing file(s) and " +
                            std::to_string(n - existing) + " blank one(s): a pool cannot grow by adding files");
      pool->adopt(sbs, shape, opts);
    }
    pool->claim_share(opts);
    return pool;
  } catch (...) {
    for (const auto& [tmp, path] : made) ::unlink(tmp.c_str());
    for (size_t i : exclusive ? was_empty : std::vector<size_t>{})
      if (::ftruncate(pool->files_[i].fd.get(), 0) != 0) {  // best effort: it was empty
      }
    throw;
  }
}

// The slots this runtime owns: an equal share per rank (the remainder of the division is left
// unused), locked by a byte-range lock so that no two runtimes own one share.
void Pool::claim_share(const PoolOptions& opts) {
  const uint64_t slots = geometry_.slots();
  if (ranks_ == 1 || opts.rank == kEveryRank) {
    owned_ = {0, slots};
    return;
  }
  const uint64_t per = slots / ranks_;
  // A rank that was just killed may hold its lock a moment longer (its io_uring rings).
  for (int tries = 0; !share_lock(files_[0], opts.rank, F_WRLCK); ++tries) {
    if (errno != EAGAIN && errno != EACCES) fail_errno(errno, "cannot lock rank " + std::to_string(opts.rank) + "'s share of pool file " + files_[0].path);
    if (tries == 100)
      fail(TUTTI_EBUSY, "rank " + std::to_string(opts.rank) + " of pool " + files_[0].path +
                            " is in use by another tutti runtime (two ranks with the same number?)");
    ::usleep(10000);
  }
  owned_ = {opts.rank * per, per};
  share_ = static_cast<int64_t>(opts.rank);
}

// A new pool: every file gets the same number of slots.
void Pool::create(const PoolOptions& opts, const Shape& shape) {
  const size_t n = files_.size();
  size_t unsized = 0;
  for (auto& u : opts.uris) unsized += u.size == 0;
  uint64_t share = unsized ? opts.capacity / unsized : 0;
  uint64_t spf = UINT64_MAX;
  for (size_t i = 0; i < n; ++i) {
    uint64_t want = opts.uris[i].size ? opts.uris[i].size : share;
    if (is_block_device(files_[i])) want = std::min<uint64_t>(want ? want : UINT64_MAX, file_size(files_[i]));
    spf = std::min(spf, Geometry::slots_for(shape, want));
  }
  spf = std::min(spf, kMaxSlotsPerFile);
  if (spf == 0 || spf * n < opts.ranks)
    fail(TUTTI_EINVAL, "pool capacity is too small for one chunk" +
                           (opts.ranks > 1 ? " per rank (" + std::to_string(opts.ranks) + " ranks)" : std::string()) +
                           ": a slot of " + shape.describe() + " needs " +
                           format_bytes(shape.slot_bytes() + Geometry::kRecordBytes) + " per file");
  geometry_ = Geometry(shape, static_cast<uint32_t>(n), spf);
  if (::getrandom(uuid_.data(), uuid_.size(), 0) != static_cast<ssize_t>(uuid_.size())) fail_errno(errno, "getrandom");
  const uint64_t bytes = Geometry::file_bytes_for(shape, spf);
  for (size_t i = 0; i < n; ++i) {
    PoolFile& f = files_[i];
    if (!is_block_device(f)) {
      // An older format's pool: its records must not survive into the new one.
      if (file_size(f) != 0 && ::ftruncate(f.fd.get(), 0) != 0) fail_errno(errno, "truncate " + f.path);
      // Pre-allocate so later writes never hit ENOSPC and extents stay put; the record region
      // reads back as zeros = every slot free.
      int rc = ::posix_fallocate(f.fd.get(), 0, static_cast<off_t>(bytes));
      if (rc != 0) fail_errno(rc, "cannot pre-allocate " + format_bytes(bytes) + " for pool file " + f.path);
    } else {
      // A raw device has old bytes in its record area: clear it.
      AlignedBuffer zeros(1 << 20);
      uint64_t end = geometry_.data_offset();
      for (uint64_t off = Geometry::kSuperblockBytes; off < end; off += zeros.size())
        pwrite_full(f, zeros.data(), std::min<uint64_t>(zeros.size(), end - off), off);
    }
    Superblock sb;
    sb.uuid = uuid_;
    sb.file_index = static_cast<uint32_t>(i);
    sb.file_count = static_cast<uint32_t>(n);
    sb.shape = shape;
    sb.slots_per_file = spf;
    sb.file_bytes = bytes;
    sb.ranks = opts.ranks;
    AlignedBuffer buf(Geometry::kSuperblockBytes);
    encode_superblock(sb, reinterpret_cast<uint8_t*>(buf.data()));
    pwrite_full(f, buf.data(), buf.size(), 0);
    if (::fsync(f.fd.get()) != 0) fail_errno(errno, "fsync " + f.path);
  }
  created_ = true;
  ranks_ = opts.ranks;
}

// An existing pool: the files must be one pool, given in any order, made for this shape.
void Pool::adopt(const std::vector<Superblock>& sbs, const Shape& shape, const PoolOptions& opts) {
  const size_t n = files_.size();
  std::vector<PoolFile> ordered(n);
  for (size_t i = 0; i < n; ++i) {
    const Superblock& sb = sbs[i];
    TUTTI_EXPECT_CODE(sb.uuid == sbs[0].uuid && sb.file_count == n && sb.file_index < n && !ordered[sb.file_index].fd &&
                          sb.slots_per_file == sbs[0].slots_per_file && sb.ranks == sbs[0].ranks,
                      TUTTI_ELAYOUT,
                      "pool files do not form one pool: " + files_[i].path + " is file " + std::to_string(sb.file_index) +
                          " of " + std::to_string(sb.file_count) + " of pool " + uuid_string(sb.uuid));
    if (!(sb.shape == shape))
      fail(TUTTI_ELAYOUT, "pool " + files_[i].path + " was created for " + sb.shape.describe() +
                              ", but the KV cache registered has " + shape.describe());
    if (sb.ranks != opts.ranks && opts.rank != kEveryRank)
      fail(TUTTI_ELAYOUT, "pool " + files_[i].path + " is " +
                              (sb.ranks > 1 ? "shared by " + std::to_string(sb.ranks) + " ranks" : std::string("not shared")) +
                              ", but this runtime is " +
                              (opts.ranks > 1 ? "rank " + std::to_string(opts.rank) + " of " + std::to_string(opts.ranks)
                                              : std::string("not a rank (option ranks)")));
    ordered[sb.file_index] = std::move(files_[i]);
  }
  files_ = std::move(ordered);
  uuid_ = sbs[0].uuid;
  ranks_ = sbs[0].ranks;
  geometry_ = Geometry(shape, static_cast<uint32_t>(n), sbs[0].slots_per_file);
  for (auto& f : files_)
    if (file_size(f) < Geometry::file_bytes_for(shape, sbs[0].slots_per_file))
      fail(TUTTI_ECORRUPT, f.path + " is shorter than its pool header says (truncated?)");
}

std::unique_ptr<Pool> Pool::open_existing(const std::vector<PoolUri>& uris, bool read_only) {
  TUTTI_EXPECT(!uris.empty(), "no pool location given");
  Superblock sb;
  {
    PoolFile f = open_file(uris[0].path, false, read_only ? 0 : LOCK_EX, LockMode::kAlone);
    check_superblock(read_superblock(f, &sb), uris[0].path);
  }
  PoolOptions opts;
  opts.uris = uris;
  opts.create = false;
  opts.rank = kEveryRank;
  opts.read_only = read_only;
  return open(opts, sb.shape);
}

bool Pool::live() const {
  struct stat st;  // held exclusively, no one else can hold it
  return read_only_ && ::fstat(files_[0].fd.get(), &st) == 0 && lock_holder_alive(st);
}

DecodeStatus Pool::read_record(uint64_t slot, Record* out) const {
  TUTTI_EXPECT(slot < geometry_.slots(), "slot " + std::to_string(slot) + " is past the pool's end");
  AlignedBuffer buf(Geometry::kRecordBytes);
  pread_full(files_[geometry_.file_of(slot)], buf.data(), Geometry::kRecordBytes, geometry_.record_offset(slot));
  return decode_record(reinterpret_cast<const uint8_t*>(buf.data()), uuid_, slot, geometry_.shape().layers, out);
}

void Pool::read_layer(uint64_t slot, uint32_t layer, void* buf) const {
  TUTTI_EXPECT(slot < geometry_.slots() && layer < geometry_.shape().layers, "no such slot or layer");
  const Extent e = geometry_.layer_extent(slot, layer);
  pread_full(files_[e.file], buf, e.length, e.offset);
}

void Pool::write_layer(uint64_t slot, uint32_t layer, const void* buf) const {
  TUTTI_EXPECT(slot < geometry_.slots() && layer < geometry_.shape().layers, "no such slot or layer");
  TUTTI_EXPECT_CODE(!read_only_, TUTTI_EACCES, "a read-only view of a pool writes nothing");
  const Extent e = geometry_.layer_extent(slot, layer);
  pwrite_full(files_[e.file], buf, e.length, e.offset);
}

std::vector<Record> Pool::read_records(uint64_t* torn, std::vector<std::pair<uint64_t, DecodeStatus>>* bad_out) const {
  std::vector<Record> out;
  uint64_t bad = 0;
  const uint64_t step = 256;  // records per read
  const uint64_t n = files_.size(), end = owned_.first + owned_.count;
  AlignedBuffer buf(step * Geometry::kRecordBytes);
  for (uint32_t fi = 0; fi < n; ++fi) {
    // The local indices of this file whose global slots (local * n + fi) are owned.
    const auto local_at = [&](uint64_t slot) { return slot > fi ? (slot - fi + n - 1) / n : 0; };
    const uint64_t lo = local_at(owned_.first), hi = local_at(end);
    for (uint64_t first = lo; first < hi; first += step) {
      uint64_t count = std::min(step, hi - first);
      pread_full(files_[fi], buf.data(), count * Geometry::kRecordBytes,
                 Geometry::kSuperblockBytes + first * Geometry::kRecordBytes);
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t slot = (first + i) * files_.size() + fi;
        Record r;
        auto st = decode_record(reinterpret_cast<const uint8_t*>(buf.data()) + i * Geometry::kRecordBytes, uuid_,
                                slot, geometry_.shape().layers, &r);
        if (st == DecodeStatus::kOk) {
          out.push_back(std::move(r));
        } else if (st != DecodeStatus::kBlank) {
          ++bad;
          if (bad_out) bad_out->emplace_back(slot, st);
        }
      }
    }
  }
  if (torn) *torn = bad;
  return out;
}

void Pool::write_blocks(const std::vector<std::pair<uint64_t, const uint8_t*>>& by_slot) const {
  TUTTI_EXPECT_CODE(!read_only_, TUTTI_EACCES, "pool " + files_[0].path + " is open read-only");
  std::vector<bool> touched(files_.size());
  for (auto& [slot, block] : by_slot) {
    uint32_t fi = geometry_.file_of(slot);
    pwrite_full(files_[fi], block, Geometry::kRecordBytes, geometry_.record_offset(slot));
    touched[fi] = true;
  }
  for (size_t i = 0; i < files_.size(); ++i)
    if (touched[i] && ::fdatasync(files_[i].fd.get()) != 0) fail_errno(errno, "fdatasync " + files_[i].path);
}

void Pool::write_records(std::span<const Record> records) const {
  if (records.empty()) return;
  AlignedBuffer buf(records.size() * Geometry::kRecordBytes);
  std::vector<std::pair<uint64_t, const uint8_t*>> blocks;
  for (size_t i = 0; i < records.size(); ++i) {
    auto* b = reinterpret_cast<uint8_t*>(buf.data()) + i * Geometry::kRecordBytes;
    encode_record(uuid_, records[i], b);
    blocks.emplace_back(records[i].slot, b);
  }
  write_blocks(blocks);
}

void Pool::write_tombstones(std::span<const uint64_t> slots) const {
  if (slots.empty()) return;
  AlignedBuffer zero(Geometry::kRecordBytes);
  std::vector<std::pair<uint64_t, const uint8_t*>> blocks;
  for (uint64_t s : slots) blocks.emplace_back(s, reinterpret_cast<const uint8_t*>(zero.data()));
  write_blocks(blocks);
}

void Pool::sync() const {
  for (auto& f : files_)
    if (::fdatasync(f.fd.get()) != 0) fail_errno(errno, "fdatasync " + f.path);
}

}  // namespace tutti
