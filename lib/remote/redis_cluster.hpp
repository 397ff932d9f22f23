// SPDX-License-Identifier: Apache-2.0
// A small Redis Cluster client over hiredis's blocking connections (hiredis 0.14 knows no
// cluster): it learns which node serves which hash slot (CLUSTER SLOTS), sends each command to
// the node of its key's slot, pipelines every command of a call per node, follows MOVED and ASK
// redirects, and after a failed connection or a failover learns the slots again. Every call has
// a deadline: a command that cannot be answered by then gets an error reply, never a hang.
//
// One client per thread: a client is not safe for concurrent use (open one per I/O thread; each
// has its own connections).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;
struct redisReply;

namespace tutti::remote {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
  std::string describe() const { return host + ":" + std::to_string(port); }
};

// "redis://host:port,host:port" or "host:port,...": the nodes to learn the cluster from.
// Throws EINVAL for anything else.
std::vector<Endpoint> parse_seeds(std::string_view uri);

// The hash slot of a key (CRC16/XMODEM of the key, or of its first non-empty {hash tag}, mod 16384).
uint16_t key_slot(std::string_view key);
uint16_t crc16(std::string_view bytes);  // CRC16/XMODEM, as Redis Cluster uses it

inline constexpr unsigned kSlots = 16384;

// One command: its arguments (binary-safe; they must live until the call returns) and the key
// that routes it (usually one of the arguments).
struct Command {
  std::vector<std::string_view> args;
  std::string_view key;
};

// A reply, or a client-side failure (timeout, no node reachable) as an error. Strings point into
// the hiredis reply it holds: no copy of a value.
class Reply {
 public:
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };
  Reply() = default;
  static Reply failure(std::string why);
  Type type() const;
  bool ok() const { return type() != Type::kError; }
  std::string_view str() const;  // a string, a status, or an error's message
  long long integer() const;
  size_t size() const;  // elements of an array
  Reply at(size_t i) const;

 private:
  friend class Cluster;
  Reply(std::shared_ptr<redisReply> root, const redisReply* r) : root_(std::move(root)), r_(r) {}
  std::shared_ptr<redisReply> root_;
  const redisReply* r_ = nullptr;
  std::string failure_ = "no reply";
};

struct ClusterStats {
  uint64_t commands = 0;
  uint64_t redirects = 0;      // MOVED and ASK followed
  uint64_t refreshes = 0;      // CLUSTER SLOTS asked
  uint64_t reconnects = 0;     // connections opened after the first to a node
  uint64_t failures = 0;       // commands answered by the client with an error (deadline, no node)
};

class Cluster {
 public:
  // Learns the slots from the first seed that answers; throws EIO when none does within
  // `timeout`.
  Cluster(std::vector<Endpoint> seeds, std::chrono::milliseconds timeout);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Runs the commands, pipelined per node, and returns their replies in order. Each reply is
  // the node's answer, or an error: Redis's own (e.g. WRONGTYPE), or the client's when the call's
  // deadline (now + timeout) passed first or no node serves the slot.
  std::vector<Reply> run(std::span<const Command> commands);
  Reply run(const Command& c) { return std::move(run(std::span<const Command>(&c, 1))[0]); }

  // One command to one node, whatever its slots (INFO, CLUSTER ...): no redirects followed.
  Reply run_at(const Endpoint& node, const Command& c);

  // The masters that serve slots now, as last learnt.
  std::vector<Endpoint> masters() const;
  const ClusterStats& stats() const { return stats_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Node {
    Endpoint at;
    std::unique_ptr<redisContext, void (*)(redisContext*)> conn{nullptr, nullptr};
    bool connected_once = false;
  };
  using Clock = std::chrono::steady_clock;

  size_t node_for(const Endpoint& e);
  redisContext* connect(size_t node, Clock::time_point deadline, std::string* why);
  void drop(size_t node);
  bool refresh(Clock::time_point deadline);  // CLUSTER SLOTS from any node that answers

  std::vector<Endpoint> seeds_;
  std::chrono::milliseconds timeout_;
  std::vector<Node> nodes_;
  std::vector<int32_t> slot_node_ = std::vector<int32_t>(kSlots, -1);  // node index, or -1
  ClusterStats stats_;
};

}  // namespace tutti::remote
