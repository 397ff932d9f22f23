// tutti stats: occupancy, chunks and layout fingerprint of a pool.
#include <cinttypes>
#include <cstdio>

#include "args.hpp"
#include "cli.hpp"
#include "common/units.hpp"
#include "pool/pool.hpp"

namespace tutti::cli {

int cmd_stats(int argc, char** argv) {
  auto pool = Pool::open_existing(pool_args(argc, argv, nullptr));
  const auto& g = pool->geometry();
  uint64_t torn = 0;
  auto records = pool->read_records(&torn);
  std::printf("pool %s: %zu file(s), format version %u\n", uuid_string(pool->uuid()).c_str(), pool->files(),
              kFormatVersion);
  for (size_t i = 0; i < pool->files(); ++i)
    std::printf("  file %zu: %s%s\n", i, pool->file(i).path.c_str(), pool->file(i).direct ? "" : " (buffered: no O_DIRECT)");
  std::printf("layout: %s\n", g.shape().describe().c_str());
  std::printf("slot: %s (%s per layer), %" PRIu64 " slots\n", format_bytes(g.shape().slot_bytes()).c_str(),
              format_bytes(g.shape().layer_bytes()).c_str(), g.slots());
  std::printf("chunks: %zu committed (%.1f%% full, %s of KV), %" PRIu64 " unreadable records\n", records.size(),
              g.slots() ? 100.0 * static_cast<double>(records.size()) / static_cast<double>(g.slots()) : 0.0,
              format_bytes(records.size() * g.shape().slot_bytes()).c_str(), torn);
  return 0;
}

}  // namespace tutti::cli
