// SPDX-License-Identifier: Apache-2.0
// fuzz_lookup — the lookup service (lookup_socket) fed whatever a client process may send: the
// input is the byte stream of one connection, written to a runtime that holds one stored
// prompt (tokens 1..kStored, no salt), then half-closed. tests/fuzz/make-corpus writes seeds of
// well-formed requests (lookups, leases, releases) and broken ones.
// Invariants: no crash, leak, UB or hang in the runtime; the answers parse as a sequence of
// replies, each with a code of the enum, a message when it is not 0 (at most 1024 bytes), a hit
// that is whole chunks of the stored prompt; and after every input a well-formed client still
// gets the stored prompt's hit from the same runtime (a stream it could not follow was hung up).
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fuzz.hpp"
#include "lookup/protocol.hpp"

namespace {

constexpr uint32_t kLayers = 2, kBlocks = 16, kBlockTokens = 4, kHeads = 1, kDim = 8, kChunk = 4;
constexpr size_t kStored = 12;  // three chunks

struct Served {
  std::string dir, sock;
  std::vector<uint8_t> kv;
  std::vector<void*> k, v;
  tutti_runtime* rt = nullptr;
};

Served* g_served = nullptr;

void setup() {
  auto* s = new Served;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tutti-fuzz-lookup-XXXXXX";
  FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp %s", pattern.c_str());
  s->dir = pattern;
  s->sock = s->dir + "/lookup.sock";
  FUZZ_CHECK(s->sock.size() < sizeof(sockaddr_un{}.sun_path), "socket path too long: %s", s->sock.c_str());
  tutti_options* o = nullptr;
  FUZZ_CHECK(tutti_options_create(&o) == 0, "options");
  const std::string pool = s->dir + "/pool";
  const char* kv[][2] = {{"pool", pool.c_str()}, {"capacity", "8M"}, {"chunk_tokens", "4"}, {"staging", "1M"},
                         {"backend", "posix"}, {"threads", "1"}, {"lookup_socket", s->sock.c_str()}};
  for (auto& [key, value] : kv) FUZZ_CHECK(tutti_options_set(o, key, value) == 0, "%s: %s", key, tutti_last_error());
  FUZZ_CHECK(tutti_runtime_open(o, &s->rt) == 0, "open: %s", tutti_last_error());
  tutti_options_destroy(o);
  tutti_kv_layout l;
  FUZZ_CHECK(tutti_kv_layout_init(&l, kLayers, kBlocks, kBlockTokens, kHeads, kDim, 2, 0) == 0, "layout");
  s->kv.resize(2 * kLayers * kBlocks * l.block_stride, 0x5a);
  for (uint32_t i = 0; i < kLayers; ++i) {
    s->k.push_back(s->kv.data() + (2 * i) * kBlocks * l.block_stride);
    s->v.push_back(s->kv.data() + (2 * i + 1) * kBlocks * l.block_stride);
  }
  l.k_base = s->k.data();
  l.v_base = s->v.data();
  FUZZ_CHECK(tutti_runtime_register_kv(s->rt, &l) == 0, "register: %s", tutti_last_error());
  std::vector<int32_t> tokens(kStored), table(kStored / kBlockTokens);
  for (size_t i = 0; i < kStored; ++i) tokens[i] = static_cast<int32_t>(i + 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  tutti_request r{};
  r.tokens = tokens.data(), r.num_tokens = tokens.size(), r.block_table = table.data();
  r.num_block_ids = table.size(), r.token_end = TUTTI_TOKENS_ALL;
  tutti_batch* b = nullptr;
  FUZZ_CHECK(tutti_batch_create(s->rt, TUTTI_OP_STORE, &b) == 0 && tutti_batch_add(b, &r, 1) == 0 &&
                 tutti_batch_submit(b) == 0 && tutti_batch_wait(b) == 0,
             "store: %s", tutti_last_error());
  tutti_batch_destroy(b);
  g_served = s;
}

void teardown() {
  if (!g_served) return;
  tutti_runtime_close(g_served->rt);
  std::string cmd = "rm -rf '" + g_served->dir + "'";
  (void)!std::system(cmd.c_str());
  delete g_served;
  g_served = nullptr;
}

int connect_to(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  FUZZ_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "connect %s: %s", path.c_str(),
             std::strerror(errno));
  return fd;
}

// Checks the replies the runtime sent before it closed the connection.
void check_replies(const std::vector<uint8_t>& in) {
  size_t at = 0;
  while (at < in.size()) {
    tutti::lookup::Reply rp;
    FUZZ_CHECK(in.size() - at >= sizeof rp, "a reply cut short: %zu bytes left", in.size() - at);
    std::memcpy(&rp, in.data() + at, sizeof rp);
    at += sizeof rp;
    FUZZ_CHECK(fuzz_known_code(rp.status), "reply status %d", rp.status);
    FUZZ_CHECK(rp.message_len <= tutti::lookup::kMaxMessage && in.size() - at >= rp.message_len,
               "message of %u bytes, %zu left", rp.message_len, in.size() - at);
    FUZZ_CHECK(rp.status == 0 || rp.message_len > 0, "status %d without a message", rp.status);
    FUZZ_CHECK(rp.cached_tokens <= kStored && rp.cached_tokens % kChunk == 0, "a hit of %llu tokens",
               static_cast<unsigned long long>(rp.cached_tokens));
    at += rp.message_len;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_served) {
    setup();
    std::atexit(teardown);
  }
  const int fd = connect_to(g_served->sock);
  std::vector<uint8_t> replies;
  std::thread reader([&] {  // reads while the input is written: neither side's buffer fills
    uint8_t buf[4096];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EOF; ECONNRESET when the runtime hung up on unread input
      replies.insert(replies.end(), buf, buf + n);
    }
  });
  for (size_t off = 0; off < size;) {
    ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EPIPE: it hung up on a request it could not follow
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);  // the end of the input: the runtime answers what it got, then closes
  reader.join();
  ::close(fd);
  check_replies(replies);

  // The runtime still serves, and the stored prompt is found.
  tutti_lookup_client* c = nullptr;
  FUZZ_CHECK(tutti_lookup_client_open(g_served->sock.c_str(), 10000, &c) == 0, "reconnect: %s", tutti_last_error());
  int32_t tokens[kStored];
  for (size_t i = 0; i < kStored; ++i) tokens[i] = static_cast<int32_t>(i + 1);
  size_t hit = 0;
  const int rc = tutti_lookup_client_query(c, tokens, kStored, nullptr, 0, 0, &hit, nullptr);
  FUZZ_CHECK(rc == 0 && hit == kStored, "lookup after the input: %d (%s), %zu tokens", rc, tutti_last_error(), hit);
  tutti_lookup_client_close(c);
  return 0;
}
