// SPDX-License-Identifier: Apache-2.0
// tutti fsck: checks a pool's superblocks, commit records and every layer checksum (read-only,
// also while a runtime holds the pool), and with --repair clears the records that fail.
// --json: the findings as one JSON document.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "args.hpp"
#include "cli.hpp"
#include "clock.hpp"
#include "common/checksum.hpp"
#include "common/error.hpp"
#include "output.hpp"
#include "pool/pool.hpp"

namespace tutti::cli {

// Checks every superblock, record and data extent. Exit 0: consistent; 4: bad chunks or
// records found (run with --repair); --repair tombstones every record that is unreadable,
// foreign, misplaced, a stale duplicate or whose data fails its checksum, and then the pool
// passes fsck (exit 0).
//
// Without --repair the pool is a read-only view that takes no lock, so fsck can check a pool a
// live runtime holds. That runtime may rewrite a slot while fsck reads it (tombstone, data,
// new record, in that order), so before a finding counts, fsck reads the slot's record again:
// a record that changed meanwhile is a write in flight, not damage. --repair writes, and needs
// the pool to itself.
int cmd_fsck(int argc, char** argv) {
  bool repair = false, json = false;
  const auto uris = pool_args(argc, argv, {{"--repair", &repair}, {"--json", &json}});
  std::unique_ptr<Pool> pool;
  try {
    pool = Pool::open_existing(uris, !repair);
  } catch (const Error& e) {
    if (e.code() != TUTTI_EBUSY) throw;
    fail(TUTTI_EBUSY, std::string(e.what()) + ": stop it to repair the pool (fsck without --repair checks a live pool read-only)");
  }
  const bool live = pool->live();
  const auto& g = pool->geometry();
  uint64_t unreadable = 0;
  std::vector<std::pair<uint64_t, DecodeStatus>> bad_records;
  auto records = pool->read_records(&unreadable, &bad_records);
  size_t in_flux = 0;  // findings that a write in flight explains
  // Whether slot's record still says what `r` says (with the pool held exclusively it must).
  auto unchanged = [&](const Record& r) {
    Record now;
    return pool->read_record(r.slot, &now) == DecodeStatus::kOk && now.key == r.key && now.generation == r.generation;
  };
  auto still_bad = [&](uint64_t slot, DecodeStatus was) {
    Record now;
    return pool->read_record(slot, &now) == was;
  };
  std::vector<std::pair<uint64_t, std::string>> problems;  // slot, what is wrong there
  auto problem = [&](uint64_t slot, const std::string& what) {
    problems.emplace_back(slot, what);
    if (!json) std::printf("  slot %" PRIu64 ": %s\n", slot, what.c_str());
  };
  if (!json) {
    std::printf("superblocks: ok (%zu file(s), %s)\n", pool->files(), g.shape().describe().c_str());
    if (live) std::printf("pool: held by a live runtime, checked read-only\n");
    std::printf("commit records: %zu valid, %zu not\n", records.size(), bad_records.size());
  }
  std::vector<uint64_t> drop;
  for (const auto& [slot, why] : bad_records) {
    if (!still_bad(slot, why)) {
      ++in_flux;
      continue;
    }
    problem(slot, std::string("record ") + describe(why));
    drop.push_back(slot);
  }
  // Every record's data, read in pieces of at most 64 MiB (the layer sum is a sum of page
  // terms): a superblock's layer size never decides how much memory fsck takes.
  const uint64_t piece = std::min<uint64_t>(g.shape().layer_bytes(), 64ull << 20);
  AlignedBuffer buf(records.empty() ? 4096 : piece);
  // The checksum of the extent as it reads now; none, with *why, where it cannot be read.
  auto read_sum = [&](const Extent& e, std::string* why) -> std::optional<uint64_t> {
    const auto& f = pool->file(e.file);
    uint64_t terms = 0;
    for (uint64_t done = 0; done < e.length; done += piece) {
      const uint64_t len = std::min(piece, e.length - done);
      const ssize_t n = ::pread(f.fd.get(), buf.data(), len, static_cast<off_t>(e.offset + done));
      if (n != static_cast<ssize_t>(len)) {
        *why = n < 0 ? std::strerror(errno) : "short read";
        return std::nullopt;
      }
      terms += page_terms(buf.data(), done / 4096, len / 4096);
    }
    return layer_sum_of_terms(terms, e.length);
  };
  size_t bad_data = 0, verified = 0;
  std::vector<bool> good(records.size(), false);
  double last = now_s();
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    bool ok = true;
    for (uint32_t l = 0; l < g.shape().layers && ok; ++l) {
      std::string why, what;
      const std::optional<uint64_t> sum = read_sum(g.layer_extent(r.slot, l), &why);
      if (!sum)
        what = "layer " + std::to_string(l) + " cannot be read (" + why + ")";
      else if (*sum != r.layer_sums[l])
        what = "layer " + std::to_string(l) + " fails its checksum";
      else
        continue;
      ok = false;
      if (!unchanged(r)) {
        ++in_flux;
        break;
      }
      problem(r.slot, what);
      drop.push_back(r.slot);
      ++bad_data;
    }
    good[i] = ok;
    verified += ok;
    if (now_s() - last > 1.0) {
      std::fprintf(stderr, "  checked %zu of %zu chunks\n", i + 1, records.size());
      last = now_s();
    }
  }
  // A key in two records: the newest whose data verifies stays (open takes the newest, so a
  // newer copy with bad data would otherwise take an older good one with it).
  std::unordered_map<Key, size_t, KeyHash> keep;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!good[i]) continue;
    auto [it, fresh] = keep.emplace(records[i].key, i);
    if (fresh) continue;
    const bool newer = records[it->second].generation < records[i].generation;
    const Record& loser = newer ? records[it->second] : records[i];
    if (newer) it->second = i;
    if (!unchanged(loser) || !unchanged(records[it->second])) {
      ++in_flux;
      continue;
    }
    problem(loser.slot, "stale duplicate of a newer record of the same chunk");
    drop.push_back(loser.slot);
  }
  std::sort(drop.begin(), drop.end());
  drop.erase(std::unique(drop.begin(), drop.end()), drop.end());
  const bool cleared = repair && !drop.empty();
  if (cleared) pool->write_tombstones(drop);
  if (json) {
    std::printf("{\"schema\":1,\"uuid\":\"%s\",\"files\":%zu,\"layout\":%s,\"live\":%s,\"records_valid\":%zu,"
                "\"records_bad\":%zu,\"chunks_verified\":%zu,\"chunks_bad\":%zu,\"in_flux\":%zu,\"problems\":[",
                uuid_string(pool->uuid()).c_str(), pool->files(), json_string(g.shape().describe()).c_str(),
                live ? "true" : "false", records.size(), bad_records.size(), verified, bad_data, in_flux);
    for (size_t i = 0; i < problems.size(); ++i)
      std::printf("%s{\"slot\":%" PRIu64 ",\"problem\":%s}", i ? "," : "", problems[i].first,
                  json_string(problems[i].second).c_str());
    std::printf("],\"records_to_clear\":%zu,\"cleared\":%s,\"consistent\":%s}\n", drop.size(),
                cleared ? "true" : "false", drop.empty() || cleared ? "true" : "false");
    return drop.empty() || cleared ? 0 : 4;
  }
  std::printf("data: %zu of %zu chunks verified, %zu bad\n", verified, records.size(), bad_data);
  if (in_flux)
    std::printf("changed while checked: %zu slot(s) a runtime rewrote meanwhile (not damage)\n", in_flux);
  if (drop.empty()) return 0;
  if (!repair) {
    std::printf("run with --repair to clear %zu record(s) (their chunks become misses)\n", drop.size());
    return 4;
  }
  std::printf("repaired: cleared %zu record(s)\n", drop.size());
  return 0;
}

}  // namespace tutti::cli
