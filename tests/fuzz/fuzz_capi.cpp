// SPDX-License-Identifier: Apache-2.0
// fuzz_capi — the C ABI driven by a sequence of calls the input spells: options, runtime open and
// close, register_kv, lookup, batches (create/add/submit/layer_ready/wait_layer/wait/result/
// chunk_status/destroy) with fuzzed requests and odd call orders, stats; over a pool of a few
// slots in a temp directory (tmpfs where there is one), reopened within an input, removed after it.
//
// Input, read front to back (FuzzInput: a value takes one byte, or two for a range over 255;
// zeros past the end; 0 is always the ordinary choice):
//   shape (0-2), HND, fused (3); then the options of step_open, then register unless 7;
//   then steps, each [kind 0-20, batch slot 0-1, the step's own values]. A prompt is [base
//   sequence 0-3, length, turn flag (+ where it turns from the base into its own tokens),
//   own-token seed, salt kind 0-3 (+ a byte)]. tests/fuzz/make-corpus writes seeds in this grammar.
// Invariants: no crash, leak, UB or hang; every return is a code of the enum, with a message
// when it is not 0; counts stay in range (a lookup hit is whole chunks of the prompt, n <= cap);
// and every chunk a load reports as loaded holds exactly the bytes stored under its key, which
// are a function of (namespace, salt, tokens up to the row's own), so they can be recomputed.
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz.hpp"

namespace {

// ---- The KV cache: shapes, memory, the byte pattern --------------------------------------

struct ShapeChoice {
  uint32_t layers, heads, head_dim, elem_bytes, block_tokens, chunk_tokens;
};
// Tiny rows; 4 KiB NHD blocks (straight-to-block I/O); odd sizes with 3 heads and 2-token blocks.
constexpr ShapeChoice kShapes[] = {
    {2, 1, 8, 2, 4, 8},
    {3, 2, 64, 2, 16, 16},
    {1, 3, 5, 4, 2, 6},
    {2, 1, 8, 2, 3, 8},  // chunks start inside blocks
};
constexpr size_t kBatchSlots = 2;   // batches alive at once
constexpr size_t kMaxRequests = 3;  // requests per batch, each with its own blocks
constexpr size_t kMaxChunks = 5;    // per prompt
constexpr int kMaxSteps = 48;

// What the inputs did, printed at exit: the byte comparisons did run.
struct Counts {
  uint64_t inputs, registered, lookup_hits, stored_chunks, loaded_chunks;
} g_counts;

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_bytes(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = mix(h ^ b[i] ^ (uint64_t{i} << 40));
  return mix(h ^ n);
}

struct Kv {
  ShapeChoice s{};
  uint32_t num_blocks = 0, blocks_per_region = 0;
  bool hnd = false, fused = false;
  tutti_kv_layout layout{};
  std::vector<void*> k, v;  // per layer
  std::vector<std::unique_ptr<unsigned char, decltype(&free)>> mem;

  size_t row() const { return size_t{s.head_dim} * s.elem_bytes; }
  unsigned char* at(uint32_t layer, int kv, int32_t block, size_t tok_in_block, uint32_t head) const {
    auto* base = static_cast<unsigned char*>(kv ? v[layer] : k[layer]);
    return base + block * layout.block_stride + tok_in_block * layout.token_stride + head * layout.head_stride;
  }
};

void kv_init(Kv& kv, const ShapeChoice& s, bool hnd, bool fused) {
  kv.s = s;
  kv.hnd = hnd;
  kv.fused = fused;
  // A prompt's blocks: up to kMaxChunks + 1 chunks, of twice the shape's chunk_tokens when an
  // input opens the runtime with that (step_open).
  kv.blocks_per_region = (kMaxChunks + 1) * 2 * s.chunk_tokens / s.block_tokens;
  kv.num_blocks = kBatchSlots * kMaxRequests * kv.blocks_per_region + 1;
  FUZZ_CHECK(tutti_kv_layout_init(&kv.layout, s.layers, kv.num_blocks, s.block_tokens, s.heads, s.head_dim,
                                  s.elem_bytes, hnd) == 0, "tutti_kv_layout_init: %s", tutti_last_error());
  const size_t tensor = kv.num_blocks * kv.layout.block_stride;
  auto alloc = [&](size_t bytes) {
    void* p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    FUZZ_CHECK(p, "out of memory");
    std::memset(p, 0xee, bytes);
    kv.mem.emplace_back(static_cast<unsigned char*>(p), &free);
    return p;
  };
  for (uint32_t l = 0; l < s.layers; ++l) {
    if (fused) {
      void* p = alloc(2 * tensor);
      kv.k.push_back(p);
      kv.v.push_back(static_cast<unsigned char*>(p) + tensor);
    } else {
      kv.k.push_back(alloc(tensor));
      kv.v.push_back(alloc(tensor));
    }
  }
  kv.layout.k_base = kv.k.data();
  kv.layout.v_base = fused ? nullptr : kv.v.data();
  kv.layout.v_offset = fused ? tensor : 0;
}

// One row's expected bytes: a function of its token's prefix value and the row's place.
void pattern_row(uint64_t chain, uint32_t layer, int kv, size_t tok, uint32_t head, unsigned char* out, size_t n) {
  const uint64_t seed = mix(chain ^ (uint64_t{layer} << 48) ^ (uint64_t(kv) << 47) ^ (uint64_t{tok} << 20) ^ head);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = mix(seed + i);
    std::memcpy(out + i, &w, std::min<size_t>(8, n - i));
  }
}

// ---- Prompts and requests ------------------------------------------------------------------

struct Prompt {
  std::vector<int32_t> tokens;
  std::string salt;
  // prefix[t]: (namespace, salt, tokens 0..t). Whatever tutti hands back for token t was stored
  // by a prompt with the same prefix (whole or partial chunk keys chain over every token
  // before), so a row's pattern is a function of it.
  std::vector<uint64_t> prefix;
};

// Four base sequences, each prompt a prefix of one that may turn into its own tokens: prompts
// share prefixes, so lookups and loads hit.
Prompt make_prompt(FuzzInput& in, const std::string& ns, uint32_t ct) {  // ct: how long prompts get
  Prompt p;
  const uint32_t base = in.in<uint32_t>(0, 3);
  const size_t n = in.in<size_t>(0, kMaxChunks * ct + ct - 1);
  const size_t diverge = in.flag() ? in.in<size_t>(0, n) : n;
  const uint64_t own = in.byte();
  for (size_t i = 0; i < n; ++i)
    p.tokens.push_back(static_cast<int32_t>(i < diverge ? mix(base * 1000 + i) % 50000 : mix(own << 32 | i) % 50000));
  switch (in.in<int>(0, 3)) {
    case 0: case 1: break;
    case 2: p.salt = "lora-1"; break;
    case 3: p.salt = std::string(1, static_cast<char>(in.byte())); break;
  }
  uint64_t h = hash_bytes(hash_bytes(0x7475747469, ns.data(), ns.size()), p.salt.data(), p.salt.size());
  for (size_t t = 0; t < n; ++t) {
    h = hash_bytes(h, p.tokens.data() + t, sizeof(int32_t));
    p.prefix.push_back(h);
  }
  return p;
}

struct Request {
  Prompt p;
  std::vector<int32_t> table;
  size_t region = 0;
  tutti_request r{};
};

struct BatchSlot {
  tutti_batch* b = nullptr;
  int op = TUTTI_OP_LOAD;
  std::vector<std::unique_ptr<Request>> reqs;  // stay put until the batch is destroyed
  std::vector<std::unique_ptr<Request>> refused;
  bool waited = false;
};

// ---- The whole state of one input -----------------------------------------------------

struct State {
  std::string dir;
  Kv kv;
  uint32_t ct = 0;  // chunk_tokens of the runtime registered last
  uint32_t partial = 16;  // its partial_tokens
  std::string ns;
  tutti_runtime* rt = nullptr;
  bool registered = false;
  BatchSlot slots[kBatchSlots];
  tutti_stats last{};
};

void check_rc(const char* call, int rc) { FUZZ_CHECK_RC(call, rc); }

// Fills the blocks of a request's table with the pattern of every token it covers.
void fill(const Kv& kv, const Request& q) {
  std::vector<unsigned char> row(kv.row());
  for (size_t t = 0; t < q.p.tokens.size(); ++t) {
    if (t / kv.s.block_tokens >= q.table.size()) return;
    const int32_t block = q.table[t / kv.s.block_tokens];
    if (block < 0 || static_cast<uint32_t>(block) >= kv.num_blocks) continue;
    for (uint32_t l = 0; l < kv.s.layers; ++l)
      for (int side = 0; side < 2; ++side)
        for (uint32_t h = 0; h < kv.s.heads; ++h) {
          pattern_row(q.p.prefix[t], l, side, t, h, row.data(), row.size());
          std::memcpy(kv.at(l, side, block, t % kv.s.block_tokens, h), row.data(), row.size());
        }
  }
}

// Sets a request's region to a value no pattern row has.
void poison(const Kv& kv, size_t region) {
  const size_t first = region * kv.blocks_per_region;
  for (uint32_t l = 0; l < kv.s.layers; ++l)
    for (int side = 0; side < 2; ++side)
      std::memset(kv.at(l, side, static_cast<int32_t>(first), 0, 0), 0xa5, kv.blocks_per_region * kv.layout.block_stride);
}

// A loaded chunk's tokens [lo, hi) (of the prompt) must hold the bytes stored under its key.
void check_loaded_tokens(const Kv& kv, const Request& q, size_t c, size_t lo, size_t hi) {
  FUZZ_CHECK(lo <= hi && hi <= q.p.tokens.size(), "chunk %zu reported loaded, tokens [%zu, %zu) of a %zu-token prompt",
             c, lo, hi, q.p.tokens.size());
  std::vector<unsigned char> want(kv.row());
  for (size_t t = lo; t < hi; ++t) {
    const int32_t block = q.table[t / kv.s.block_tokens];
    for (uint32_t l = 0; l < kv.s.layers; ++l)
      for (int side = 0; side < 2; ++side)
        for (uint32_t h = 0; h < kv.s.heads; ++h) {
          pattern_row(q.p.prefix[t], l, side, t, h, want.data(), want.size());
          const unsigned char* got = kv.at(l, side, block, t % kv.s.block_tokens, h);
          FUZZ_CHECK(std::memcmp(got, want.data(), want.size()) == 0,
                     "WRONG BYTES: a load reported chunk %zu of a %zu-token prompt as loaded, but layer %u %c, token %zu, "
                     "head %u differs from what was stored under its key (got %02x.., want %02x..)",
                     c, q.p.tokens.size(), l, side ? 'V' : 'K', t, h, got[0], want[0]);
        }
  }
}

// After a batch's wait: results and chunk statuses are consistent, and loads hold the right bytes.
void check_batch(State& st, BatchSlot& s) {
  for (size_t i = 0; i < s.reqs.size(); ++i) {
    const Request& q = *s.reqs[i];
    tutti_result res{};
    int rc = tutti_batch_result(s.b, i, &res);
    check_rc("tutti_batch_result", rc);
    int status[kMaxChunks + 2];
    size_t n = 0;
    int rc2 = tutti_batch_chunk_status(s.b, i, status, kMaxChunks + 2, &n);
    check_rc("tutti_batch_chunk_status", rc2);
    if (rc != 0 || rc2 != 0) continue;
    FUZZ_CHECK(res.chunks_ok <= res.chunks && res.chunks == n && n <= kMaxChunks + 1,
               "request %zu: result says %u of %u chunks, chunk_status gives %zu", i, res.chunks_ok, res.chunks, n);
    FUZZ_CHECK(res.tokens <= size_t{res.chunks} * st.ct && fuzz_known_code(res.status),
               "request %zu: result tokens %zu, status %d for %u chunks", i, res.tokens, res.status, res.chunks);
    const size_t first = q.r.token_begin / st.ct;
    // A load moves exactly [token_begin, token_end); TUTTI_TOKENS_ALL: every whole chunk.
    const size_t end = q.r.token_end == TUTTI_TOKENS_ALL ? q.r.num_tokens / st.ct * st.ct : q.r.token_end;
    for (size_t j = 0; j < n; ++j) {
      FUZZ_CHECK(fuzz_known_code(status[j]), "request %zu chunk %zu: status %d", i, j, status[j]);
      if (status[j] != 0) continue;
      if (s.op == TUTTI_OP_LOAD) {
        const size_t start = (first + j) * st.ct;
        check_loaded_tokens(st.kv, q, first + j, std::max(start, q.r.token_begin), std::min(start + st.ct, end));
        ++g_counts.loaded_chunks;
      } else {
        ++g_counts.stored_chunks;
      }
    }
  }
}

void destroy_batch(BatchSlot& s) {
  tutti_batch_destroy(s.b);
  s = BatchSlot{};
}

// ---- Steps -----------------------------------------------------------------------------

const char* pick(FuzzInput& in, std::initializer_list<const char*> v) {
  return v.begin()[in.in<size_t>(0, v.size() - 1)];
}

void step_open(State& st, FuzzInput& in) {
  if (st.rt) return;
  tutti_options* o = nullptr;
  FUZZ_CHECK(tutti_options_create(&o) == 0, "tutti_options_create: %s", tutti_last_error());
  const std::string p0 = st.dir + "/p0", p1 = st.dir + "/p1";
  // (A value this tutti does not know leaves the default in force: the harness outlives renames.)
  auto set = [&](const char* k, const std::string& v) {
    int rc = tutti_options_set(o, k, v.c_str());
    check_rc("tutti_options_set", rc);
    FUZZ_CHECK(rc == 0 || rc == TUTTI_EINVAL, "tutti_options_set(%s, %s) = %d: %s", k, v.c_str(), rc, tutti_last_error());
  };
  switch (in.in<int>(0, 7)) {
    default: set("pool", p0); break;
    case 1: set("pool", p0); set("pool", p1); break;  // striped over two files
    case 2: set("pool", p0); set("pool", p0); break;  // the same file twice
    case 3: set("pool", "file://" + p0 + "?size=1200K"); break;
  }
  // A few slots (1 MiB of header, then tiny slots), so stores evict.
  set("capacity", pick(in, {"1100K", "1200K", "1300K", "2M", "900K"}));
  const uint32_t mult = in.in<uint32_t>(0, 4) == 4 ? 2 : 1;  // a different shape: ELAYOUT
  set("chunk_tokens", std::to_string(st.kv.s.chunk_tokens * mult));
  st.ns = pick(in, {"", "", "model-a", "model-b"});
  if (!st.ns.empty()) set("namespace", st.ns);
  set("backend", pick(in, {"posix", "posix", "posix", "uring", "dram", "auto"}));
  set("threads", pick(in, {"1", "2", "3"}));
  set("rings", "1");
  set("queue_depth", pick(in, {"2", "8"}));
  set("lookahead", pick(in, {"1", "2", "4"}));
  set("staging", pick(in, {"64K", "1M", "8K"}));
  set("direct_to_blocks", pick(in, {"auto", "on", "off"}));
  set("verify", pick(in, {"on", "on", "unsafe-off"}));
  set("io_mode", pick(in, {"object", "object", "per-block-baseline"}));
  set("dram_tier", pick(in, {"0", "0", "256K"}));
  const std::string partial = pick(in, {"16", "2", "4", "0"});
  set("partial_tokens", partial);
  set("create", in.in<int>(0, 7) == 7 ? "0" : "1");
  const int rc = tutti_runtime_open(o, &st.rt);
  check_rc("tutti_runtime_open", rc);
  FUZZ_CHECK((rc == 0) == (st.rt != nullptr), "tutti_runtime_open = %d, runtime %p", rc, static_cast<void*>(st.rt));
  tutti_options_destroy(o);
  st.registered = false;
  st.ct = st.kv.s.chunk_tokens * mult;
  st.partial = static_cast<uint32_t>(std::stoul(partial));
  st.last = tutti_stats{};
}

void step_register(State& st, FuzzInput& in) {
  tutti_kv_layout l = st.kv.layout;
  const int how = in.in<int>(0, 9);
  if (how == 1) l.struct_size = sizeof l - 8;
  if (how == 2) l.memory = 7;
  if (how == 3) l.num_blocks = 0;
  const int rc = tutti_runtime_register_kv(st.rt, how == 4 ? nullptr : &l);
  check_rc("tutti_runtime_register_kv", rc);
  if (!st.rt || how == 4) FUZZ_CHECK(rc == TUTTI_EINVAL, "register_kv with a NULL argument = %d", rc);
  if (rc == 0) {
    FUZZ_CHECK(how == 0 || how > 4, "register_kv accepted a broken layout (case %d)", how);
    FUZZ_CHECK(!st.registered, "register_kv succeeded twice on one runtime");
    st.registered = true;
    ++g_counts.registered;
  }
}

void step_lookup(State& st, FuzzInput& in) {
  const Prompt p = make_prompt(in, st.ns, st.ct ? st.ct : 1);
  size_t cached = 12345;
  const bool null_tokens = in.in<int>(0, 15) == 15 && !p.tokens.empty();
  const int rc = tutti_lookup(st.rt, null_tokens ? nullptr : p.tokens.data(), p.tokens.size(), p.salt.data(),
                              p.salt.size(), &cached);
  check_rc("tutti_lookup", rc);
  if (null_tokens && st.registered) FUZZ_CHECK(rc == TUTTI_EINVAL, "tutti_lookup with NULL tokens = %d", rc);
  if (rc == 0 && cached) ++g_counts.lookup_hits;
  // Whole chunks, then a partial one in multiples of partial_tokens.
  const uint32_t g = st.partial < st.ct ? st.partial : 0;
  if (rc == 0)
    FUZZ_CHECK(cached <= p.tokens.size() && (cached % st.ct == 0 || (g && cached % st.ct % g == 0)),
               "tutti_lookup: %zu tokens cached of a %zu-token prompt (chunks of %u)", cached, p.tokens.size(), st.ct);
}

void step_create(State& st, FuzzInput& in, BatchSlot& s) {
  if (s.b) return;
  // Ops outside the enum are refused, negative ones too (TUTTI_OP_MIN_ENUM_ makes every int a
  // value of tutti_op).
  static const int kOps[] = {TUTTI_OP_LOAD, TUTTI_OP_STORE, TUTTI_OP_LOAD, TUTTI_OP_STORE, TUTTI_OP_STORE_BY_LAYER,
                             3, 0x7fffffff, -1, INT32_MIN};
  const int op = kOps[in.in<size_t>(0, std::size(kOps) - 1)];
  const int rc = tutti_batch_create(st.rt, static_cast<tutti_op>(op), &s.b);
  check_rc("tutti_batch_create", rc);
  FUZZ_CHECK((rc == 0) == (s.b != nullptr), "tutti_batch_create = %d, batch %p", rc, static_cast<void*>(s.b));
  FUZZ_CHECK(rc != 0 || op == TUTTI_OP_LOAD || op == TUTTI_OP_STORE || op == TUTTI_OP_STORE_BY_LAYER,
             "tutti_batch_create accepted op %d", op);
  s.op = op;
}

void step_add(State& st, FuzzInput& in, BatchSlot& s, size_t slot_index) {
  const size_t n = in.in<size_t>(0, kMaxRequests - std::min(s.reqs.size(), kMaxRequests));
  const uint32_t ct = st.ct ? st.ct : st.kv.s.chunk_tokens;
  std::vector<std::unique_ptr<Request>> added;
  std::vector<tutti_request> reqs;
  for (size_t i = 0; i < n; ++i) {
    auto q = std::make_unique<Request>();
    q->p = make_prompt(in, st.ns, ct);
    q->region = slot_index * kMaxRequests + s.reqs.size() + i;
    const size_t first = q->region * st.kv.blocks_per_region;
    const size_t need = (q->p.tokens.size() + st.kv.s.block_tokens - 1) / st.kv.s.block_tokens;
    for (size_t j = 0; j < std::min<size_t>(need, st.kv.blocks_per_region); ++j)
      q->table.push_back(static_cast<int32_t>(first + j));
    if (in.flag() && q->table.size() > 1)  // blocks in any order within the region
      std::swap(q->table[0], q->table[in.in<size_t>(1, q->table.size() - 1)]);
    switch (in.in<int>(0, 15)) {  // misuse, sometimes
      case 1: if (!q->table.empty()) q->table.back() = -1; break;
      case 2: if (!q->table.empty()) q->table[0] = static_cast<int32_t>(st.kv.num_blocks); break;
      case 3: if (!q->table.empty()) q->table.pop_back(); break;
      default: break;
    }
    tutti_request& r = q->r;
    r.tokens = q->p.tokens.data();
    r.num_tokens = q->p.tokens.size();
    r.block_table = q->table.data();
    r.num_block_ids = q->table.size();
    const size_t chunks = q->p.tokens.size() / ct;
    r.token_begin = ct * in.in<size_t>(0, chunks);
    if (in.in<int>(0, 7) == 7) r.token_begin = in.in<size_t>(0, r.num_tokens + 1);  // any token
    switch (in.in<int>(0, 3)) {
      case 0: r.token_end = r.num_tokens; break;
      case 1: r.token_end = TUTTI_TOKENS_ALL; break;
      default: r.token_end = in.in<size_t>(0, r.num_tokens + 1); break;
    }
    r.salt = q->p.salt.empty() ? nullptr : q->p.salt.data();
    r.salt_len = q->p.salt.size();
    // A store reads its blocks, a load writes them: the pattern goes in before a store (and
    // before an op outside the enum, whatever it does), poison before a load.
    poison(st.kv, q->region);
    if (s.op != TUTTI_OP_LOAD) fill(st.kv, *q);
    reqs.push_back(r);
    added.push_back(std::move(q));
  }
  const bool null_reqs = n > 0 && in.in<int>(0, 15) == 15;
  const int rc = tutti_batch_add(s.b, null_reqs ? nullptr : reqs.data(), n);
  check_rc("tutti_batch_add", rc);
  if (!s.b) FUZZ_CHECK(rc == TUTTI_EINVAL, "tutti_batch_add on a NULL batch = %d", rc);
  if (null_reqs) FUZZ_CHECK(rc != 0, "tutti_batch_add accepted NULL requests");
  // An add that fails adds nothing (its requests' memory is kept all the same, in case).
  for (auto& q : added) (rc == 0 ? s.reqs : s.refused).push_back(std::move(q));
}

void step_wait(State& st, BatchSlot& s) {
  const int rc = tutti_batch_wait(s.b);
  check_rc("tutti_batch_wait", rc);
  if (!s.b) return;
  if (rc == TUTTI_ESTATE) return;  // not submitted
  s.waited = true;
  check_batch(st, s);
}

void step_stats(State& st, FuzzInput& in) {
  static const size_t kSizes[] = {sizeof(tutti_stats), offsetof(tutti_stats, tier_hits), 8, sizeof(tutti_stats) + 8};
  const size_t size = kSizes[in.in<size_t>(0, std::size(kSizes) - 1)];
  // Exactly the bytes the caller claims: a write past struct_size is a heap overflow.
  std::unique_ptr<unsigned char[]> buf(new unsigned char[std::max(size, sizeof(tutti_stats))]);
  std::memset(buf.get(), 0, std::max(size, sizeof(tutti_stats)));
  auto* s = reinterpret_cast<tutti_stats*>(buf.get());
  s->struct_size = static_cast<uint32_t>(size);
  std::unique_ptr<unsigned char[]> exact(new unsigned char[size]);
  std::memcpy(exact.get(), buf.get(), size);
  const int rc = tutti_runtime_stats(st.rt, reinterpret_cast<tutti_stats*>(exact.get()));
  check_rc("tutti_runtime_stats", rc);
  if (rc != 0 || size != sizeof(tutti_stats)) return;
  std::memcpy(s, exact.get(), size);
  FUZZ_CHECK(s->slots_used <= s->slots_total && s->hit_chunks >= st.last.hit_chunks &&
                 s->stored_chunks >= st.last.stored_chunks && s->lookups >= st.last.lookups &&
                 s->bytes_read >= st.last.bytes_read && s->evictions >= st.last.evictions,
             "stats: %" PRIu64 " of %" PRIu64 " slots used; counters went back", s->slots_used, s->slots_total);
  st.last = *s;
}

void step_layer_wait_ns(State& st, FuzzInput& in) {
  const size_t cap = in.in<size_t>(0, 4);
  std::unique_ptr<uint64_t[]> ns(cap ? new uint64_t[cap] : nullptr);
  size_t n = 99;
  const int rc = tutti_runtime_layer_wait_ns(st.rt, ns.get(), cap, &n);
  check_rc("tutti_runtime_layer_wait_ns", rc);
  if (rc == 0) FUZZ_CHECK(n <= cap, "layer_wait_ns: n %zu > cap %zu", n, cap);
}

void step_chunk_status(BatchSlot& s, FuzzInput& in) {
  const size_t req = in.in<size_t>(0, kMaxRequests);
  const size_t cap = in.in<size_t>(0, 3);
  std::unique_ptr<int[]> status(cap ? new int[cap] : nullptr);
  size_t n = 99;
  const bool null_status = cap && in.in<int>(0, 7) == 7;
  const int rc = tutti_batch_chunk_status(s.b, req, null_status ? nullptr : status.get(), cap, &n);
  check_rc("tutti_batch_chunk_status", rc);
  if (null_status) FUZZ_CHECK(rc != 0, "chunk_status accepted a NULL status with cap %zu", cap);
  if (rc == 0) FUZZ_CHECK(n <= cap, "chunk_status: n %zu > cap %zu", n, cap);
}

// A store or load of one prompt, start to end: the cache fills, and loads after lookups hit.
void step_whole(State& st, FuzzInput& in, BatchSlot& s, size_t slot_index, int op) {
  if (s.b) return;
  int rc = tutti_batch_create(st.rt, static_cast<tutti_op>(op), &s.b);
  check_rc("tutti_batch_create", rc);
  if (rc != 0) return;
  s.op = op;
  step_add(st, in, s, slot_index);
  rc = tutti_batch_submit(s.b);
  check_rc("tutti_batch_submit", rc);
  if (rc == 0 && in.flag())
    for (uint32_t l = 0; l < st.kv.s.layers; ++l) check_rc("tutti_batch_wait_layer", tutti_batch_wait_layer(s.b, l));
  step_wait(st, s);
  destroy_batch(s);
}

void remove_pool_files(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
}

std::string g_dir;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // tmpfs where there is one: pools are created and removed for every input.
  const char* tmp = getenv("TUTTI_FUZZ_DIR");
  struct stat sb;
  if (!tmp) tmp = ::stat("/dev/shm", &sb) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string templ = std::string(tmp) + "/tutti-fuzz-capi-XXXXXX";
  FUZZ_CHECK(mkdtemp(templ.data()) != nullptr, "mkdtemp in %s failed", tmp);
  g_dir = templ;
  atexit([] {
    remove_pool_files(g_dir);
    rmdir(g_dir.c_str());
    if (g_counts.inputs)  // (not in the parent of -fork workers)
      std::fprintf(stderr,
                   "fuzz_capi: %" PRIu64 " inputs, %" PRIu64 " KV caches registered, %" PRIu64 " lookup hits, %" PRIu64
                   " chunks stored, %" PRIu64 " chunks loaded and compared byte for byte\n",
                   g_counts.inputs, g_counts.registered, g_counts.lookup_hits, g_counts.stored_chunks,
                   g_counts.loaded_chunks);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  ++g_counts.inputs;
  State st;
  st.dir = g_dir;
  remove_pool_files(st.dir);
  const ShapeChoice& shape = kShapes[in.in<size_t>(0, std::size(kShapes) - 1)];
  kv_init(st.kv, shape, in.flag(), in.in<int>(0, 3) == 3);
  st.ct = shape.chunk_tokens;
  step_open(st, in);
  if (st.rt && in.in<int>(0, 7) != 7) step_register(st, in);

  for (int steps = 0; steps < kMaxSteps && in.remaining() > 0; ++steps) {
    const int kind = in.in<int>(0, 20);
    const size_t si = in.in<size_t>(0, kBatchSlots - 1);
    BatchSlot& s = st.slots[si];
    switch (kind) {
      case 0: step_open(st, in); break;
      case 1: step_register(st, in); break;
      case 2: case 3: step_lookup(st, in); break;
      case 4: step_create(st, in, s); break;
      case 5: step_add(st, in, s, si); break;
      case 6: check_rc("tutti_batch_submit", tutti_batch_submit(s.b)); break;
      case 7:
        check_rc("tutti_batch_wait_layer",
                 tutti_batch_wait_layer(s.b, in.in<uint32_t>(0, st.kv.s.layers)));
        break;
      case 8: step_wait(st, s); break;
      case 9: {
        tutti_result r;
        check_rc("tutti_batch_result", tutti_batch_result(s.b, in.in<size_t>(0, kMaxRequests), &r));
        break;
      }
      case 10: step_chunk_status(s, in); break;
      case 11: destroy_batch(s); break;
      case 12: step_stats(st, in); break;
      case 13: step_layer_wait_ns(st, in); break;
      case 14:  // batches may outlive their runtime
        tutti_runtime_close(st.rt);
        st.rt = nullptr;
        st.registered = false;
        break;
      case 15: {
        const int rc = tutti_batch_wait_layer_async(s.b, 0, nullptr);
        check_rc("tutti_batch_wait_layer_async", rc);
        FUZZ_CHECK(rc != 0, "wait_layer_async succeeded on host memory");
        break;
      }
      case 16: case 17: step_whole(st, in, s, si, TUTTI_OP_STORE); break;
      case 18: case 19: step_whole(st, in, s, si, TUTTI_OP_LOAD); break;
      case 20:  // a store by layer waits for these; other batches refuse them
        check_rc("tutti_batch_layer_ready",
                 tutti_batch_layer_ready(s.b, in.in<uint32_t>(0, st.kv.s.layers), nullptr));
        break;
    }
  }

  for (auto& s : st.slots) {
    if (s.b && !s.waited && in.flag()) step_wait(st, s);
    destroy_batch(s);
  }
  tutti_runtime_close(st.rt);
  remove_pool_files(st.dir);
  return 0;
}
