// SPDX-License-Identifier: Apache-2.0
/* integrity.c — shared pieces of the integrity tests (see integrity.h). */
#define _GNU_SOURCE
#include "integrity.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IT_REQUIRE(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: test bug or out of memory: %s\n", __FILE__, __LINE__,  \
              #cond);                                                                 \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

/* ---- Shapes and layouts ---------------------------------------------------------------- */

static const it_shape shapes[] = {
    /* layers heads head_dim elem chunk */
    {2, 2, 32, 2, 16}, /* K of a chunk-layer 2 KiB: padded to 4 KiB, always staged */
    {3, 1, 64, 2, 32}, /* 4 KiB: direct to 32-token NHD blocks */
    {2, 2, 64, 2, 32}, /* 8 KiB: direct to 16- and 32-token NHD blocks */
    {1, 4, 8, 4, 8},   /* 1 KiB of 4-byte elements, 3 KiB of padding */
    {4, 1, 16, 1, 64}, /* 1-byte elements, 64-token chunks */
    {2, 8, 64, 2, 256}, /* 512 KiB chunk-layers: checked loads into aligned blocks in pieces */
};

size_t it_shape_count(void) { return sizeof shapes / sizeof shapes[0]; }

it_shape it_shape_get(size_t i) { return shapes[i % it_shape_count()]; }

const char* it_shape_describe(const it_shape* s, char* buf, size_t cap) {
  snprintf(buf, cap, "%u layers x %u heads x %u dim x %u B, %u-token chunks", s->layers,
           s->heads, s->head_dim, s->elem_bytes, s->chunk_tokens);
  return buf;
}

uint64_t it_layer_bytes(const it_shape* s) {
  uint64_t kv = (uint64_t)s->chunk_tokens * s->heads * s->head_dim * s->elem_bytes;
  return 2 * ((kv + 4095) / 4096 * 4096);
}

uint64_t it_slot_bytes(const it_shape* s) { return it_layer_bytes(s) * s->layers; }

void it_capacity(char* out, size_t cap, const it_shape* s, unsigned slots) {
  IT_REQUIRE(slots < 255);
  snprintf(out, cap, "%llu", (unsigned long long)((1u << 20) + slots * it_slot_bytes(s)));
}

th_kv_spec it_random_spec(const it_shape* s, uint32_t num_blocks, uint64_t* rng) {
  th_kv_spec k;
  memset(&k, 0, sizeof k);
  k.num_layers = s->layers;
  k.num_kv_heads = s->heads;
  k.head_dim = s->head_dim;
  k.elem_bytes = s->elem_bytes;
  k.num_blocks = num_blocks;
  /* a block size dividing the chunk: the chunk itself, half, a quarter (at least 4 tokens) */
  uint32_t bt = s->chunk_tokens;
  uint32_t halvings = (uint32_t)th_rand_below(rng, 3);
  for (uint32_t i = 0; i < halvings && bt % 2 == 0 && bt / 2 >= 4; i++) bt /= 2;
  k.block_tokens = bt;
  k.hnd = (int)th_rand_below(rng, 2);
  k.fused = (int)th_rand_below(rng, 2);
  if (th_rand_below(rng, 4) == 0) {
    /* hand-made strides with padding after tokens/rows and after blocks */
    k.token_pad = 8u * (uint32_t)th_rand_below(rng, 3);
    k.block_pad = 64u * (uint32_t)th_rand_below(rng, 3);
    if (k.token_pad == 0 && k.block_pad == 0) k.block_pad = 64;
  }
  if (th_rand_below(rng, 6) == 0) k.misalign = 64;
  return k;
}

const char* it_spec_describe(const th_kv_spec* s, char* buf, size_t cap) {
  snprintf(buf, cap, "%s%s, %u-token blocks x %u, token_pad %u, block_pad %u, misalign %u",
           s->hnd ? "HND" : "NHD", s->fused ? " fused" : "", s->block_tokens, s->num_blocks,
           s->token_pad, s->block_pad, s->misalign);
  return buf;
}

/* ---- Prompts --------------------------------------------------------------------------- */

void it_universe_init(it_universe* u, uint64_t seed, size_t count, uint32_t chunk_tokens,
                      uint32_t max_chunks) {
  const size_t families = count / 4 ? count / 4 : 1;
  const size_t longest = (size_t)max_chunks * chunk_tokens;
  th_prompt* bases = calloc(families, sizeof *bases);
  u->p = calloc(count ? count : 1, sizeof *u->p);
  IT_REQUIRE(bases && u->p);
  u->count = count;
  u->chunk_tokens = chunk_tokens;
  u->max_chunks = max_chunks;
  for (size_t f = 0; f < families; f++) {
    uint64_t rng = th_mix64(seed ^ th_mix64(0xFA000000ull + f));
    th_prompt_random(&bases[f], &rng, longest + chunk_tokens);
  }
  for (size_t i = 0; i < count; i++) {
    uint64_t rng = th_mix64(seed ^ th_mix64(0x9A000000ull + i));
    const th_prompt* base = &bases[i % families];
    /* shared prefix: whole chunks most of the time, sometimes ending inside a chunk */
    size_t shared = (size_t)th_rand_below(&rng, max_chunks + 1) * chunk_tokens;
    if (th_rand_below(&rng, 4) == 0) shared += (size_t)th_rand_below(&rng, chunk_tokens);
    /* length: 1..max_chunks whole chunks, plus a partial chunk at times */
    size_t n = (1 + (size_t)th_rand_below(&rng, max_chunks)) * chunk_tokens;
    if (th_rand_below(&rng, 3) == 0) n += (size_t)th_rand_below(&rng, chunk_tokens);
    if (n > longest + chunk_tokens - 1) n = longest + chunk_tokens - 1;
    th_prompt_extend(&u->p[i], base, shared, &rng, n);
  }
  for (size_t f = 0; f < families; f++) th_prompt_free(&bases[f]);
  free(bases);
}

void it_universe_free(it_universe* u) {
  for (size_t i = 0; i < u->count; i++) th_prompt_free(&u->p[i]);
  free(u->p);
  memset(u, 0, sizeof *u);
}

size_t it_whole_chunks(const th_prompt* p, uint32_t chunk_tokens) { return p->n / chunk_tokens; }

/* ---- Block tables ---------------------------------------------------------------------- */

void it_tables_init(it_tables* t, uint32_t num_blocks, uint64_t* rng) {
  t->perm = malloc((num_blocks ? num_blocks : 1) * sizeof *t->perm);
  IT_REQUIRE(t->perm);
  t->num_blocks = num_blocks;
  it_tables_reset(t, rng);
}

void it_tables_reset(it_tables* t, uint64_t* rng) {
  for (size_t i = 0; i < t->num_blocks; i++) t->perm[i] = (int32_t)i;
  for (size_t i = t->num_blocks; i > 1; i--) {
    size_t j = (size_t)th_rand_below(rng, i);
    int32_t x = t->perm[i - 1];
    t->perm[i - 1] = t->perm[j];
    t->perm[j] = x;
  }
  t->next = 0;
}

int32_t* it_tables_take(it_tables* t, size_t count) {
  if (t->next + count > t->num_blocks) return NULL;
  int32_t* out = t->perm + t->next;
  t->next += count;
  return out;
}

void it_tables_free(it_tables* t) {
  free(t->perm);
  t->perm = NULL;
}

/* ---- Batches --------------------------------------------------------------------------- */

static void to_requests(const it_req* reqs, size_t n, tutti_request* out) {
  for (size_t i = 0; i < n; i++)
    out[i] = th_request(reqs[i].p, reqs[i].table, reqs[i].ntable, reqs[i].begin, reqs[i].end);
}

void it_store(tutti_runtime* rt, th_kv* kv, const it_req* reqs, size_t n, it_outcome* out) {
  tutti_request r[8];
  IT_REQUIRE(n <= 8);
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < n; i++) th_kv_fill(kv, reqs[i].p, reqs[i].table, reqs[i].begin, reqs[i].end);
  to_requests(reqs, n, r);
  out->rc = th_batch_run(rt, TUTTI_OP_STORE, r, n, out->res, 0, 0);
  if (out->rc) snprintf(out->msg, sizeof out->msg, "%s", th_batch_error());
}

void it_load(tutti_runtime* rt, th_kv* kv, const it_req* reqs, size_t n, it_outcome* out) {
  tutti_request r[8];
  IT_REQUIRE(n <= 8);
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < n; i++) th_kv_poison_blocks(kv, reqs[i].table, reqs[i].ntable);
  for (size_t i = 0; i < n; i++) th_kv_expect(kv, reqs[i].p, reqs[i].table, reqs[i].begin, reqs[i].end);
  to_requests(reqs, n, r);
  /* wait layer by layer half of the time: the per-layer path of an engine */
  int wait_layers = (int)((reqs[0].end / kv->spec.block_tokens + n) & 1);
  out->rc = th_batch_run(rt, TUTTI_OP_LOAD, r, n, out->res, wait_layers, kv->spec.num_layers);
  if (out->rc) snprintf(out->msg, sizeof out->msg, "%s", th_batch_error());
  for (size_t i = 0; i < n; i++) {
    /* what the result does not claim is unspecified (a failed chunk may be half-written) */
    size_t span = reqs[i].end - reqs[i].begin;
    size_t got = out->res[i].tokens < span ? out->res[i].tokens : span;
    if (got < span) th_kv_dontcare(kv, reqs[i].p, reqs[i].table, reqs[i].begin + got, reqs[i].end);
  }
  char msg[512];
  out->wrong_bytes = th_kv_verify_all(kv, msg, sizeof msg);
  if (out->wrong_bytes) {
    snprintf(out->msg, sizeof out->msg, "%s", msg);
    th_kv_poison(kv); /* memory and shadow agree again for the next batch */
  }
}

int it_inconsistent(const it_req* reqs, size_t n, const it_outcome* out, uint32_t ct) {
  for (size_t i = 0; i < n; i++) {
    size_t want = (reqs[i].end - reqs[i].begin) / ct * ct;
    const tutti_result* r = &out->res[i];
    if (r->tokens > want || r->tokens != (size_t)r->chunks_ok * ct) return 1;
    if (out->rc == 0 && (r->status != 0 || r->tokens != want)) return 1;
  }
  return 0;
}

/* ---- Runtime --------------------------------------------------------------------------- */

int it_open(tutti_runtime** rt, const char* dir, const char* capacity, unsigned chunk_tokens,
            const char* const* extra, const th_kv* kv, int busy_ms, int* waited_ms) {
  int waited = 0;
  int rc = th_open(rt, dir, capacity, chunk_tokens, extra, kv);
  while (rc == TUTTI_EBUSY && waited < busy_ms) {
    struct timespec ten = {0, 10000000L};
    nanosleep(&ten, NULL);
    waited += 10;
    rc = th_open(rt, dir, capacity, chunk_tokens, extra, kv);
  }
  if (waited_ms) *waited_ms = waited;
  return rc;
}

void it_pool_path(char* out, size_t cap, const char* dir) {
  snprintf(out, cap, "%s/pool.tutti", dir);
}

void it_child_fail(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(NULL);
  _exit(code);
}

void it_preload_faultshim(const char* shim, const char* pool, const char* plan) {
  setenv("LD_PRELOAD", shim, 1);
  setenv("TUTTI_FAULT_PREFIX", pool, 1);
  setenv("TUTTI_FAULT_PLAN", plan, 1);
  char asan[4096];
  const char* prev = getenv("ASAN_OPTIONS");
  snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", prev ? prev : "", prev && *prev ? ":" : "");
  setenv("ASAN_OPTIONS", asan, 1);
}

int it_run_child(const char* shim, const char* plan, const char* stall_ms, const char* const* args) {
  char dir[4096], pool[4200];
  if (th_mkdtemp(dir, sizeof dir) != 0) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  it_pool_path(pool, sizeof pool, dir);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (plan) {
      it_preload_faultshim(shim, pool, plan);
      setenv("TUTTI_FAULT_STALL_MS", stall_ms, 1);
    }
    char* argv[16] = {"/proc/self/exe", "--child", dir};
    for (size_t i = 0; args[i] && i + 4 < sizeof argv / sizeof argv[0]; i++) argv[3 + i] = (char*)args[i];
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  th_rmtree(dir);
  return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
