// SPDX-License-Identifier: Apache-2.0
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

// A pool may be shared by the ranks of a tensor-parallel engine, one runtime each: every rank
// owns an equal, disjoint share of the slots, and only ever reads or writes the records and
// data of its own share.
constexpr uint32_t kEveryRank = UINT32_MAX;  // PoolOptions::rank of fsck and stats: the whole pool
constexpr int kRankWaitSeconds = 120;        // how long ranks wait for the one creating their pool

struct PoolOptions {
  std::vector<PoolUri> uris;
  uint64_t capacity = 8ull << 30;  // split over the URIs that carry no ?size=
  bool create = true;
  uint32_t ranks = 1;  // runtimes sharing the pool (recorded at creation; must match after)
  uint32_t rank = 0;   // this runtime's share, < ranks; or kEveryRank (exclusive, whatever ranks)
  // A view that takes no lock and never writes (stats and fsck of a pool a runtime holds):
  // what it reads may change under it. Needs create = false and rank = kEveryRank.
  bool read_only = false;
};

// The slots [first, first + count) of one rank.
struct SlotRange {
  uint64_t first = 0;
  uint64_t count = 0;
  bool contains(uint64_t slot) const { return slot >= first && slot - first < count; }
};

struct PoolFile {
  std::string path;
  Fd fd;
  bool direct = true;      // opened with O_DIRECT (older tmpfs cannot, and then reads are buffered)
  bool in_memory = false;  // on tmpfs or ramfs: every read is a copy by the CPU that issues it
  // Its bytes are moved by the CPU of the thread that submits each I/O, not by a device's DMA:
  // tmpfs and ramfs, or a block device that is memory (zram, which also compresses; brd; pmem).
  bool cpu_moved = false;
};

class Pool {
 public:
  // Opens the pool for `shape`, creating its files when they are missing, empty, or pools of
  // an older format (with create). Throws ELAYOUT when the files were made for another shape
  // or another number of ranks, EBUSY when another runtime holds them (or this rank's share),
  // ECORRUPT when a path holds anything else (a file that is not a pool is never written). A
  // failed open leaves every path as it found it. Ranks that start together wait for the one
  // that creates the pool.
  static std::unique_ptr<Pool> open(const PoolOptions& opts, const Shape& shape);
  // Opens an existing pool whatever its shape (fsck, stats): exclusively (EBUSY while a
  // runtime holds it), or as a read-only view beside whoever holds it.
  static std::unique_ptr<Pool> open_existing(const std::vector<PoolUri>& uris, bool read_only = false);

  ~Pool();

  const Geometry& geometry() const { return geometry_; }
  const Uuid& uuid() const { return uuid_; }
  size_t files() const { return files_.size(); }
  const PoolFile& file(size_t i) const { return files_[i]; }
  bool created() const { return created_; }
  uint32_t ranks() const { return ranks_; }
  // The slots this runtime owns: its rank's share, or every slot.
  SlotRange owned() const { return owned_; }
  bool read_only() const { return read_only_; }
  // Whether a live process (a runtime) holds the pool that this read-only view reads.
  bool live() const;

  // Every valid commit record of the owned slots; `torn` counts the records that are neither valid nor blank,
  // and `bad`, if given, receives each one's slot and why (fsck).
  std::vector<Record> read_records(uint64_t* torn = nullptr,
                                   std::vector<std::pair<uint64_t, DecodeStatus>>* bad = nullptr) const;
  // Writes records (or tombstones for `free_slots`) and makes them durable.
  void write_records(std::span<const Record> records) const;
  // One slot's record as it is now (fsck re-reads what a live runtime may have changed).
  DecodeStatus read_record(uint64_t slot, Record* out) const;
  void write_tombstones(std::span<const uint64_t> slots) const;
  // One chunk-layer extent of a slot, to or from 4 KiB-aligned memory of layer_bytes() (the
  // shared tier's writer and promoter, which move whole chunks outside the layer paths).
  void read_layer(uint64_t slot, uint32_t layer, void* buf) const;
  void write_layer(uint64_t slot, uint32_t layer, const void* buf) const;
  // fdatasync of every file: data written before this call is durable after it.
  void sync() const;

 private:
  Pool() = default;
  static std::unique_ptr<Pool> open_once(const PoolOptions& opts, const Shape& shape);
  void create(const PoolOptions& opts, const Shape& shape);
  void adopt(const std::vector<Superblock>& sbs, const Shape& shape, const PoolOptions& opts);
  void claim_share(const PoolOptions& opts);
  void write_blocks(const std::vector<std::pair<uint64_t, const uint8_t*>>& by_slot) const;

  std::vector<PoolFile> files_;
  Geometry geometry_;
  Uuid uuid_{};
  bool created_ = false;
  uint32_t ranks_ = 1;
  SlotRange owned_;
  int64_t share_ = -1;  // the rank whose share this runtime locked, or -1
  bool read_only_ = false;
};

}  // namespace tutti
