// SPDX-License-Identifier: Apache-2.0
// tutti bench --remote URI: what the shared tier's cluster gives, measured with the values tutti
// keeps there: one chunk-layer of the model's shape per value (its 64-byte header, then the
// layer's bytes), written with SET and read back with GET, --remote-depth in flight per
// connection, with 1, 2, 4, ... --remote-connections connections (a thread and a client each).
// Every value read back is checked (header, checksum) and compared with what was written; the
// keys are deleted afterwards. CPU per GB moved: this process's (the client's), and the
// servers' own (INFO cpu of each master, and of its replicas, which copy every write). Then the
// tier itself, through two runtimes: one writes the prompt through, the other loads it.
#include "args.hpp"
#include "bench.hpp"

#ifdef TUTTI_HAVE_REMOTE
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "clock.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "output.hpp"
#include "remote/redis_cluster.hpp"
#include "remote/value.hpp"
#include "pool/pool.hpp"
#include "resolver/key.hpp"
#include "tutti.h"

namespace tutti::cli {

namespace {

using remote::Cluster;
using remote::Command;
using remote::Endpoint;
using remote::Reply;

// used_cpu_sys + used_cpu_user of every node's INFO cpu; -1 where a node does not say.
double servers_cpu_s(Cluster& c, const std::vector<Endpoint>& nodes) {
  double sum = 0;
  for (const auto& n : nodes) {
    Reply r = c.run_at(n, Command{{"INFO", "cpu"}, {}});
    if (r.type() != Reply::Type::kString) return -1;
    const std::string_view info = r.str();
    for (const char* field : {"used_cpu_sys:", "used_cpu_user:"}) {
      size_t at = info.find(field);
      if (at == std::string_view::npos) return -1;
      sum += std::strtod(std::string(info.substr(at + std::strlen(field), 32)).c_str(), nullptr);
    }
  }
  return sum;
}

// Every node of the cluster, replicas too (CLUSTER NODES of a master).
std::vector<Endpoint> all_nodes(Cluster& c) {
  std::vector<Endpoint> out = c.masters();
  Reply r = c.run_at(out.at(0), Command{{"CLUSTER", "NODES"}, {}});
  const std::string_view text = r.type() == Reply::Type::kString ? r.str() : std::string_view();
  for (size_t line = 0; line < text.size();) {
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(line, end - line);
    line = end + 1;
    // "<id> <ip:port@cport[,hostname]> <flags> ...": live replicas only
    size_t sp1 = l.find(' '), sp2 = l.find(' ', sp1 + 1), sp3 = l.find(' ', sp2 + 1);
    if (sp3 == std::string_view::npos) continue;
    std::string_view addr = l.substr(sp1 + 1, sp2 - sp1 - 1), flags = l.substr(sp2 + 1, sp3 - sp2 - 1);
    if (flags.find("slave") == std::string_view::npos || flags.find("fail") != std::string_view::npos) continue;
    addr = addr.substr(0, addr.find('@'));
    try {
      for (const auto& e : remote::parse_seeds(addr))
        if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    } catch (const Error&) {
    }
  }
  return out;
}

struct Phase {
  double seconds = 0, client_cpu = 0, server_cpu = -1;
  size_t failed = 0, wrong = 0;
};

// A runtime of the tier phases: a pool of its own, the bench's KV cache, the cluster as its
// remote tier (no promotion: every load of B comes from the cluster). Null on failure (said).
tutti_runtime* open_tier_runtime(const BenchArgs& a, const std::string& pool, const std::string& ns, KvCache& kv,
                                 unsigned connections = 1) {
  const Model& m = *a.model;
  const Shape shape{m.layers, m.heads, m.head_dim, m.elem_bytes, a.chunk_tokens, false};
  ::unlink(pool.c_str());
  tutti_options* o = nullptr;
  tutti_options_create(&o);
  int rc = 0;
  const std::pair<const char*, std::string> opts[] = {
      {"pool", pool},
      {"capacity", std::to_string(Geometry::file_bytes_for(shape, a.tokens / a.chunk_tokens + 1))},
      {"chunk_tokens", std::to_string(a.chunk_tokens)},
      {"partial_tokens", "0"},
      {"namespace", ns},
      {"remote", a.remote},
      {"remote_timeout_ms", std::to_string(a.remote_timeout_ms)},
      {"remote_promote", "0"},
      {"remote_connections", std::to_string(connections)}};
  for (const auto& [k, v] : opts)
    if (!rc && (rc = tutti_options_set(o, k, v.c_str()))) call_failed(k, rc);
  tutti_runtime* rt = nullptr;
  if (!rc && (rc = tutti_runtime_open(o, &rt))) call_failed("open", rc);
  tutti_options_destroy(o);
  const tutti_kv_layout layout = kv.layout();
  if (!rc && (rc = tutti_runtime_register_kv(rt, &layout))) call_failed("register", rc);
  if (rc) {
    tutti_runtime_close(rt);
    return nullptr;
  }
  return rt;
}

tutti_stats stats_of(tutti_runtime* rt) {
  tutti_stats s{};
  s.struct_size = sizeof s;
  tutti_runtime_stats(rt, &s);
  return s;
}

// The whole prompt, stored or loaded layer by layer; the batch's status.
int move_prompt(tutti_runtime* rt, KvCache& kv, tutti_op op, uint32_t layers) {
  tutti_request r{};
  r.tokens = kv.tokens().data(), r.num_tokens = kv.tokens().size();
  r.block_table = kv.table().data(), r.num_block_ids = kv.table().size();
  r.token_end = TUTTI_TOKENS_ALL;
  tutti_batch* b = nullptr;
  int rc = tutti_batch_create(rt, op, &b);
  if (!rc) rc = tutti_batch_add(b, &r, 1);
  if (!rc) rc = tutti_batch_submit(b);
  for (uint32_t l = 0; l < layers && !rc && op == TUTTI_OP_LOAD; ++l) rc = tutti_batch_wait_layer(b, l);
  if (!rc) rc = tutti_batch_wait(b);
  tutti_batch_destroy(b);
  return rc;
}

}  // namespace

int run_remote_bench(const BenchArgs& a) {
  const Model& m = *a.model;
  const Shape shape{m.layers, m.heads, m.head_dim, m.elem_bytes, a.chunk_tokens, false};
  const uint64_t payload = shape.layer_bytes(), value_bytes = payload + remote::kValueHeaderBytes;
  const size_t chunks = a.tokens / a.chunk_tokens, values = chunks * m.layers;
  const auto seeds = remote::parse_seeds(a.remote);
  const std::chrono::milliseconds timeout(a.remote_timeout_ms);
  Cluster probe(seeds, timeout);
  const auto nodes = all_nodes(probe);

  // The values: chunk keys of a prompt no one else stores (a run's own namespace), each layer's
  // bytes a pattern of (chunk, layer), built before the clock starts.
  std::string ns = "tutti-bench-remote:" + std::to_string(::getpid()) + ":" + std::to_string(process_cpu_s());
  std::vector<int32_t> tokens(a.tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 + 1);
  const auto keys = chunk_keys(root_key(ns, nullptr, 0), tokens.data(), tokens.size(), a.chunk_tokens);
  const uint64_t fp = remote::shape_fingerprint(shape);
  std::vector<std::string> names(values), data(values);
  for (size_t v = 0; v < values; ++v) {
    const remote::ValueId id{keys[v / m.layers], fp, static_cast<uint32_t>(v % m.layers)};
    names[v] = remote::value_key(id);
    std::string& d = data[v];
    d.resize(value_bytes);
    auto* p = reinterpret_cast<uint64_t*>(d.data() + remote::kValueHeaderBytes);
    for (uint64_t w = 0; w < payload / 8; ++w) p[w] = (id.chunk.lo + w) * 0x9E3779B97F4A7C15ull ^ id.layer;
    remote::encode_value_header(id, payload, remote::payload_sum(p, payload), reinterpret_cast<uint8_t*>(d.data()));
  }

  if (!a.json)
    std::printf("tutti bench --remote: %s, %zu chunk-layer values of %s (%s of %s, %zu tokens), %zu nodes (%zu masters) "
                "from %s, %u in flight per connection\n",
                a.remote.c_str(), values, format_bytes(value_bytes).c_str(), format_bytes(values * value_bytes).c_str(),
                m.name, a.tokens, nodes.size(), probe.masters().size(), seeds[0].describe().c_str(), a.remote_depth);
  else
    std::printf("{\"schema\":1,\"run_info\":true,\"bench\":\"remote\",\"version\":%s,\"remote\":%s,\"model\":%s,"
                "\"tokens\":%zu,\"values\":%zu,\"value_bytes\":%" PRIu64 ",\"nodes\":%zu,\"masters\":%zu,\"depth\":%u}\n",
                json_string(tutti_version_string()).c_str(), json_string(a.remote).c_str(), json_string(m.name).c_str(),
                a.tokens, values, value_bytes, nodes.size(), probe.masters().size(), a.remote_depth);
  if (!a.json)
    std::printf("%-10s %5s %10s %9s %14s %14s %7s %s\n", "op", "conns", "GB/s", "seconds", "client cpu s/GB",
                "server cpu s/GB", "failed", "verified");

  // One phase: `op` over every value, split evenly over `conns` connections.
  auto phase = [&](const char* op, unsigned conns) {
    Phase r;
    const double cpu0 = process_cpu_s(), srv0 = servers_cpu_s(probe, nodes);
    std::atomic<size_t> failed{0}, wrong{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < conns; ++t)
      threads.emplace_back([&, t] {
        const size_t first = values * t / conns, end = values * (t + 1) / conns;
        try {
          Cluster c(seeds, timeout);
          std::vector<Command> cmds;
          for (size_t v = first; v < end; v += a.remote_depth) {
            const size_t n = std::min<size_t>(a.remote_depth, end - v);
            cmds.clear();
            for (size_t k = v; k < v + n; ++k) {
              if (op[0] == 's') cmds.push_back({{"SET", names[k], data[k]}, names[k]});
              else if (op[0] == 'g') cmds.push_back({{"GET", names[k]}, names[k]});
              else cmds.push_back({{"DEL", names[k]}, names[k]});
            }
            auto replies = c.run(cmds);
            for (size_t k = 0; k < n; ++k) {
              const Reply& rep = replies[k];
              if (!rep.ok()) {
                failed++;
              } else if (op[0] == 'g') {
                const remote::ValueId id{keys[(v + k) / m.layers], fp, static_cast<uint32_t>((v + k) % m.layers)};
                if (rep.type() != Reply::Type::kString || remote::check_value(rep.str(), id, payload) != remote::ValueStatus::kOk ||
                    rep.str() != data[v + k])
                  wrong++;
              }
            }
          }
        } catch (const Error&) {  // no client: none of its values moved
          failed += end - first;
        }
      });
    for (auto& th : threads) th.join();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.client_cpu = process_cpu_s() - cpu0;
    const double srv1 = servers_cpu_s(probe, nodes);
    r.server_cpu = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : -1;
    r.failed = failed;
    r.wrong = wrong;
    return r;
  };
  auto report = [&](const char* op, unsigned conns, const Phase& r, bool reads) {
    const double gb = static_cast<double>(values * value_bytes) / 1e9, gbps = gb / r.seconds;
    if (a.json) {
      std::printf("{\"schema\":1,\"bench\":\"remote-%s\",\"remote\":%s,\"connections\":%u,\"depth\":%u,\"bytes\":%" PRIu64
                  ",\"seconds\":%.4f,\"gbps\":%.3f,\"client_cpu_s_per_gb\":%.4f,\"server_cpu_s_per_gb\":%.4f,"
                  "\"failed\":%zu,\"verified\":%s}\n",
                  op, json_string(a.remote).c_str(), conns, a.remote_depth, values * value_bytes, r.seconds, gbps,
                  r.client_cpu / gb, r.server_cpu >= 0 ? r.server_cpu / gb : -1.0, r.failed,
                  reads && r.wrong == 0 && r.failed == 0 ? "true" : "false");
    } else {
      char server[32] = "n/a";
      if (r.server_cpu >= 0) std::snprintf(server, sizeof server, "%.3f", r.server_cpu / gb);
      std::printf("%-10s %5u %10.2f %9.3f %14.3f %14s %7zu %s\n", op, conns, gbps, r.seconds, r.client_cpu / gb, server,
                  r.failed, !reads ? "-" : r.wrong || r.failed ? "MISMATCH" : "ok");
    }
    std::fflush(stdout);
  };

  bool ok = true;
  std::vector<unsigned> counts;  // 1, 2, 4, ... and the most asked for
  for (unsigned c = 1; c < a.remote_connections; c *= 2) counts.push_back(c);
  counts.push_back(a.remote_connections);
  for (unsigned conns : counts) {
    Phase set = phase("set", conns);
    report("set", conns, set, false);
    Phase get = phase("get", conns);
    report("get", conns, get, true);
    phase("del", conns);
    ok = ok && set.failed == 0 && get.failed == 0 && get.wrong == 0;
    if (get.wrong) std::fprintf(stderr, "tutti bench --remote: %zu values read back differ from those written\n", get.wrong);
  }

  // The tier itself, end to end, on the same values' shape: runtime A stores the prompt in a
  // pool of its own and writes it through (tier-write: from the store's commit until the
  // cluster holds every chunk; the tier's writer thread, one connection); runtime B, with
  // another pool, loads it from the cluster layer by layer into a cleared KV cache and every
  // byte is compared (tier-load: the load batch, the median of --repeat), with as many loader
  // threads (remote_connections) as the rows above have connections.
  KvCache kv(a);
  kv.fill();
  const std::string tier_ns = ns + ":tier";
  Phase tw;
  if (tutti_runtime* rt = open_tier_runtime(a, a.pool + ".remote-a", tier_ns, kv)) {
    int rc = move_prompt(rt, kv, TUTTI_OP_STORE, m.layers);
    const double cpu0 = process_cpu_s(), srv0 = servers_cpu_s(probe, nodes), t0 = now_s();
    uint64_t written = 0;
    for (double progress = t0; !rc && written < chunks && now_s() - progress < 30;) {  // gives up when stuck
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (const uint64_t w = stats_of(rt).remote_written_chunks; w != written) written = w, progress = now_s();
    }
    tw.seconds = now_s() - t0, tw.client_cpu = process_cpu_s() - cpu0;
    const double srv1 = servers_cpu_s(probe, nodes);
    tw.server_cpu = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : -1;
    tw.failed = rc ? chunks : chunks - std::min<size_t>(chunks, written);
    tutti_runtime_close(rt);
    ::unlink((a.pool + ".remote-a").c_str());
  } else {
    tw.failed = chunks;
  }
  report("tier-write", 1, tw, false);
  auto tier_load = [&](unsigned conns) {
    Phase tl;
    tutti_runtime* rt = tw.failed ? nullptr : open_tier_runtime(a, a.pool + ".remote-b", tier_ns, kv, conns);
    if (!rt) {
      tl.failed = chunks;
      return tl;
    }
    std::vector<Phase> runs;
    for (unsigned i = 0; i < std::max(1u, a.repeat); ++i) {
      Phase r;
      kv.clear();
      const double cpu0 = process_cpu_s(), srv0 = servers_cpu_s(probe, nodes), t0 = now_s();
      const int rc = move_prompt(rt, kv, TUTTI_OP_LOAD, m.layers);
      r.seconds = now_s() - t0, r.client_cpu = process_cpu_s() - cpu0;
      const double srv1 = servers_cpu_s(probe, nodes);
      r.server_cpu = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : -1;
      r.failed = rc ? chunks : 0;
      r.wrong = !rc && !kv.verify();
      runs.push_back(r);
    }
    std::sort(runs.begin(), runs.end(), [](const Phase& x, const Phase& y) { return x.seconds < y.seconds; });
    tl = runs[runs.size() / 2];
    for (const Phase& r : runs) tl.failed = std::max(tl.failed, r.failed), tl.wrong += r.wrong;
    tutti_runtime_close(rt);
    ::unlink((a.pool + ".remote-b").c_str());
    return tl;
  };
  for (unsigned conns : counts) {
    const Phase tl = tier_load(conns);
    report("tier-load", conns, tl, true);
    ok = ok && tw.failed == 0 && tl.failed == 0 && tl.wrong == 0;
    if (tl.wrong) std::fprintf(stderr, "tutti bench --remote: a load from the tier differs from what was stored\n");
  }
  // The tier's values go as the others did.
  std::vector<std::string> tier_names;
  const auto tier_keys = chunk_keys(root_key(tier_ns, nullptr, 0), kv.tokens().data(), kv.tokens().size(), a.chunk_tokens);
  for (const Key& k : tier_keys)
    for (uint32_t l = 0; l < m.layers; ++l) tier_names.push_back(remote::value_key(remote::ValueId{k, fp, l}));
  std::vector<Command> dels;
  for (const auto& n : tier_names) dels.push_back({{"DEL", n}, n});
  probe.run(dels);
  return ok ? 0 : 1;
}

}  // namespace tutti::cli

#else

namespace tutti::cli {

int run_remote_bench(const BenchArgs&) {
  return usage_error("bench", "--remote: this build has no Redis Cluster client (build with hiredis: Debian's libhiredis-dev)");
}

}  // namespace tutti::cli

#endif
