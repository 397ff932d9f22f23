// SPDX-License-Identifier: Apache-2.0
// tutti stats: occupancy, chunks and layout fingerprint of a pool; --prometheus prints the
// occupancy as Prometheus gauges (text exposition format), e.g. for node_exporter's textfile
// collector; --json, one JSON document. A live runtime's counters come from tutti.metrics
// (Python) in its own process. The pool is opened read-only, without a lock: stats works
// beside the runtime that holds it (its figures are then a snapshot).
#include <cinttypes>
#include <cstdio>
#include <string>

#include "args.hpp"
#include "cli.hpp"
#include "common/units.hpp"
#include "output.hpp"
#include "pool/pool.hpp"

namespace tutti::cli {

namespace {

std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void gauge(const char* name, const char* help, const std::string& labels, double value) {
  std::printf("# HELP %s %s\n# TYPE %s gauge\n%s{%s} %.17g\n", name, help, name, name, labels.c_str(), value);
}

}  // namespace

int cmd_stats(int argc, char** argv) {
  bool prometheus = false, json = false;
  auto pool = Pool::open_existing(pool_args(argc, argv, {{"--prometheus", &prometheus}, {"--json", &json}}), true);
  const bool live = pool->live();
  const auto& g = pool->geometry();
  uint64_t torn = 0;
  auto records = pool->read_records(&torn);
  if (prometheus) {
    const std::string labels =
        "pool=\"" + label_value(pool->file(0).path) + "\",uuid=\"" + uuid_string(pool->uuid()) + "\"";
    gauge("tutti_pool_slots", "Chunk slots in the pool", labels, static_cast<double>(g.slots()));
    gauge("tutti_pool_chunks", "Committed chunks", labels, static_cast<double>(records.size()));
    gauge("tutti_pool_kv_bytes", "Bytes of KV the committed chunks hold", labels,
          static_cast<double>(records.size() * g.shape().slot_bytes()));
    gauge("tutti_pool_unreadable_records", "Commit records that are torn or damaged", labels, static_cast<double>(torn));
    gauge("tutti_pool_files", "Files the pool is striped over", labels, static_cast<double>(pool->files()));
    gauge("tutti_pool_ranks", "Runtimes that share the pool, each with its share of the slots", labels,
          static_cast<double>(pool->ranks()));
    gauge("tutti_pool_live", "1 while a live runtime holds the pool", labels, live ? 1.0 : 0.0);
    return 0;
  }
  if (json) {
    std::printf("{\"schema\":1,\"uuid\":\"%s\",\"format_version\":%u,\"files\":[", uuid_string(pool->uuid()).c_str(),
                kFormatVersion);
    for (size_t i = 0; i < pool->files(); ++i)
      std::printf("%s{\"path\":%s,\"direct\":%s}", i ? "," : "", json_string(pool->file(i).path).c_str(),
                  pool->file(i).direct ? "true" : "false");
    std::printf("],\"live\":%s,\"layout\":%s,\"slot_bytes\":%" PRIu64 ",\"layer_bytes\":%" PRIu64 ",\"slots\":%" PRIu64
                ",\"ranks\":%u,\"chunks\":%zu,\"kv_bytes\":%" PRIu64 ",\"unreadable_records\":%" PRIu64 "}\n",
                live ? "true" : "false", json_string(g.shape().describe()).c_str(), g.shape().slot_bytes(), g.shape().layer_bytes(), g.slots(),
                pool->ranks(), records.size(), records.size() * g.shape().slot_bytes(), torn);
    return 0;
  }
  std::printf("pool %s: %zu file(s), format version %u\n", uuid_string(pool->uuid()).c_str(), pool->files(),
              kFormatVersion);
  for (size_t i = 0; i < pool->files(); ++i)
    std::printf("  file %zu: %s%s\n", i, pool->file(i).path.c_str(), pool->file(i).direct ? "" : " (buffered: no O_DIRECT)");
  if (live) std::printf("held by a live runtime: these figures are a snapshot\n");
  std::printf("layout: %s\n", g.shape().describe().c_str());
  std::printf("slot: %s (%s per layer), %" PRIu64 " slots\n", format_bytes(g.shape().slot_bytes()).c_str(),
              format_bytes(g.shape().layer_bytes()).c_str(), g.slots());
  if (pool->ranks() > 1)
    std::printf("shared by %u ranks: %" PRIu64 " slots each\n", pool->ranks(), g.slots() / pool->ranks());
  std::printf("chunks: %zu committed (%.1f%% full, %s of KV), %" PRIu64 " unreadable records\n", records.size(),
              g.slots() ? 100.0 * static_cast<double>(records.size()) / static_cast<double>(g.slots()) : 0.0,
              format_bytes(records.size() * g.shape().slot_bytes()).c_str(), torn);
  return 0;
}

}  // namespace tutti::cli
