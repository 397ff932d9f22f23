// SPDX-License-Identifier: Apache-2.0
// One run of bench (bench.hpp): a fresh pool, the raw write figure, a store of the whole cache
// through the C ABI, then loads layer by layer, each after a raw read, every byte verified.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "bench.hpp"
#include "binding/kv_binding.hpp"
#include "clock.hpp"
#include "resolver/layout.hpp"
#include "resolver/uri.hpp"

namespace tutti::cli {

RunResult run_once(const BenchArgs& a, const Printer& print, KvCache& kv, const std::string& backend,
                   const char* io_mode, RawFigures* raw) {
  RunResult out;
  const Model& m = *a.model;
  PoolUri uri = parse_pool_uri(a.pool);
  out.path = uri.path;
  ::unlink(uri.path.c_str());  // a fresh pool each run: nothing may be found already stored

  Shape shape{m.layers, m.heads, m.head_dim, m.elem_bytes, a.chunk_tokens};
  const size_t chunks = a.tokens / a.chunk_tokens;
  tutti_options* o = nullptr;
  tutti_options_create(&o);
  int rc = 0;
  auto set = [&](const char* key, const std::string& value) {  // the first refusal is the run's error
    if (!rc && (rc = tutti_options_set(o, key, value.c_str()))) out.rc = call_failed(key, rc);
  };
  set("pool", a.pool);
  set("capacity", std::to_string(Geometry::file_bytes_for(shape, chunks + 1)));
  set("chunk_tokens", std::to_string(a.chunk_tokens));
  set("backend", backend);
  set("io_mode", io_mode);
  set("direct_to_blocks", a.direct);
  if (!a.dram_tier.empty()) set("dram_tier", a.dram_tier);
  if (a.cuda)  // a load into HBM stages whole layers: room for the default lookahead of 4
    set("staging", std::to_string(std::max<uint64_t>(256ull << 20, 4 * chunks * shape.layer_bytes())));
  if (rc) {
    tutti_options_destroy(o);
    return out;
  }
  tutti_runtime* rt = nullptr;
  rc = tutti_runtime_open(o, &rt);
  tutti_options_destroy(o);
  if (rc) {
    if (rc == TUTTI_EUNSUPPORTED) out.unsupported = tutti_last_error();
    out.rc = call_failed("open", rc);
    return out;
  }
  tutti_kv_layout layout = kv.layout();
  if ((rc = tutti_runtime_register_kv(rt, &layout))) {
    if (rc == TUTTI_EUNSUPPORTED) out.unsupported = tutti_last_error();
    out.rc = call_failed("register", rc);
    tutti_runtime_close(rt);
    return out;
  }
  // A new pool hands out its lowest slots first: the chunks land in slots [0, chunks).
  Geometry g(shape, 1, chunks + 1);
  out.data_offset = g.data_offset();
  out.data_bytes = chunks * shape.slot_bytes();
  auto sweep = [&](bool write) {
    print.step(std::string("raw ") + (write ? "write" : "read") + " sweep");
    return best_raw_setting(out.path, out.data_offset, out.data_bytes, write);
  };
  if (!raw->write_at) raw->write_at = sweep(true);
  print.step("raw write");
  raw_bandwidth(out.path, out.data_offset, out.data_bytes, *raw->write_at);
  raw->write = raw_bandwidth(out.path, out.data_offset, out.data_bytes, *raw->write_at);
  raw->bytes = out.data_bytes;

  // Requests: the prompt split into `requests` equal prompts (distinct token ids), each with
  // its share of the block table.
  const size_t per = a.tokens / a.requests;
  std::vector<tutti_request> reqs(a.requests);
  for (size_t i = 0; i < a.requests; ++i) {
    tutti_request& r = reqs[i];
    std::memset(&r, 0, sizeof r);
    r.tokens = kv.tokens().data() + i * per;
    r.num_tokens = per;
    r.block_table = kv.table().data() + i * per / a.block_tokens;
    r.num_block_ids = per / a.block_tokens;
    r.token_end = TUTTI_TOKENS_ALL;
  }

  auto run_batch = [&](tutti_op op, Row& row) {
    row.bench = op == TUTTI_OP_LOAD ? "load" : "store";
    row.backend = backend;
    row.io_mode = std::string(io_mode) + (a.dram_tier.empty() ? "" : "+tier");
    tutti_stats s0{}, s1{};
    s0.struct_size = s1.struct_size = sizeof(tutti_stats);
    tutti_runtime_stats(rt, &s0);
    const ThreadSample k0 = sample_threads();
    double p0 = process_cpu_s(), t0 = now_s();
    double c0 = thread_cpu_s();
    tutti_batch* b = nullptr;
    int r = tutti_batch_create(rt, op, &b);
    if (!r) r = tutti_batch_add(b, reqs.data(), reqs.size());
    if (!r) r = tutti_batch_submit(b);
    for (uint32_t l = 0; l < m.layers && !r; ++l) r = tutti_batch_wait_layer(b, l);
    if (!r) r = tutti_batch_wait(b);
    double c1 = thread_cpu_s();
    double t1 = now_s(), p1 = process_cpu_s();
    const ThreadCpu k = thread_cpu_between(k0, sample_threads());
    tutti_runtime_stats(rt, &s1);
    size_t moved = 0;
    for (size_t i = 0; i < reqs.size() && !r; ++i) {
      tutti_result res;
      tutti_batch_result(b, i, &res);
      moved += res.tokens;
    }
    tutti_batch_destroy(b);
    if (r) return call_failed(op == TUTTI_OP_LOAD ? "load" : "store", r);
    if (moved != (per / a.chunk_tokens) * a.chunk_tokens * a.requests) {
      std::fprintf(stderr, "tutti: %s moved %zu tokens, expected all\n", row.bench.c_str(), moved);
      return 2;
    }
    row.bytes = op == TUTTI_OP_LOAD ? s1.bytes_read - s0.bytes_read : s1.bytes_written - s0.bytes_written;
    row.seconds = t1 - t0;
    row.gbps = static_cast<double>(row.bytes) / row.seconds / 1e9;
    row.cpu_us_layer = (c1 - c0) * 1e6 / m.layers;
    row.io_cpu_us_layer = (p1 - p0) * 1e6 / m.layers;
    row.cpu_s_per_gb = row.bytes ? (p1 - p0) / (static_cast<double>(row.bytes) / 1e9) : 0;
    row.sched_us_layer = k.sched * 1e6 / m.layers;
    row.sqpoll_us_layer = k.sqpoll * 1e6 / m.layers;
    row.workers_us_layer = k.workers * 1e6 / m.layers;
    row.ios_layer = static_cast<double>(s1.ios - s0.ios) / m.layers;
    if (!a.dram_tier.empty() && op == TUTTI_OP_LOAD) {
      const uint64_t hits = s1.tier_hits - s0.tier_hits, all = hits + s1.tier_misses - s0.tier_misses;
      row.tier_hit_ratio = all ? static_cast<double>(hits) / static_cast<double>(all) : 0;
    }
    row.has_cpu = true;
    return 0;
  };

  kv.fill();
  print.step("store");
  if ((out.rc = run_batch(TUTTI_OP_STORE, out.store))) {
    tutti_runtime_close(rt);
    return out;
  }
  // Loads are repeated, each right after a raw read of the same bytes; the medians are
  // reported (this kind of disk varies by 2x from one pass to the next).
  if (!raw->read_at) raw->read_at = sweep(false);
  raw_bandwidth(out.path, out.data_offset, out.data_bytes, *raw->read_at);  // first pass, not counted
  std::vector<RawMeasure> raws;
  std::vector<Row> loads;
  out.load.verified = true;
  for (unsigned rep = 0; rep < a.repeat; ++rep) {
    kv.clear();
    print.step("raw read " + std::to_string(rep + 1) + "/" + std::to_string(a.repeat));
    raws.push_back(raw_bandwidth(out.path, out.data_offset, out.data_bytes, *raw->read_at));
    print.step("load " + std::to_string(rep + 1) + "/" + std::to_string(a.repeat));
    size_t hit = 0;
    tutti_lookup(rt, reqs[0].tokens, reqs[0].num_tokens, nullptr, 0, &hit);
    Row row;
    if ((out.rc = run_batch(TUTTI_OP_LOAD, row))) {
      tutti_runtime_close(rt);
      return out;
    }
    loads.push_back(row);
    print.step("verify " + std::to_string(rep + 1) + "/" + std::to_string(a.repeat));
    out.load.verified = out.load.verified && hit == (per / a.chunk_tokens) * a.chunk_tokens && kv.verify();
  }
  std::sort(raws.begin(), raws.end(), [](const RawMeasure& x, const RawMeasure& y) { return x.gbps < y.gbps; });
  std::sort(loads.begin(), loads.end(), [](const Row& x, const Row& y) { return x.gbps < y.gbps; });
  raw->read = raws[raws.size() / 2];
  bool verified = out.load.verified;
  out.load = loads[loads.size() / 2];
  out.load.verified = verified;
  out.store.verified = out.load.verified;  // a store is verified by the loads that follow
  out.store.direct = out.load.direct = std::string(io_mode) == "object" && a.direct != "off" &&
                                       KvBinding(layout, a.chunk_tokens).direct_capable();
  print.end_run(out.load.verified ? "ok" : "MISMATCH");
  tutti_runtime_close(rt);
  return out;
}

}  // namespace tutti::cli
