// SPDX-License-Identifier: Apache-2.0
#include "runtime/batch.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "runtime/runtime.hpp"

namespace tutti {

namespace {

// A KV prefix with a hole is useless: every chunk after a failed one carries its status.
void fail_after_first_error(std::vector<int>& status) {
  int failed = 0;
  for (int& s : status) {
    if (failed) s = failed;
    else failed = s;
  }
}

}  // namespace

Batch::Batch(std::shared_ptr<Runtime> rt, tutti_op op) : rt_(std::move(rt)), op_(op) {
  TUTTI_EXPECT(op == TUTTI_OP_LOAD || op == TUTTI_OP_STORE || op == TUTTI_OP_STORE_BY_LAYER,
               "op must be TUTTI_OP_LOAD, TUTTI_OP_STORE or TUTTI_OP_STORE_BY_LAYER");
  rt_->require_registered();
  layers_ = rt_->binding().shape().layers;
  ready_prefix_ = by_layer() ? 0 : layers_;
  if (is_load()) timeout_ = std::chrono::milliseconds(rt_->config().load_timeout_ms);
  if (by_layer()) layer_ready_.assign(layers_, 0), ready_events_.assign(layers_, nullptr);
  // Where the engine's GPU is matters only to stores in the loads' slack.
  if (is_load() && rt_->device() && rt_->config().store_slack) reached_ = std::make_unique<std::atomic<void*>[]>(layers_);
}

void Batch::cancel() {
  std::lock_guard lock(mu_);
  if (!by_layer() || state_ != State::kRunning || ready_prefix_.load() == layers_) return;
  fail_all(TUTTI_ESTATE);
  cancelled_ = true;  // its layers go at once, even while loads are in flight
  std::fill(layer_ready_.begin(), layer_ready_.end(), 1);
  ready_prefix_ = layers_;
  rt_->scheduler().notify();
}

Batch::~Batch() {
  cancel();  // a store by layer whose engine never declared every layer stores nothing
  {
    // Under the lock even when done: finish() may still be inside its critical section.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return state_ != State::kRunning; });
  }
  run_.reset();  // here, not in finish(): finish() may run in a CUDA host callback
  for (void* e : ready_events_)
    if (e) rt_->device()->destroy_event(e);
  for (uint32_t l = 0; reached_ && l < layers_; ++l)
    if (void* e = reached_[l].load()) rt_->device()->destroy_event(e);
}

void Batch::add(const tutti_request* reqs, size_t n) {
  TUTTI_EXPECT_CODE(state_ == State::kBuilding, TUTTI_ESTATE, "requests can only be added before submit");
  TUTTI_EXPECT(reqs != nullptr || n == 0, "reqs is NULL");
  const KvBinding& kv = rt_->binding();
  const size_t ct = rt_->config().chunk_tokens, g = rt_->config().partial_granule();
  std::vector<Request> added;
  for (size_t i = 0; i < n; ++i) {
    const tutti_request& r = reqs[i];
    const auto at = [&] { return "request " + std::to_string(reqs_.size() + i) + ": "; };
    TUTTI_EXPECT(r.tokens != nullptr || r.num_tokens == 0, at() + "tokens is NULL");
    TUTTI_EXPECT(r.salt != nullptr || r.salt_len == 0, at() + "salt is NULL but salt_len is not 0");
    size_t end = r.token_end == TUTTI_TOKENS_ALL ? r.num_tokens : r.token_end;
    TUTTI_EXPECT(end <= r.num_tokens, at() + "token_end " + std::to_string(end) + " is past num_tokens " +
                                          std::to_string(r.num_tokens) + " (TUTTI_TOKENS_ALL asks for the whole prompt)");
    TUTTI_EXPECT(r.token_begin <= end, at() + "token_begin is past token_end");
    // A load moves exactly [begin, end) (TUTTI_TOKENS_ALL: every whole chunk). A store writes
    // the chunks that hold its tokens, from the start of the chunk with token_begin, whole, and
    // where it ends inside one, that chunk's tokens in multiples of partial_tokens as a partial
    // chunk (not with TUTTI_TOKENS_ALL).
    size_t tail = 0;
    if (!is_load() || r.token_end == TUTTI_TOKENS_ALL) {
      if (!is_load() && r.token_end != TUTTI_TOKENS_ALL && g) tail = end % ct / g * g;
      end = end - end % ct + tail;
    }
    end = std::max(end, r.token_begin);  // nothing whole past token_begin: an empty range
    const size_t first = r.token_begin / ct;
    const size_t count = end > r.token_begin ? (end - first * ct + ct - 1) / ct : 0;
    if (rt_->config().io_mode == IoMode::kPerBlockBaseline && is_load())
      TUTTI_EXPECT_CODE(count == 0 || (r.token_begin % ct == 0 && end % ct == 0), TUTTI_EUNSUPPORTED,
                        at() + "io_mode=per-block-baseline loads whole chunks only: token_begin and token_end must "
                               "be multiples of chunk_tokens (" + std::to_string(ct) + ")");
    const size_t bt = kv.block_tokens();
    const size_t need_blocks = (end + bt - 1) / bt;
    if (count) {
      TUTTI_EXPECT(r.block_table != nullptr, at() + "block_table is NULL");
      TUTTI_EXPECT(r.num_block_ids >= need_blocks, at() + "block_table has " + std::to_string(r.num_block_ids) +
                                                       " entries, the range needs " + std::to_string(need_blocks));
      // The blocks of the tokens that move: a load's from token_begin, a store's from its first chunk.
      for (size_t j = (is_load() ? r.token_begin : first * ct) / bt; j < need_blocks; ++j)
        TUTTI_EXPECT(r.block_table[j] >= 0 && static_cast<uint32_t>(r.block_table[j]) < kv.num_blocks(),
                     at() + "block id " + std::to_string(r.block_table[j]) + " at block_table[" + std::to_string(j) +
                         "] is outside [0, " + std::to_string(kv.num_blocks()) + ")");
    }
    Request q;
    q.r = r;
    q.root = rt_->root(r.salt, r.salt_len);
    q.first_chunk = first;
    q.end = end;
    // Whole chunks' keys as far as the prompt has their tokens: a load's last chunk may reach
    // past it (plan looks for a partial chunk there).
    auto keys = chunk_keys(q.root, r.tokens, std::min((first + count) * ct, r.num_tokens), ct);
    if (count && tail && end > r.token_begin) {  // the store's last chunk is a partial one
      const size_t last = first + count - 1;
      if (keys.size() > last) q.tail_whole = keys[last];  // the prompt's whole chunk there
      keys.resize(last);
      keys.push_back(partial_key(last ? keys[last - 1] : q.root, r.tokens + last * ct, tail));
    }
    q.prefix.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(std::min(first, keys.size())));
    q.keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(std::min(first, keys.size())), keys.end());
    q.status.assign(count, 0);
    if (!is_load() && rt_->events()) q.tokens.assign(r.tokens + first * ct, r.tokens + end);
    added.push_back(std::move(q));
  }
  for (auto& q : added) reqs_.push_back(std::move(q));
}

void Batch::submit() {
  TUTTI_EXPECT_CODE(state_ == State::kBuilding, TUTTI_ESTATE, "the batch was already submitted");
  rt_->require_open();
  submitted_ = std::chrono::steady_clock::now();
  rt_->batch_started();
  try {
    plan();
  } catch (...) {
    rt_->batch_ended();
    throw;
  }
}

void Batch::plan() {
  if (!is_load()) rt_->expire_leases();  // before claiming slots: expired pins are evictable
  Index& index = rt_->index();
  const KvBinding& kv = rt_->binding();
  const size_t ct = rt_->config().chunk_tokens, g = rt_->config().partial_granule();
  // Pin what we load, claim slots for what we store. Planning a request stops at its first
  // failed chunk; finish() marks the rest.
  for (uint32_t ri = 0; ri < reqs_.size(); ++ri) {
    Request& q = reqs_[ri];
    for (uint32_t c = 0; c < q.status.size(); ++c) {
      const size_t start = (q.first_chunk + c) * ct, bt = kv.block_tokens();
      const int32_t* blocks = q.r.block_table + start / bt;
      gpu::ChunkSpan span;
      span.tok0 = static_cast<uint32_t>(start % bt);
      span.lo = static_cast<uint32_t>(std::max(q.r.token_begin, start) - start);
      span.hi = static_cast<uint32_t>(std::min(q.end, start + ct) - start);
      if (!is_load()) span.lo = 0;  // a store writes its chunks whole
      if (is_load()) {
        std::optional<uint64_t> slot;
        if (c < q.keys.size()) slot = index.pin(q.keys[c]);
        if (!slot && span.hi < ct && g) {  // a range that ends inside the chunk: a partial one holds it
          const Key parent = start == 0 ? q.root : c ? q.keys[c - 1] : q.prefix.back();
          const auto tails = rt_->tail_keys(parent, q.r.tokens + start, q.r.num_tokens - start);
          for (size_t t = (span.hi + g - 1) / g - 1; t < tails.size() && !slot; ++t) slot = index.pin(tails[t]);
        }
        if (!slot && rt_->remote() && c < q.keys.size()) {  // a whole chunk the pool lacks: the tier's, perhaps
          remote::RemoteChunk& rc = remote_chunks_.emplace_back();
          rc.key = q.keys[c], rc.blocks = blocks, rc.span = span;
          remote_owners_.push_back(Owner{ri, c, false});
          continue;
        }
        if (!slot) {
          q.status[c] = TUTTI_ENOENT;
          break;
        }
        PathChunk& it = chunks_.emplace_back();
        it.slot = *slot, it.blocks = blocks, it.span = span, it.expected = index.layer_sums(*slot);
        owners_.push_back(Owner{ri, c, false});
      } else {
        if (c == 0)  // the chunks this request's chain starts from stay while it is stored
          for (const Key& k : q.prefix)
            if (auto slot = index.pin(k)) held_.push_back(*slot);
        if (c + 1 == q.keys.size() && q.tail_whole)  // a partial chunk whose whole one is stored: nothing to add
          if (auto slot = index.pin(*q.tail_whole)) {
            held_.push_back(*slot);
            continue;
          }
        auto a = index.allocate(q.keys[c]);
        if (a.claim == Index::Claim::kPresent) {
          held_.push_back(a.slot);  // pinned: making room for later chunks must not evict it
          continue;
        }
        if (a.claim == Index::Claim::kBeingWritten) {
          awaited_.push_back(Awaited{ri, c, a.slot, a.ticket});
          continue;
        }
        if (a.claim == Index::Claim::kFull) {
          q.status[c] = TUTTI_ENOSPC;
          break;
        }
        PathChunk& it = chunks_.emplace_back();
        it.slot = a.slot, it.blocks = blocks, it.span = span;
        it.sums.assign(layers_, 0);
        owners_.push_back(Owner{ri, c, a.reused});
      }
    }
  }
  layer_done_.assign(layers_, 0);
  if (!chunks_.empty()) {
    try {
      run_ = rt_->path(is_load()).plan(is_load(), chunks_, *this);
    } catch (...) {
      unplan();
      throw;
    }
  }
  if (is_load() && rt_->device()) {
    epoch_ = rt_->next_load_epoch();
    rt_->device()->begin_epoch(epoch_);
  }
  state_ = State::kRunning;
  layer_parts_.assign(layers_, 0);
  if (parts() == 0) {
    for (uint32_t l = 0; l < layers_; ++l) {
      layer_done_[l] = 1;
      if (epoch_) rt_->device()->mark_ready(l, epoch_);
    }
    done_prefix_ = layers_;
    finish();
    return;
  }
  unlanded_ = layers_ * parts();
  if (by_layer()) rt_->by_layer_started(this);  // a close() cancels it
  rt_->scheduler().enqueue(this);
}

void Batch::unplan() {
  Index& index = rt_->index();
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (is_load())
      index.unpin(chunks_[i].slot);
    else
      index.abandon(chunks_[i].slot, owners_[i].dirty);
  }
  for (uint64_t slot : held_) index.unpin(slot);
  for (Request& q : reqs_) std::fill(q.status.begin(), q.status.end(), 0);
  chunks_.clear();
  owners_.clear();
  held_.clear();
  awaited_.clear();
}

// A store's first step, on the scheduler thread (submit never waits for the disk): slots
// whose old records may still be on disk get tombstones, durable before any byte of the new
// chunk is written, or a crash could pair the old key with new bytes. A slot whose tombstone
// fails is not written, and stays dirty.
void Batch::tombstone_reused() {
  std::vector<uint64_t> slots;
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (owners_[i].dirty) slots.push_back(chunks_[i].slot);
  if (slots.empty()) return;
  try {
    rt_->pool().write_tombstones(slots);
    for (Owner& o : owners_) o.dirty = false;
  } catch (const Error& e) {
    for (uint32_t i = 0; i < chunks_.size(); ++i)
      if (owners_[i].dirty) fail(i, e.code());
  }
}

void Batch::issue_layer(uint32_t layer) {
  if (!is_load() && layer == 0) tombstone_reused();
  if (by_layer()) {
    void* ready = nullptr;
    {
      std::lock_guard lock(mu_);
      ready = ready_events_[layer];
    }
    // The engine's work that writes the layer has run (this thread sleeps, it does not spin).
    if (ready) {
      try {
        rt_->device()->sync_event(ready);
      } catch (const Error& e) {
        fail_all(e.code());  // the layer's bytes are unknown: nothing of the batch is stored
      }
    }
  }
  // The tier's part first: once the last part of the last layer is issued, the batch may land,
  // finish and be freed before the call returns.
  if (!remote_chunks_.empty()) {
    if (!run_) return rt_->remote()->load_layer(remote_chunks_, *this, layer);
    rt_->remote()->load_layer(remote_chunks_, *this, layer);
  }
  run_->issue(layer);
}

void Batch::fail(uint32_t i, int code) {
  int expected = 0;
  chunks_[i].error.compare_exchange_strong(expected, code);  // the first error stays
}

void Batch::fail_all(int code) {
  for (uint32_t i = 0; i < chunks_.size(); ++i) fail(i, code);
}

void Batch::chunk_failed(uint32_t i, uint32_t layer, int code, const std::string& why) {
  fail(i, code);
  if (!why.empty()) note_error(owners_[i], layer, why);
}

void Batch::remote_failed(uint32_t i, uint32_t layer, const std::string& why) {
  int expected = 0;
  remote_chunks_[i].error.compare_exchange_strong(expected, TUTTI_ENOENT);
  note_error(remote_owners_[i], layer, why);
}

void Batch::note_error(const Owner& o, uint32_t layer, const std::string& why) {
  std::lock_guard lock(mu_);
  if (!first_error_.empty()) return;
  first_error_ = "request " + std::to_string(o.req) + ", chunk " + std::to_string(reqs_[o.req].first_chunk + o.chunk) +
                 ", layer " + std::to_string(layer) + ": " + why;
}

std::string Batch::first_error() const {
  std::lock_guard lock(mu_);
  return first_error_;
}

void Batch::layer_queued(uint32_t layer) {
  // With remote chunks, the layer is in place only once the tier has landed it too.
  if (epoch_ && remote_chunks_.empty()) rt_->device()->mark_queued(layer, epoch_);
}

void Batch::layer_landed(uint32_t layer) { part_landed(layer); }

void Batch::part_landed(uint32_t layer) {
  bool whole;
  {
    std::lock_guard lock(mu_);
    whole = ++layer_parts_[layer] == parts();
  }
  if (whole) {
    if (epoch_) rt_->device()->mark_ready(layer, epoch_);  // stream waits may go on
    {
      std::lock_guard lock(mu_);
      layer_done_[layer] = 1;
      uint32_t p = done_prefix_.load();
      while (p < layers_ && layer_done_[p]) ++p;
      done_prefix_.store(p, std::memory_order_release);
    }
    cv_.notify_all();
    rt_->scheduler().notify();  // the lookahead window moved
  }
  if (unlanded_.fetch_sub(1) != 1) return;
  if (run_) run_->all_landed();
  if (is_load()) {
    rt_->scheduler().load_landed(this);  // stores may use the device again
    finish();
  } else {
    rt_->scheduler().commit_later(this);
  }
}

void Batch::commit() {
  Pool& pool = rt_->pool();
  Index& index = rt_->index();
  std::vector<Record> records;
  // Last chunk first, here and when published below: a prompt's first chunks get the newest
  // generations, so they are the most recently used, after a reopen too.
  for (size_t i = chunks_.size(); i-- > 0;)
    if (!chunks_[i].error.load())
      records.push_back(Record{chunks_[i].slot, index.next_generation(), reqs_[owners_[i].req].keys[owners_[i].chunk],
                               chunks_[i].sums});
  try {
    // Data first, then the records that make it visible; both durable before publishing.
    if (!records.empty()) {
      pool.sync();
      pool.write_records(records);
    }
  } catch (const Error& e) {
    // Some records may be durable after all: their slots are tombstoned before reuse.
    for (uint32_t i = 0; i < chunks_.size(); ++i)
      if (!chunks_[i].error.load()) owners_[i].dirty = true;
    fail_all(e.code());
    records.clear();
  }
  // KV events before the chunks become visible (once visible they may be evicted, and a router
  // must not hear of a removal before the store), in each prompt's order.
  if (KvEvents* ev = rt_->events(); ev && !records.empty()) {
    const size_t ct = rt_->config().chunk_tokens;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      if (chunks_[i].error.load()) continue;
      const Request& q = reqs_[owners_[i].req];
      const size_t c = owners_[i].chunk;
      const Key parent = c ? q.keys[c - 1] : q.prefix.empty() ? Key{} : q.prefix.back();
      const size_t from = std::min(c * ct, q.tokens.size()), to = std::min(from + ct, q.tokens.size());
      ev->stored(q.keys[c], parent, std::span<const int32_t>(q.tokens).subspan(from, to - from));
    }
  }
  // LRU eviction takes a chain from its end, never orphaning the chunks after a prefix.
  size_t r = 0;
  for (size_t i = chunks_.size(); i-- > 0;) {
    if (!chunks_[i].error.load()) {
      index.commit(chunks_[i].slot, records[r].generation, std::move(records[r].layer_sums));
      ++r;
    } else {
      index.abandon(chunks_[i].slot, owners_[i].dirty);
    }
  }
  rt_->counters().stored_chunks += records.size();
  // Whole chunks now in the pool go on to the remote tier (in the background, if admitted).
  if (remote::Tier* tier = rt_->remote()) {
    const size_t ct = rt_->config().chunk_tokens;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const Request& q = reqs_[owners_[i].req];
      const size_t c = owners_[i].chunk;
      if (!chunks_[i].error.load() && (q.first_chunk + c + 1) * ct <= q.end) tier->offer(std::span(&q.keys[c], 1), q.end);
    }
  }
  finish();
}

void Batch::finish() {
  auto& c = rt_->counters();
  size_t discarded = 0, failed = 0;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const int e = chunks_[i].error.load();
    failed += e != 0;
    if (is_load() && e == TUTTI_ECORRUPT) {
      rt_->index().discard(chunks_[i].slot);  // damaged on the device: never found again
      ++discarded;
    } else if (is_load()) {
      rt_->index().unpin(chunks_[i].slot);
    }
    if (e) reqs_[owners_[i].req].status[owners_[i].chunk] = e;
  }
  if (!remote_chunks_.empty()) {
    std::vector<Key> loaded;
    for (size_t i = 0; i < remote_chunks_.size(); ++i) {
      const int e = remote_chunks_[i].error.load();
      failed += e != 0;
      if (e) reqs_[remote_owners_[i].req].status[remote_owners_[i].chunk] = e;
      else loaded.push_back(remote_chunks_[i].key);
    }
    rt_->remote()->loaded(std::move(loaded));
  }
  for (uint64_t slot : held_) rt_->index().unpin(slot);
  held_.clear();
  if (discarded)
    log(TUTTI_LOG_WARN, std::to_string(discarded) + " chunk(s) failed their checksum and were discarded (" +
                            first_error() + ")");
  else if (failed && log_enabled(TUTTI_LOG_INFO))
    log(TUTTI_LOG_INFO, std::string(is_load() ? "a load" : "a store") + ": " + std::to_string(failed) + " of " +
                            std::to_string(chunks_.size() + remote_chunks_.size()) + " chunk(s) failed (" +
                            first_error() + ")");
  if (by_layer() && !chunks_.empty()) rt_->by_layer_ended(this);
  (is_load() ? c.load : c.store)
      .add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - submitted_)
                                     .count()));
  rt_->batch_ended();  // the last use of the runtime's I/O side: close() may go on
  for (Request& q : reqs_) {
    fail_after_first_error(q.status);
    c.failed_chunks += std::count_if(q.status.begin(), q.status.end(), [](int s) { return s != 0; });
  }
  {
    std::lock_guard lock(mu_);
    state_ = State::kDone;
    cv_.notify_all();  // under the lock: once the owner sees kDone it may free the batch
  }
}

void Batch::wait_layer(uint32_t layer) {
  TUTTI_EXPECT(layer < layers_, "layer " + std::to_string(layer) + " is out of range (the KV cache has " +
                                    std::to_string(layers_) + " layers)");
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait_layer before submit");
  auto t0 = std::chrono::steady_clock::now();
  if (rt_->config().store_slack) {  // where the engine is matters only to stores in the slack
    for (uint32_t n = host_next_.load(); n < layer + 1 && !host_next_.compare_exchange_weak(n, layer + 1);) {
    }
    consumer_seen_.store(true, std::memory_order_release);
  }
  if (by_layer()) {
    std::unique_lock lock(mu_);
    TUTTI_EXPECT_CODE(layer_ready_[layer], TUTTI_ESTATE,
                      "wait_layer on a layer of a store by layer not declared ready (tutti_batch_layer_ready)");
  }
  const bool in_time = landed_in_time(layer);
  count_wait(layer, t0);
  if (!in_time) fail_given_up(layer);
}

void Batch::fail_given_up(uint32_t layer) const {
  tutti::fail(TUTTI_EIO, "the load gave up by layer " + std::to_string(layer) + ", not landed within load_timeout_ms (" +
                             std::to_string(timeout_.count()) + " ms): every chunk of the batch failed (" +
                             first_error() + ")");
}

bool Batch::landed_in_time(uint32_t layer) {
  {
    std::unique_lock lock(mu_);
    auto over = [&] { return layer_done_[layer] != 0 || given_up_; };
    if (!timeout_.count()) {
      cv_.wait(lock, over);
      return true;
    }
    if (cv_.wait_for(lock, timeout_, over) && !given_up_) return true;
  }
  give_up(layer);
  return false;
}

void Batch::give_up(uint32_t layer) {
  {
    std::lock_guard lock(mu_);
    if (given_up_) return;
    given_up_ = true;
  }
  const std::string why = "not landed within load_timeout_ms (" + std::to_string(timeout_.count()) +
                          " ms): given up, its reads still in flight never reach the blocks";
  if (!owners_.empty()) note_error(owners_[0], layer, why);
  else if (!remote_owners_.empty()) note_error(remote_owners_[0], layer, why);
  for (uint32_t i = 0; i < chunks_.size(); ++i) fail(i, TUTTI_EIO);
  for (auto& c : remote_chunks_) {
    int expected = 0;
    c.error.compare_exchange_strong(expected, TUTTI_EIO);
  }
  fence_.close();  // waits out the bytes moving into the blocks now; none move in after this
  if (epoch_) {
    // In CUDA memory the copies queued before the fence closed may still run: wait for them.
    // First, though, release the engine's stream waits on the batch (its chunks fail): a wait
    // kernel spinning on one could hold the hardware queue those copies need.
    for (uint32_t l = 0; l < layers_; ++l) rt_->device()->mark_ready(l, epoch_);
    try {
      rt_->device()->sync_scatters();
    } catch (const Error& e) {
      log(TUTTI_LOG_ERROR, std::string("a load that gave up could not wait for its copies: ") + e.what());
    }
  }
  rt_->counters().load_timeouts++;
  log(TUTTI_LOG_WARN, "a load gave up at layer " + std::to_string(layer) + ": " + why);
  cv_.notify_all();  // the other waiters of the batch return too
}

void Batch::count_wait(uint32_t layer, std::chrono::steady_clock::time_point since) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count();
  auto& c = rt_->counters();
  c.layer_waits++;
  c.layer_wait_ns += static_cast<uint64_t>(ns);
  c.layer_wait.add(static_cast<uint64_t>(ns));
  c.per_layer_wait_ns[layer] += static_cast<uint64_t>(ns);
}

void Batch::wait_layer_async(uint32_t layer, void* stream) {
  TUTTI_EXPECT(layer < layers_, "layer " + std::to_string(layer) + " is out of range (the KV cache has " +
                                    std::to_string(layers_) + " layers)");
  TUTTI_EXPECT(is_load() && rt_->device(), "stream-ordered waits are for loads into CUDA memory");
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait_layer_async before submit");
  auto t0 = std::chrono::steady_clock::now();
  // Blocks until the layer is in place or queued (at most load_timeout_ms).
  const bool in_time = rt_->device()->enqueue_wait(stream, layer, epoch_, timeout_);
  count_wait(layer, t0);
  if (!in_time) give_up(layer);
  else if (reached_ && state_ == State::kRunning && !reached_[layer].load()) note_reached(layer, stream);
  std::unique_lock lock(mu_);
  if (!given_up_) return;
  lock.unlock();
  fail_given_up(layer);
}

// An event behind the engine's wait for the layer: once it fired, the GPU computes the layer.
// Only for the scheduler's slack: without it (graph capture, a CUDA error) the load has none.
void Batch::note_reached(uint32_t layer, void* stream) noexcept {
  void* event = nullptr;
  try {
    event = rt_->device()->record_reached(stream);
  } catch (...) {
    return;
  }
  if (!event) return;
  void* none = nullptr;
  if (!reached_[layer].compare_exchange_strong(none, event, std::memory_order_release)) rt_->device()->destroy_event(event);
  else consumer_seen_.store(true, std::memory_order_release);
}

uint32_t Batch::layers_ahead() const {
  if (!consumer_seen_.load(std::memory_order_acquire)) return 0;
  uint32_t next = host_next_.load(std::memory_order_acquire);
  if (reached_) {
    // Events on one stream fire in order: the GPU is past the last one that fired (a layer
    // waited for without an event, e.g. inside graph capture, does not hold the count back).
    uint32_t g = gpu_next_.load(std::memory_order_relaxed);
    for (uint32_t l = g; l < layers_; ++l) {
      void* e = reached_[l].load(std::memory_order_acquire);
      if (!e) continue;
      if (!rt_->device()->event_done(e)) break;
      g = l + 1;
    }
    gpu_next_.store(g, std::memory_order_relaxed);
    next = std::max(next, g);
  }
  const uint32_t done = done_prefix();
  return done > next ? done - next : 0;
}

void Batch::layer_ready(uint32_t layer, void* stream) {
  TUTTI_EXPECT(by_layer(), "tutti_batch_layer_ready is for TUTTI_OP_STORE_BY_LAYER batches");
  TUTTI_EXPECT(layer < layers_, "layer " + std::to_string(layer) + " is out of range (the KV cache has " +
                                    std::to_string(layers_) + " layers)");
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "layer_ready before submit");
  // In CUDA memory the layer is ready where the engine's stream is now: an event marks it.
  void* event = rt_->device() && state_ == State::kRunning ? rt_->device()->record_event(stream) : nullptr;
  std::lock_guard lock(mu_);
  if (layer_ready_[layer]) {
    if (event) rt_->device()->destroy_event(event);
    tutti::fail(TUTTI_EINVAL, "layer " + std::to_string(layer) + " was declared ready before");
  }
  layer_ready_[layer] = 1;
  ready_events_[layer] = event;
  uint32_t p = ready_prefix_.load();
  while (p < layers_ && layer_ready_[p]) ++p;
  ready_prefix_.store(p, std::memory_order_release);
  // Under the lock: the batch cannot finish meanwhile, so neither can a tutti_runtime_close
  // that waits for it, which takes the scheduler away. A finished batch (nothing to write)
  // needs no wake-up.
  if (state_ == State::kRunning) rt_->scheduler().notify();
}

void Batch::poll(uint32_t* layers_done, int* done) const {
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "poll before submit");
  *done = state_ == State::kDone;  // first: a batch seen done has every layer done too
  *layers_done = done_prefix();
}

void Batch::settle() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return state_ == State::kDone; });
  }
  if (settled_) return;  // the batch belongs to one thread at a time
  settled_ = true;
  for (const Awaited& a : awaited_) {
    if (rt_->index().wait_settled(a.slot, a.ticket)) continue;  // stored (it may be evicted since)
    // The other batch that was storing it failed: this chunk is not in the pool.
    if (!reqs_[a.req].status[a.chunk]) reqs_[a.req].status[a.chunk] = TUTTI_ENOENT;
    fail_after_first_error(reqs_[a.req].status);
  }
}

int Batch::wait() {
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait before submit");
  TUTTI_EXPECT_CODE(!by_layer() || ready_prefix_.load() == layers_, TUTTI_ESTATE,
                    "wait on a store by layer before every layer is declared ready (tutti_batch_layer_ready)");
  // A load under load_timeout_ms: each layer in turn has that long to land. When it gives up,
  // the results say so at once; the reads in flight end in their own time.
  for (uint32_t l = 0; timeout_.count() && l < layers_; ++l)
    if (!landed_in_time(l)) return TUTTI_EIO;
  settle();
  for (auto& q : reqs_)
    for (int s : q.status)
      if (s) return s;
  return 0;
}

bool Batch::gave_up_running() const {
  std::lock_guard lock(mu_);
  return given_up_ && state_ != State::kDone;
}

tutti_result Batch::result(size_t request) {
  TUTTI_EXPECT(request < reqs_.size(), "request index " + std::to_string(request) + " is out of range");
  const Request& q = reqs_[request];
  tutti_result r{};
  if (gave_up_running()) {  // every chunk failed; finish() may still be writing the statuses
    r.chunks = static_cast<uint32_t>(q.status.size());
    r.status = r.chunks ? TUTTI_EIO : 0;
    return r;
  }
  TUTTI_EXPECT_CODE(state_ == State::kDone, TUTTI_ESTATE, "results are ready after tutti_batch_wait");
  settle();
  r.chunks = static_cast<uint32_t>(q.status.size());
  // Failures run to the end (fail_after_first_error), so the ok chunks are the leading ones.
  r.chunks_ok = static_cast<uint32_t>(std::find_if(q.status.begin(), q.status.end(), [](int s) { return s != 0; }) -
                                      q.status.begin());
  r.status = r.chunks_ok < r.chunks ? q.status[r.chunks_ok] : 0;
  const size_t reached = std::min(q.end, (q.first_chunk + r.chunks_ok) * rt_->config().chunk_tokens);
  r.tokens = reached > q.r.token_begin ? reached - q.r.token_begin : 0;
  return r;
}

size_t Batch::chunk_status(size_t request, int* out, size_t cap) {
  TUTTI_EXPECT(request < reqs_.size(), "request index " + std::to_string(request) + " is out of range");
  TUTTI_EXPECT(out != nullptr || cap == 0, "status is NULL");
  const Request& q = reqs_[request];
  size_t n = std::min(cap, q.status.size());
  if (gave_up_running()) {
    std::fill_n(out, n, TUTTI_EIO);
    return n;
  }
  TUTTI_EXPECT_CODE(state_ == State::kDone, TUTTI_ESTATE, "chunk status is ready after tutti_batch_wait");
  settle();
  std::copy_n(q.status.begin(), n, out);
  return n;
}

}  // namespace tutti
