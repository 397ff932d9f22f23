// A pool: the pre-allocated files that hold slots, opened (or created) for one KV shape.
// Owns the file descriptors, the per-file locks and the commit-record I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "pool/format.hpp"
#include "resolver/layout.hpp"
#include "resolver/uri.hpp"

namespace tutti {

struct PoolOptions {
  std::vector<PoolUri> uris;
  uint64_t capacity = 8ull << 30;  // split over the URIs that carry no ?size=
  bool create = true;
};

struct PoolFile {
  std::string path;
  Fd fd;
  bool direct = true;      // opened with O_DIRECT (older tmpfs cannot, and then reads are buffered)
  bool in_memory = false;  // on tmpfs or ramfs: every read is a copy by the CPU that issues it
};

class Pool {
 public:
  // Opens the pool for `shape`, creating its files when they are missing, empty, or pools of
  // an older format (with create). Throws ELAYOUT when the files were made for another shape,
  // EBUSY when another runtime holds them, ECORRUPT when a path holds anything else (a file
  // that is not a pool is never written). A failed open leaves every path as it found it.
  static std::unique_ptr<Pool> open(const PoolOptions& opts, const Shape& shape);
  // Opens an existing pool whatever its shape (fsck, stats).
  static std::unique_ptr<Pool> open_existing(const std::vector<PoolUri>& uris);

  ~Pool();

  const Geometry& geometry() const { return geometry_; }
  const Uuid& uuid() const { return uuid_; }
  size_t files() const { return files_.size(); }
  const PoolFile& file(size_t i) const { return files_[i]; }
  bool created() const { return created_; }

  // Every valid commit record; `torn` counts the records that are neither valid nor blank,
  // and `bad`, if given, receives each one's slot and why (fsck).
  std::vector<Record> read_records(uint64_t* torn = nullptr,
                                   std::vector<std::pair<uint64_t, DecodeStatus>>* bad = nullptr) const;
  // Writes records (or tombstones for `free_slots`) and makes them durable.
  void write_records(std::span<const Record> records) const;
  void write_tombstones(std::span<const uint64_t> slots) const;
  // fdatasync of every file: data written before this call is durable after it.
  void sync() const;

 private:
  Pool() = default;
  void create(const PoolOptions& opts, const Shape& shape);
  void adopt(const std::vector<Superblock>& sbs, const Shape& shape);
  void write_blocks(const std::vector<std::pair<uint64_t, const uint8_t*>>& by_slot) const;

  std::vector<PoolFile> files_;
  Geometry geometry_;
  Uuid uuid_{};
  bool created_ = false;
};

}  // namespace tutti
