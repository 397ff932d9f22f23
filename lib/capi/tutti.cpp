// SPDX-License-Identifier: Apache-2.0
// The C ABI shim: opaque handles over the C++ runtime. Every entry point runs its body through
// guard(), which turns exceptions into a tutti_error code and the thread-local message.
#include "tutti.h"

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "runtime/config.hpp"
#include "lookup/client.hpp"
#include "runtime/runtime.hpp"
#include "runtime/batch.hpp"

struct tutti_options {
  tutti::Options impl;
};
struct tutti_runtime {
  std::shared_ptr<tutti::Runtime> impl;
};
struct tutti_batch {
  std::unique_ptr<tutti::Batch> impl;
};
struct tutti_lease {
  std::shared_ptr<tutti::Runtime> rt;
  uint64_t id = 0;
};
struct tutti_lookup_client {
  std::unique_ptr<tutti::LookupClient> impl;
};

namespace {

thread_local std::string last_error;

template <class Fn>
int guard(Fn&& fn) noexcept {
  try {
    last_error.clear();
    fn();
    return TUTTI_OK;
  } catch (const tutti::Error& e) {
    last_error = tutti::user_message(e);
    return e.code();
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return TUTTI_ENOMEM;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return TUTTI_EINTERNAL;
  } catch (...) {
    last_error = "internal error";
    return TUTTI_EINTERNAL;
  }
}

void need(const void* p, const char* what, tutti::SourceSite site = tutti::SourceSite::here()) {
  if (!p) tutti::fail(TUTTI_EINVAL, std::string(what) + " is NULL", site);
}

}  // namespace

extern "C" {

unsigned tutti_version_number(void) { return TUTTI_VERSION_NUMBER; }

const char* tutti_version_string(void) {
#define TUTTI_STR2(x) #x
#define TUTTI_STR(x) TUTTI_STR2(x)
  return TUTTI_STR(TUTTI_VERSION_MAJOR) "." TUTTI_STR(TUTTI_VERSION_MINOR) "." TUTTI_STR(TUTTI_VERSION_PATCH);
}

void tutti_set_log_callback(tutti_log_fn fn, void* user, int level) { tutti::set_log_callback(fn, user, level); }

const char* tutti_strerror(int code) {
  switch (code) {
    case TUTTI_OK: return "success";
    case TUTTI_EINVAL: return "invalid argument";
    case TUTTI_ENOMEM: return "out of host memory";
    case TUTTI_EIO: return "storage I/O error";
    case TUTTI_ENOSPC: return "pool or disk full";
    case TUTTI_ENOENT: return "chunk not in the pool";
    case TUTTI_ELAYOUT: return "pool made for another KV layout";
    case TUTTI_ECORRUPT: return "on-disk data failed its checksum";
    case TUTTI_ESTATE: return "call not valid in the current state";
    case TUTTI_EUNSUPPORTED: return "not supported by this build or machine";
    case TUTTI_EACCES: return "pool path cannot be opened or created";
    case TUTTI_EINTERNAL: return "internal error";
    case TUTTI_EBUSY: return "pool in use by another runtime";
    default: return "unknown error code";
  }
}

const char* tutti_last_error(void) { return last_error.c_str(); }

int tutti_options_create(tutti_options** out) {
  return guard([&] {
    need(out, "out");
    *out = new tutti_options();
  });
}

void tutti_options_destroy(tutti_options* opts) { delete opts; }

int tutti_options_set(tutti_options* opts, const char* key, const char* value) {
  return guard([&] {
    need(opts, "opts");
    need(key, "key");
    need(value, "value");
    opts->impl.set(key, value);
  });
}

int tutti_runtime_open(const tutti_options* opts, tutti_runtime** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(opts, "opts");
    auto cfg = opts->impl.resolve();
    auto rt = std::make_unique<tutti_runtime>();
    rt->impl = std::make_shared<tutti::Runtime>(std::move(cfg));
    *out = rt.release();
  });
}

void tutti_runtime_close(tutti_runtime* rt) {
  if (!rt) return;
  try {
    rt->impl->close();
  } catch (...) {  // close cannot report; the destructor still releases what is left
  }
  delete rt;
}

const char* tutti_runtime_backend(const tutti_runtime* rt) { return rt ? rt->impl->backend_name() : ""; }

int tutti_kv_layout_init(tutti_kv_layout* l, uint32_t num_layers, uint32_t num_blocks, uint32_t block_tokens,
                         uint32_t num_kv_heads, uint32_t head_dim, uint32_t elem_bytes, int hnd) {
  return guard([&] {
    need(l, "layout");
    TUTTI_EXPECT(hnd == 0 || hnd == 1, "hnd must be 0 or 1");
    std::memset(l, 0, sizeof *l);
    l->struct_size = sizeof *l;
    l->num_layers = num_layers;
    l->num_blocks = num_blocks;
    l->block_tokens = block_tokens;
    l->num_kv_heads = num_kv_heads;
    l->head_dim = head_dim;
    l->elem_bytes = elem_bytes;
    l->memory = TUTTI_MEMORY_HOST;
    const uint64_t row = uint64_t{head_dim} * elem_bytes;
    l->block_stride = row * num_kv_heads * block_tokens;
    l->token_stride = hnd ? row : row * num_kv_heads;
    l->head_stride = hnd ? row * block_tokens : row;
  });
}

int tutti_runtime_register_kv(tutti_runtime* rt, const tutti_kv_layout* layout) {
  return guard([&] {
    need(rt, "rt");
    need(layout, "layout");
    rt->impl->register_kv(*layout);
  });
}

int tutti_lookup(tutti_runtime* rt, const int32_t* tokens, size_t num_tokens, const void* salt, size_t salt_len,
                 size_t* cached_tokens) {
  return guard([&] {
    need(rt, "rt");
    need(cached_tokens, "cached_tokens");
    *cached_tokens = 0;
    *cached_tokens = rt->impl->lookup(tokens, num_tokens, salt, salt_len);
  });
}

int tutti_lookup_lease(tutti_runtime* rt, const int32_t* tokens, size_t num_tokens, const void* salt, size_t salt_len,
                       uint32_t ttl_ms, size_t* cached_tokens, tutti_lease** out) {
  return guard([&] {
    need(rt, "rt");
    need(cached_tokens, "cached_tokens");
    need(out, "out");
    *out = nullptr;
    auto lease = std::make_unique<tutti_lease>();
    lease->rt = rt->impl;
    lease->id = rt->impl->lookup_lease(tokens, num_tokens, salt, salt_len, ttl_ms, cached_tokens);
    *out = lease.release();
  });
}

void tutti_lease_release(tutti_lease* lease) {
  if (!lease) return;
  lease->rt->release_lease(lease->id);
  delete lease;
}

int tutti_lookup_client_open(const char* socket_path, uint32_t timeout_ms, tutti_lookup_client** out) {
  return guard([&] {
    need(socket_path, "socket_path");
    need(out, "out");
    *out = nullptr;
    auto c = std::make_unique<tutti_lookup_client>();
    c->impl = std::make_unique<tutti::LookupClient>(socket_path, timeout_ms);
    *out = c.release();
  });
}

int tutti_lookup_client_query(tutti_lookup_client* c, const int32_t* tokens, size_t num_tokens, const void* salt,
                              size_t salt_len, uint32_t ttl_ms, size_t* cached_tokens, uint64_t* lease) {
  return guard([&] {
    need(c, "client");
    need(cached_tokens, "cached_tokens");
    *cached_tokens = c->impl->query(tokens, num_tokens, salt, salt_len, ttl_ms, lease);
  });
}

int tutti_lookup_client_release(tutti_lookup_client* c, uint64_t lease) {
  return guard([&] {
    need(c, "client");
    c->impl->release(lease);
  });
}

void tutti_lookup_client_close(tutti_lookup_client* c) { delete c; }

int tutti_batch_create(tutti_runtime* rt, tutti_op op, tutti_batch** out) {
  return guard([&] {
    need(rt, "rt");
    need(out, "out");
    *out = nullptr;
    auto b = std::make_unique<tutti_batch>();
    b->impl = std::make_unique<tutti::Batch>(rt->impl, op);
    *out = b.release();
  });
}

int tutti_batch_add(tutti_batch* b, const tutti_request* reqs, size_t n) {
  return guard([&] {
    need(b, "batch");
    b->impl->add(reqs, n);
  });
}

int tutti_batch_submit(tutti_batch* b) {
  return guard([&] {
    need(b, "batch");
    b->impl->submit();
  });
}

int tutti_batch_wait_layer(tutti_batch* b, uint32_t layer) {
  return guard([&] {
    need(b, "batch");
    b->impl->wait_layer(layer);
  });
}

int tutti_batch_wait_layer_async(tutti_batch* b, uint32_t layer, void* cuda_stream) {
  return guard([&] {
    need(b, "batch");
    b->impl->wait_layer_async(layer, cuda_stream);
  });
}

int tutti_batch_layer_ready(tutti_batch* b, uint32_t layer, void* cuda_stream) {
  return guard([&] {
    need(b, "batch");
    b->impl->layer_ready(layer, cuda_stream);
  });
}

int tutti_batch_poll(const tutti_batch* b, uint32_t* layers_done, int* done) {
  return guard([&] {
    need(b, "batch");
    need(layers_done, "layers_done");
    need(done, "done");
    b->impl->poll(layers_done, done);
  });
}

int tutti_batch_wait(tutti_batch* b) {
  return guard([&] {
    need(b, "batch");
    if (int rc = b->impl->wait()) {
      const std::string why = b->impl->first_error();
      tutti::fail(rc, std::string("a request of the batch failed: ") + tutti_strerror(rc) +
                          (why.empty() ? "" : " (" + why + ")") + "; tutti_batch_result says which");
    }
  });
}

int tutti_batch_result(const tutti_batch* b, size_t request, tutti_result* out) {
  return guard([&] {
    need(b, "batch");
    need(out, "out");
    *out = b->impl->result(request);
  });
}

int tutti_batch_chunk_status(const tutti_batch* b, size_t request, int* status, size_t cap, size_t* n) {
  return guard([&] {
    need(b, "batch");
    need(n, "n");
    *n = b->impl->chunk_status(request, status, cap);
  });
}

void tutti_batch_destroy(tutti_batch* b) { delete b; }

int tutti_runtime_stats(const tutti_runtime* rt, tutti_stats* out) {
  return guard([&] {
    need(rt, "rt");
    need(out, "out");
    // Older callers pass the smaller struct they were built with: they get its fields.
    constexpr size_t v1 = offsetof(tutti_stats, tier_hits);
    const size_t size = out->struct_size;
    TUTTI_EXPECT(size >= v1 && size <= sizeof(tutti_stats) && size % 8 == 0,
                 "tutti_stats.struct_size must be sizeof(tutti_stats)");
    const tutti_stats s = rt->impl->stats();
    std::memcpy(out, &s, size);
    out->struct_size = static_cast<uint32_t>(size);
  });
}

int tutti_runtime_layer_wait_ns(const tutti_runtime* rt, uint64_t* ns, size_t cap, size_t* n) {
  return guard([&] {
    need(rt, "rt");
    need(n, "n");
    TUTTI_EXPECT(ns != nullptr || cap == 0, "ns is NULL");
    auto v = rt->impl->layer_wait_ns();
    *n = std::min(cap, v.size());
    std::copy_n(v.begin(), *n, ns);
  });
}

int tutti_runtime_histogram(const tutti_runtime* rt, int kind, tutti_histogram* out) {
  return guard([&] {
    need(rt, "rt");
    need(out, "out");
    rt->impl->histogram(kind, out);
  });
}

int tutti_runtime_events(tutti_runtime* rt, tutti_kv_event* out, size_t cap, size_t* n, uint64_t* dropped) {
  return guard([&] {
    need(rt, "rt");
    need(n, "n");
    TUTTI_EXPECT(out != nullptr || cap == 0, "out is NULL");
    *n = 0;
    tutti::KvEvents* ev = rt->impl->events();
    TUTTI_EXPECT_CODE(ev != nullptr, TUTTI_ESTATE,
                      "this runtime keeps no KV events: open it with option kv_events (how many to keep), and "
                      "register its KV cache");
    *n = ev->drain(out, cap, dropped);
  });
}

}  // extern "C"
