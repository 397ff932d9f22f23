// SPDX-License-Identifier: Apache-2.0
#include "remote/redis_cluster.hpp"

#include <hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "common/error.hpp"

namespace tutti::remote {

namespace {

// How many times a call sends a command again (after a redirect, a lost connection or a
// cluster that is failing over) before its deadline can end it anyway.
constexpr int kMaxRounds = 16;

timeval until(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
  left = std::max(left, std::chrono::microseconds(1000));  // a zero timeout would mean none
  return timeval{static_cast<time_t>(left.count() / 1000000), static_cast<suseconds_t>(left.count() % 1000000)};
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// A connection to a local port nobody listens on can meet itself (TCP simultaneous open, when
// the kernel picks that very port as the source): it would read back its own commands.
bool self_connected(int fd) {
  sockaddr_storage a{}, b{};
  socklen_t la = sizeof a, lb = sizeof b;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la) == 0 &&
         ::getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb) == 0 && la == lb && std::memcmp(&a, &b, la) == 0;
}

std::optional<Endpoint> parse_endpoint(std::string_view s) {
  Endpoint e;
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (host.empty() || ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535)
    return std::nullopt;
  e.host = std::string(host);
  e.port = static_cast<uint16_t>(p);
  return e;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the slot and where it is now.
std::optional<std::pair<unsigned, Endpoint>> parse_redirect(std::string_view msg) {
  size_t sp1 = msg.find(' '), sp2 = msg.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  auto [end, ec] = std::from_chars(msg.data() + sp1 + 1, msg.data() + sp2, slot);
  auto at = parse_endpoint(msg.substr(sp2 + 1));
  if (ec != std::errc() || slot >= kSlots || !at) return std::nullopt;
  return std::make_pair(slot, *at);
}

// Queues a command on the connection (binary-safe arguments); its reply comes with redisGetReply.
void append(redisContext* c, const Command& cmd) {
  std::vector<const char*> argv;
  std::vector<size_t> argl;
  for (auto a : cmd.args) {
    argv.push_back(a.data());
    argl.push_back(a.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), argl.data());
}

}  // namespace

std::vector<Endpoint> parse_seeds(std::string_view uri) {
  std::string_view rest = uri;
  if (starts_with(rest, "redis://")) rest.remove_prefix(8);
  std::vector<Endpoint> out;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    auto e = parse_endpoint(one);
    if (!e)
      fail(TUTTI_EINVAL, "remote: '" + std::string(one) + "' is not host:port (e.g. redis://127.0.0.1:7000,127.0.0.1:7001)");
    out.push_back(*e);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (out.empty()) fail(TUTTI_EINVAL, "remote: no node given (e.g. redis://127.0.0.1:7000)");
  return out;
}

uint16_t crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char b : bytes) {
    crc ^= static_cast<uint16_t>(b << 8);
    for (int i = 0; i < 8; ++i) crc = static_cast<uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

uint16_t key_slot(std::string_view key) {
  size_t open = key.find('{');
  if (open != std::string_view::npos) {
    size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<uint16_t>(crc16(key) % kSlots);
}

Reply Reply::failure(std::string why) {
  Reply r;
  r.failure_ = std::move(why);
  return r;
}

Reply::Type Reply::type() const {
  if (!r_) return Type::kError;
  switch (r_->type) {
    case REDIS_REPLY_STRING: return Type::kString;
    case REDIS_REPLY_ARRAY: return Type::kArray;
    case REDIS_REPLY_INTEGER: return Type::kInteger;
    case REDIS_REPLY_NIL: return Type::kNil;
    case REDIS_REPLY_STATUS: return Type::kStatus;
    default: return Type::kError;
  }
}

std::string_view Reply::str() const {
  if (!r_) return failure_;
  return r_->str ? std::string_view(r_->str, r_->len) : std::string_view();
}

long long Reply::integer() const { return r_ && r_->type == REDIS_REPLY_INTEGER ? r_->integer : 0; }

size_t Reply::size() const { return r_ && r_->type == REDIS_REPLY_ARRAY ? r_->elements : 0; }

Reply Reply::at(size_t i) const {
  if (i >= size()) return failure("no element " + std::to_string(i));
  return Reply(root_, r_->element[i]);
}

Cluster::Cluster(std::vector<Endpoint> seeds, std::chrono::milliseconds timeout)
    : seeds_(std::move(seeds)), timeout_(timeout) {
  TUTTI_EXPECT(!seeds_.empty(), "remote: no node given");
  for (const auto& s : seeds_) node_for(s);
  if (!refresh(Clock::now() + timeout_)) {
    std::string names;
    for (const auto& s : seeds_) names += (names.empty() ? "" : ", ") + s.describe();
    fail(TUTTI_EIO, "remote: no Redis Cluster node answered CLUSTER SLOTS within " + std::to_string(timeout_.count()) +
                        " ms (" + names + ")");
  }
}

Cluster::~Cluster() = default;

size_t Cluster::node_for(const Endpoint& e) {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].at == e) return i;
  nodes_.push_back(Node{e});
  return nodes_.size() - 1;
}

redisContext* Cluster::connect(size_t node, Clock::time_point deadline, std::string* why) {
  Node& n = nodes_[node];
  if (n.conn) return n.conn.get();
  if (Clock::now() >= deadline) {
    *why = "deadline passed before connecting to " + n.at.describe();
    return nullptr;
  }
  redisContext* c = redisConnectWithTimeout(n.at.host.c_str(), n.at.port, until(deadline));
  if (!c || c->err || self_connected(c->fd)) {
    *why = "cannot connect to " + n.at.describe() + (c && c->err ? std::string(": ") + c->errstr : std::string());
    if (c) redisFree(c);
    return nullptr;
  }
  if (n.connected_once) ++stats_.reconnects;
  n.connected_once = true;
  n.conn = {c, redisFree};
  return c;
}

void Cluster::drop(size_t node) { nodes_[node].conn.reset(); }

bool Cluster::refresh(Clock::time_point deadline) {
  ++stats_.refreshes;
  // Ask the nodes that serve slots, then every other node known, then the seeds.
  std::vector<size_t> order;
  for (int32_t n : slot_node_)
    if (n >= 0 && std::find(order.begin(), order.end(), static_cast<size_t>(n)) == order.end()) order.push_back(n);
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  for (size_t node : order) {
    std::string why;
    redisContext* c = connect(node, deadline, &why);
    if (!c) continue;
    redisSetTimeout(c, until(deadline));
    auto* raw = static_cast<redisReply*>(redisCommand(c, "CLUSTER SLOTS"));
    if (!raw) {
      drop(node);
      continue;
    }
    std::shared_ptr<redisReply> root(raw, freeReplyObject);
    if (raw->type != REDIS_REPLY_ARRAY || raw->elements == 0) continue;
    // Any malformed entry discards the whole answer: whoever sent it is no cluster node (a
    // connection to a port nobody listens on can even meet itself, TCP's self-connect, and then
    // reads back its own command).
    std::vector<int32_t> map(kSlots, -1);
    const Endpoint asked = nodes_[node].at;
    bool sane = true;
    for (size_t i = 0; i < raw->elements && sane; ++i) {
      const redisReply* e = raw->element[i];
      sane = e->type == REDIS_REPLY_ARRAY && e->elements >= 3 && e->element[0]->type == REDIS_REPLY_INTEGER &&
             e->element[1]->type == REDIS_REPLY_INTEGER && e->element[2]->type == REDIS_REPLY_ARRAY &&
             e->element[2]->elements >= 2 && e->element[2]->element[0]->type == REDIS_REPLY_STRING &&
             e->element[2]->element[1]->type == REDIS_REPLY_INTEGER;
      if (!sane) break;
      const long long first = e->element[0]->integer, last = e->element[1]->integer;
      const redisReply* master = e->element[2];
      Endpoint at{master->element[0]->str ? std::string(master->element[0]->str, master->element[0]->len) : "",
                  static_cast<uint16_t>(master->element[1]->integer)};
      if (at.host.empty() || at.host == "?") at.host = asked.host;  // "": the node asked
      sane = first >= 0 && last < kSlots && first <= last && at.port != 0;
      if (!sane) break;
      const auto idx = static_cast<int32_t>(node_for(at));
      std::fill(map.begin() + first, map.begin() + last + 1, idx);
    }
    if (!sane) {
      drop(node);
      continue;
    }
    slot_node_ = std::move(map);
    return true;
  }
  return false;
}

std::vector<Reply> Cluster::run(std::span<const Command> commands) {
  const size_t n = commands.size();
  std::vector<Reply> out(n);
  std::vector<int32_t> ask(n, -1);  // the node an ASK redirect sent a command to, or -1
  std::vector<std::string> why(n);  // why a command is still pending
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  stats_.commands += n;
  const auto deadline = Clock::now() + timeout_;
  bool learn = false, wait = false;
  for (int round = 0; !pending.empty() && round < kMaxRounds && Clock::now() < deadline; ++round) {
    if (learn) refresh(deadline);
    if (wait)  // the cluster is failing over or loading: give it a moment
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(20), deadline - Clock::now()));
    learn = wait = false;
    std::map<size_t, std::vector<size_t>> by_node;
    std::vector<size_t> again;
    for (size_t i : pending) {
      const int32_t node = ask[i] >= 0 ? ask[i] : slot_node_[key_slot(commands[i].key)];
      if (node < 0) {
        why[i] = "no node serves slot " + std::to_string(key_slot(commands[i].key));
        learn = wait = true;
        again.push_back(i);
      } else {
        by_node[static_cast<size_t>(node)].push_back(i);
      }
    }
    for (auto& [node, idx] : by_node) {
      std::string failed;
      redisContext* c = connect(node, deadline, &failed);
      if (!c) {
        for (size_t i : idx) why[i] = failed;
        again.insert(again.end(), idx.begin(), idx.end());
        learn = true;
        continue;
      }
      redisSetTimeout(c, until(deadline));
      for (size_t i : idx) {
        if (ask[i] >= 0) redisAppendCommand(c, "ASKING");
        append(c, commands[i]);
      }
      for (size_t k = 0; k < idx.size(); ++k) {
        const size_t i = idx[k];
        void* raw = nullptr;
        bool io_ok = true;
        if (ask[i] >= 0) {
          io_ok = redisGetReply(c, &raw) == REDIS_OK;
          if (raw) freeReplyObject(raw);
          raw = nullptr;
        }
        if (io_ok) io_ok = redisGetReply(c, &raw) == REDIS_OK && raw;
        if (!io_ok) {  // the connection is gone or timed out: what it had not answered goes again
          const std::string lost = nodes_[node].at.describe() + ": " + (c->errstr[0] ? c->errstr : "no reply");
          for (size_t j = k; j < idx.size(); ++j) why[idx[j]] = lost;
          again.insert(again.end(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end());
          drop(node);
          learn = true;
          break;
        }
        std::shared_ptr<redisReply> root(static_cast<redisReply*>(raw), freeReplyObject);
        Reply r(root, root.get());
        const std::string_view msg = r.type() == Reply::Type::kError ? r.str() : std::string_view();
        if (starts_with(msg, "MOVED ") || starts_with(msg, "ASK ")) {
          auto to = parse_redirect(msg);
          if (to) {
            ++stats_.redirects;
            const auto target = static_cast<int32_t>(node_for(to->second));
            if (msg[0] == 'M') {
              slot_node_[to->first] = target;
              ask[i] = -1;
              learn = true;  // a slot moved: others probably did too
            } else {
              ask[i] = target;
            }
            why[i] = std::string(msg);
            again.push_back(i);
            continue;
          }
        } else if (starts_with(msg, "TRYAGAIN") || starts_with(msg, "CLUSTERDOWN") || starts_with(msg, "LOADING") ||
                   starts_with(msg, "MASTERDOWN")) {
          why[i] = std::string(msg);
          again.push_back(i);
          wait = true;
          if (starts_with(msg, "CLUSTERDOWN")) learn = true;
          continue;
        }
        ask[i] = -1;
        out[i] = std::move(r);
      }
    }
    pending = std::move(again);
  }
  for (size_t i : pending) {
    out[i] = Reply::failure("remote: " + (why[i].empty() ? std::string("not sent") : why[i]) +
                            " (no answer within " + std::to_string(timeout_.count()) + " ms)");
    ++stats_.failures;
  }
  return out;
}

Reply Cluster::run_at(const Endpoint& at, const Command& cmd) {
  const size_t node = node_for(at);
  const auto deadline = Clock::now() + timeout_;
  std::string why;
  redisContext* c = connect(node, deadline, &why);
  if (!c) return Reply::failure("remote: " + why);
  redisSetTimeout(c, until(deadline));
  append(c, cmd);
  void* reply = nullptr;
  auto* raw = redisGetReply(c, &reply) == REDIS_OK ? static_cast<redisReply*>(reply) : nullptr;
  if (!raw) {
    why = at.describe() + ": " + (c->errstr[0] ? c->errstr : "no reply");
    drop(node);
    return Reply::failure("remote: " + why);
  }
  std::shared_ptr<redisReply> root(raw, freeReplyObject);
  return Reply(root, root.get());
}

std::vector<Endpoint> Cluster::masters() const {
  std::vector<Endpoint> out;
  for (int32_t n : slot_node_)
    if (n >= 0 && std::find(out.begin(), out.end(), nodes_[n].at) == out.end()) out.push_back(nodes_[n].at);
  return out;
}

}  // namespace tutti::remote
