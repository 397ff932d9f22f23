// SPDX-License-Identifier: Apache-2.0
// A Redis Cluster of real redis-server processes on 127.0.0.1 (Debian: redis-server and
// redis-tools), for the tests: N masters with a replica each, made with `redis-cli --cluster
// create`, in a temporary directory, on ports picked at random; killed and removed at the end.
#pragma once

#include <hiredis.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "remote/redis_cluster.hpp"

extern char** environ;

namespace tutti::remote::testing {

// The first `name` on PATH that can be run, or "".
inline std::string find_tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    std::string p = dirs.substr(at, end - at) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
    at = end + 1;
  }
  for (const char* d : {"/usr/bin/", "/usr/sbin/"})
    if (::access((std::string(d) + name).c_str(), X_OK) == 0) return d + name;
  return "";
}

// The value of `key` in an INFO answer ("key:value\r\n"), or "".
inline std::string field(const std::string& info, const std::string& key) {
  const size_t at = info.find("\n" + key + ":");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  return info.substr(from, info.find_first_of("\r\n", from) - from);
}

// One command to one node, outside the cluster client (set-up and inspection).
inline std::string node_command(const Endpoint& at, const std::string& cmd) {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout(at.host.c_str(), at.port, tv);
  std::string out;
  if (c && !c->err) {
    redisSetTimeout(c, tv);
    if (auto* r = static_cast<redisReply*>(redisCommand(c, cmd.c_str()))) {
      if (r->str) out.assign(r->str, r->len);
      if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
      freeReplyObject(r);
    }
  }
  if (c) redisFree(c);
  return out;
}

class LocalCluster {
 public:
  // Empty `why` when it runs; else why not (no redis-server here: the test skips).
  explicit LocalCluster(int masters = 3) {
    server_ = find_tool("redis-server");
    cli_ = find_tool("redis-cli");
    if (server_.empty() || cli_.empty()) {
      why = "redis-server or redis-cli not found (Debian: apt-get install redis-server redis-tools)";
      return;
    }
    char tmpl[] = "/tmp/tutti-redis-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      why = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    std::random_device rd;
    // Below Linux's ephemeral ports (32768 and up), bus ports (+10000) too: a client's own
    // port never equals a node's.
    const int base = 10000 + static_cast<int>(rd() % 1200) * 10;
    for (int i = 0; i < masters * 2; ++i) {
      nodes.push_back(Endpoint{"127.0.0.1", static_cast<uint16_t>(base + i)});
      pids_.push_back(spawn(i));
    }
    for (auto& n : nodes)
      if (!wait_for([&] { return node_command(n, "PING") == "PONG"; })) {
        why = "redis-server on " + n.describe() + " did not start (see " + dir_ + ")";
        return;
      }
    std::string cmd = cli_ + " --cluster create";
    for (auto& n : nodes) cmd += " " + n.describe();
    cmd += " --cluster-replicas 1 --cluster-yes >" + dir_ + "/create.log 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      why = "redis-cli --cluster create failed (see " + dir_ + "/create.log)";
      return;
    }
    if (!wait_for([&] {
          for (auto& n : nodes)
            if (node_command(n, "CLUSTER INFO").find("cluster_state:ok") == std::string::npos) return false;
          return true;
        }))
      why = "the cluster did not reach cluster_state:ok";
  }

  ~LocalCluster() {
    for (pid_t p : pids_)
      if (p > 0) ::kill(p, SIGKILL);
    for (pid_t p : pids_)
      if (p > 0) ::waitpid(p, nullptr, 0);
    if (!dir_.empty() && std::getenv("TUTTI_KEEP_REDIS") == nullptr && std::system(("rm -rf " + dir_).c_str()) != 0)
      std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }

  std::string seeds() const {
    std::string s = "redis://";
    for (size_t i = 0; i < nodes.size(); ++i) s += (i ? "," : "") + nodes[i].describe();
    return s;
  }
  void kill(size_t i) {
    ::kill(pids_[i], SIGKILL);
    ::waitpid(pids_[i], nullptr, 0);
    pids_[i] = -1;
  }
  void kill_all() {
    for (size_t i = 0; i < pids_.size(); ++i)
      if (pids_[i] > 0) kill(i);
  }
  // Every node stopped (SIGSTOP): connections open, nothing answers; and resumed.
  void pause_all() { signal_all(SIGSTOP); }
  void resume_all() { signal_all(SIGCONT); }
  // Every master's replica is online and has acknowledged all the master has (a master killed
  // before that has a successor without some of its values: this cluster lets any replica
  // stand for election). A node that does not answer is not known to be in sync.
  bool replicas_in_sync() const {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (pids_[i] <= 0) continue;
      const std::string info = node_command(nodes[i], "INFO replication");
      if (info.find("role:") == std::string::npos) return false;
      if (info.find("role:master") == std::string::npos) continue;
      const std::string offset = field(info, "master_repl_offset");
      const std::string replica = field(info, "slave0");  // ip=..,port=..,state=online,offset=N,lag=..
      if (offset.empty() || replica.find("state=online") == std::string::npos ||
          replica.find(",offset=" + offset + ",") == std::string::npos)
        return false;
    }
    return true;
  }
  // For a failure's message: each node, alive or not, its view of the cluster and its log's
  // last lines.
  std::string report() const {
    std::string out;
    for (size_t i = 0; i < nodes.size(); ++i) {
      out += "node " + nodes[i].describe() + (pids_[i] > 0 ? "" : " (killed by the test)") + "\n";
      if (pids_[i] <= 0) continue;
      int status = 0;
      if (::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) out += "  exited on its own, status " + std::to_string(status) + "\n";
      const std::string info = node_command(nodes[i], "CLUSTER INFO");
      const size_t st = info.find("cluster_state:");
      out += "  " + (st == std::string::npos ? std::string("no CLUSTER INFO") : info.substr(st, info.find('\r', st) - st)) + "\n";
      out += node_command(nodes[i], "CLUSTER NODES");
      std::string tail = "tail -n 6 " + dir_ + "/" + std::to_string(nodes[i].port) + ".log 2>/dev/null";
      if (FILE* f = ::popen(tail.c_str(), "r")) {
        char line[512];
        while (std::fgets(line, sizeof line, f)) out += std::string("  | ") + line;
        ::pclose(f);
      }
    }
    return out;
  }
  size_t index_of(const Endpoint& e) const {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i] == e) return i;
    return nodes.size();
  }
  const std::string& cli() const { return cli_; }
  const std::string& dir() const { return dir_; }

  template <class Pred>
  static bool wait_for(Pred ok, std::chrono::seconds limit = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!ok()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  }

  std::string why;
  std::vector<Endpoint> nodes;

 private:
  pid_t spawn(int i) {
    const std::string port = std::to_string(nodes[i].port);
    // A replica always stands for election when its master fails (validity factor 0): on a loaded
    // machine its last exchange with the master can look too old, and it would then refuse.
    std::vector<std::string> args = {server_, "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                                     "--cluster-config-file", "nodes-" + port + ".conf", "--cluster-node-timeout",
                                     "1000", "--cluster-replica-validity-factor", "0", "--appendonly", "no",
                                     "--save", "", "--dir", dir_, "--logfile", dir_ + "/" + port + ".log",
                                     "--daemonize", "no", "--protected-mode", "no"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, server_.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
    return pid;
  }

  void signal_all(int sig) {
    for (pid_t p : pids_)
      if (p > 0) ::kill(p, sig);
  }

  std::string server_, cli_, dir_;
  std::vector<pid_t> pids_;
};

}  // namespace tutti::remote::testing
