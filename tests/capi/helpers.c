// SPDX-License-Identifier: Apache-2.0
/* helpers.c — shared fixtures of the C API tests (see helpers.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "tutti_fixture.h"

#define TH_POISON 0xA5

/* Checks in code that worker threads and forked children run too: no cmocka there. */
#define TH_REQUIRE(cond)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: test bug or out of memory: %s\n", __FILE__,      \
              __LINE__, #cond);                                                 \
      abort();                                                                  \
    }                                                                           \
  } while (0)

/* ---- Random numbers ------------------------------------------------------------------ */

uint64_t th_mix64(uint64_t x) { return tf_mix64(x); }

uint64_t th_rand(uint64_t* state) {
  *state += 0x9E3779B97F4A7C15ull;
  return th_mix64(*state);
}

uint64_t th_rand_below(uint64_t* state, uint64_t n) { return n ? th_rand(state) % n : 0; }

uint64_t th_base_seed(void) {
  static int printed;
  static uint64_t seed;
  if (!printed) {
    const char* s = getenv("TUTTI_TEST_SEED");
    seed = s && *s ? strtoull(s, NULL, 0) : 0x5EEDu;
    fprintf(stderr, "# TUTTI_TEST_SEED=%llu\n", (unsigned long long)seed);
    printed = 1;
  }
  return seed;
}

/* ---- Temporary directories ----------------------------------------------------------- */

int th_mkdtemp(char* out, size_t cap) { return tf_tmpdir(out, cap, "capi"); }

void th_rmtree(const char* path) { tf_rmtree(path); }

void th_shm_dir(char* out, size_t cap) {
  snprintf(out, cap, "/dev/shm/tutti-test-XXXXXX");
  if (!mkdtemp(out)) {
    print_message("no /dev/shm here: %s\n", strerror(errno));
    skip();
  }
}

int th_setup_dir(void** state) {
  th_env* env = calloc(1, sizeof *env);
  if (!env) return -1;
  env->param = *state;
  if (th_mkdtemp(env->dir, sizeof env->dir) != 0) {
    fprintf(stderr, "mkdtemp failed: %s\n", strerror(errno));
    free(env);
    return -1;
  }
  *state = env;
  return 0;
}

int th_teardown_dir(void** state) {
  th_env* env = *state;
  if (env) {
    th_rmtree(env->dir);
    free(env);
  }
  *state = NULL;
  return 0;
}

/* ---- Prompts ------------------------------------------------------------------------- */

static void prompt_chain(th_prompt* p) {
  uint64_t h = 0x70C0FFEEull;
  for (size_t i = 0; i < p->salt_len; i++) h = th_mix64(h ^ p->salt[i]);
  p->chain = malloc((p->n ? p->n : 1) * sizeof *p->chain);
  TH_REQUIRE(p->chain);
  for (size_t i = 0; i < p->n; i++) {
    h = th_mix64(h ^ (uint32_t)p->tokens[i]);
    p->chain[i] = h;
  }
}

void th_prompt_init(th_prompt* p, const int32_t* tokens, size_t n, const void* salt,
                    size_t salt_len) {
  memset(p, 0, sizeof *p);
  TH_REQUIRE(salt_len <= sizeof p->salt);
  p->tokens = malloc((n ? n : 1) * sizeof *p->tokens);
  TH_REQUIRE(p->tokens);
  if (n) memcpy(p->tokens, tokens, n * sizeof *tokens);
  p->n = n;
  if (salt_len) memcpy(p->salt, salt, salt_len);
  p->salt_len = salt_len;
  prompt_chain(p);
}

void th_prompt_random(th_prompt* p, uint64_t* rng, size_t n) {
  int32_t* t = malloc((n ? n : 1) * sizeof *t);
  TH_REQUIRE(t);
  for (size_t i = 0; i < n; i++) t[i] = 1 + (int32_t)th_rand_below(rng, 49999);
  th_prompt_init(p, t, n, NULL, 0);
  free(t);
}

void th_prompt_extend(th_prompt* p, const th_prompt* base, size_t shared, uint64_t* rng,
                      size_t n) {
  int32_t* t = malloc((n ? n : 1) * sizeof *t);
  TH_REQUIRE(t);
  for (size_t i = 0; i < n; i++) {
    if (i < shared && i < base->n) {
      t[i] = base->tokens[i];
    } else {
      /* differ from base at position `shared` for sure */
      int32_t v = 1 + (int32_t)th_rand_below(rng, 49999);
      if (i < base->n && v == base->tokens[i]) v = v % 49999 + 1;
      t[i] = v;
    }
  }
  th_prompt_init(p, t, n, base->salt, base->salt_len);
  free(t);
}

void th_prompt_free(th_prompt* p) {
  free(p->tokens);
  free(p->chain);
  memset(p, 0, sizeof *p);
}

/* ---- KV cache ------------------------------------------------------------------------ */

th_kv_spec th_spec_default(void) {
  th_kv_spec s;
  memset(&s, 0, sizeof s);
  s.num_layers = 2;
  s.num_blocks = 64;
  s.block_tokens = 16;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.elem_bytes = 2;
  return s;
}

static unsigned char* kv_alloc(th_kv* kv, size_t bytes, unsigned char** shadow) {
  void* p = NULL;
  void* s = NULL;
  if (kv->n_alloc >= 64) return NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) return NULL;
  if (posix_memalign(&s, 4096, bytes ? bytes : 1) != 0) {
    free(p);
    return NULL;
  }
  memset(p, TH_POISON, bytes);
  memset(s, TH_POISON, bytes);
  kv->alloc[kv->n_alloc] = p;
  kv->shadow[kv->n_alloc] = s;
  kv->alloc_bytes[kv->n_alloc] = bytes;
  kv->n_alloc++;
  *shadow = s;
  return p;
}

int th_kv_create(th_kv** out, const th_kv_spec* spec) {
  th_kv* kv = calloc(1, sizeof *kv);
  if (!kv) return TUTTI_ENOMEM;
  kv->spec = *spec;
  kv->row = (size_t)spec->head_dim * spec->elem_bytes;
  if (spec->num_layers > 32) {
    free(kv);
    return TUTTI_EINVAL;
  }
  tutti_kv_layout* L = &kv->layout;
  if (spec->token_pad == 0 && spec->block_pad == 0) {
    int rc = tutti_kv_layout_init(L, spec->num_layers, spec->num_blocks, spec->block_tokens,
                                  spec->num_kv_heads, spec->head_dim, spec->elem_bytes,
                                  spec->hnd);
    if (rc != 0) {
      free(kv);
      return rc;
    }
  } else {
    memset(L, 0, sizeof *L);
    L->struct_size = sizeof *L;
    L->num_layers = spec->num_layers;
    L->num_blocks = spec->num_blocks;
    L->block_tokens = spec->block_tokens;
    L->num_kv_heads = spec->num_kv_heads;
    L->head_dim = spec->head_dim;
    L->elem_bytes = spec->elem_bytes;
    L->memory = TUTTI_MEMORY_HOST;
    if (spec->hnd) {
      L->token_stride = kv->row + spec->token_pad;
      L->head_stride = L->token_stride * spec->block_tokens;
      L->block_stride = L->head_stride * spec->num_kv_heads + spec->block_pad;
    } else {
      L->head_stride = kv->row;
      L->token_stride = kv->row * spec->num_kv_heads + spec->token_pad;
      L->block_stride = L->token_stride * spec->block_tokens + spec->block_pad;
    }
  }
  kv->tensor_bytes = (size_t)spec->num_blocks * L->block_stride;
  for (uint32_t l = 0; l < spec->num_layers; l++) {
    if (spec->fused) {
      unsigned char* s;
      unsigned char* p = kv_alloc(kv, 2 * kv->tensor_bytes + spec->misalign, &s);
      if (!p) goto oom;
      kv->k[l] = p + spec->misalign;
      kv->k_shadow[l] = s + spec->misalign;
      kv->v[l] = (unsigned char*)kv->k[l] + kv->tensor_bytes;
      kv->v_shadow[l] = kv->k_shadow[l] + kv->tensor_bytes;
    } else {
      unsigned char *sk, *sv;
      unsigned char* pk = kv_alloc(kv, kv->tensor_bytes + spec->misalign, &sk);
      if (!pk) goto oom;
      unsigned char* pv = kv_alloc(kv, kv->tensor_bytes + spec->misalign, &sv);
      if (!pv) goto oom;
      kv->k[l] = pk + spec->misalign;
      kv->v[l] = pv + spec->misalign;
      kv->k_shadow[l] = sk + spec->misalign;
      kv->v_shadow[l] = sv + spec->misalign;
    }
  }
  L->memory = TUTTI_MEMORY_HOST;
  L->device = 0;
  L->k_base = kv->k;
  if (spec->fused) {
    L->v_base = NULL;
    L->v_offset = kv->tensor_bytes;
  } else {
    L->v_base = kv->v;
    L->v_offset = 0;
  }
  *out = kv;
  return 0;
oom:
  th_kv_destroy(kv);
  return TUTTI_ENOMEM;
}

void th_kv_destroy(th_kv* kv) {
  if (!kv) return;
  for (size_t i = 0; i < kv->n_alloc; i++) {
    free(kv->alloc[i]);
    free(kv->shadow[i]);
  }
  free(kv);
}

/* The bytes of a row are the fixture's pattern (tests/fixture/), seeded per position by the
 * prompt's chain: a function of the salt, the tokens up to it, its position, layer, K/V, head. */
static tf_prompt fixture_prompt(const th_prompt* p, const int32_t* table) {
  tf_prompt f = {p->tokens, p->n, 0, p->chain, table};
  return f;
}

/* The cache's layout with its addresses moved to the shadow copy. */
typedef struct shadow_layout {
  tutti_kv_layout layout;
  void* k[32];
  void* v[32];
} shadow_layout;

static void shadow_of(const th_kv* kv, shadow_layout* s) {
  s->layout = kv->layout;
  for (uint32_t l = 0; l < kv->spec.num_layers; l++) {
    s->k[l] = kv->k_shadow[l];
    s->v[l] = kv->v_shadow[l];
  }
  s->layout.k_base = s->k;
  s->layout.v_base = kv->layout.v_base ? s->v : NULL;
}

void th_kv_fill(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin, size_t end) {
  tf_prompt f = fixture_prompt(p, table);
  tf_fill(&kv->layout, &f, begin, end);
  th_kv_expect(kv, p, table, begin, end);
}

void th_kv_expect(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                  size_t end) {
  shadow_layout s;
  tf_prompt f = fixture_prompt(p, table);
  shadow_of(kv, &s);
  tf_fill(&s.layout, &f, begin, end);
}

void th_kv_dontcare(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                    size_t end) {
  const tutti_kv_layout* L = &kv->layout;
  if (end > p->n) end = p->n;
  for (size_t t = begin; t < end; t++) {
    int32_t block = table[t / L->block_tokens];
    uint32_t slot = (uint32_t)(t % L->block_tokens);
    for (uint32_t l = 0; l < L->num_layers; l++)
      for (uint32_t h = 0; h < L->num_kv_heads; h++) {
        size_t off = tf_row_offset(L, block, slot, h);
        memcpy(kv->k_shadow[l] + off, (unsigned char*)kv->k[l] + off, kv->row);
        memcpy(kv->v_shadow[l] + off, (unsigned char*)kv->v[l] + off, kv->row);
      }
  }
}

void th_kv_poison(th_kv* kv) {
  for (size_t i = 0; i < kv->n_alloc; i++) {
    memset(kv->alloc[i], TH_POISON, kv->alloc_bytes[i]);
    memset(kv->shadow[i], TH_POISON, kv->alloc_bytes[i]);
  }
}

void th_kv_poison_layer(th_kv* kv, uint32_t l, const int32_t* table, size_t nblocks) {
  size_t bs = kv->layout.block_stride;
  for (size_t b = 0; b < nblocks; b++) {
    size_t off = (size_t)table[b] * bs;
    memset((unsigned char*)kv->k[l] + off, TH_POISON, bs);
    memset((unsigned char*)kv->v[l] + off, TH_POISON, bs);
    memset(kv->k_shadow[l] + off, TH_POISON, bs);
    memset(kv->v_shadow[l] + off, TH_POISON, bs);
  }
}

void th_kv_poison_blocks(th_kv* kv, const int32_t* table, size_t nblocks) {
  for (uint32_t l = 0; l < kv->spec.num_layers; l++) th_kv_poison_layer(kv, l, table, nblocks);
}

size_t th_kv_check(const th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                   size_t end, uint32_t layer_lo, uint32_t layer_hi, char* msg, size_t cap) {
  tf_mismatch m;
  tf_prompt f = fixture_prompt(p, table);
  size_t bad = tf_check(&kv->layout, &f, begin, end, layer_lo, layer_hi, &m);
  if (msg && cap) msg[0] = '\0';
  if (bad && msg) tf_describe(&m, msg, cap);
  return bad;
}

size_t th_kv_verify_all(const th_kv* kv, char* msg, size_t cap) {
  size_t bad = 0;
  if (msg && cap) msg[0] = '\0';
  for (size_t a = 0; a < kv->n_alloc; a++) {
    if (memcmp(kv->alloc[a], kv->shadow[a], kv->alloc_bytes[a]) == 0) continue;
    for (size_t i = 0; i < kv->alloc_bytes[a]; i++) {
      if (kv->alloc[a][i] == kv->shadow[a][i]) continue;
      if (bad == 0 && msg) {
        /* locate the byte: which layer/tensor, block, and offset inside the block */
        size_t off = i < kv->spec.misalign ? 0 : i - kv->spec.misalign;
        size_t per_layer = kv->spec.fused ? 1 : 2;
        size_t layer = a / per_layer;
        int is_v = kv->spec.fused ? off >= kv->tensor_bytes : (int)(a % 2);
        if (kv->spec.fused && is_v) off -= kv->tensor_bytes;
        snprintf(msg, cap,
                 "layer %zu %s byte %zu (block %zu, +%zu in the block): got 0x%02x, "
                 "expected 0x%02x",
                 layer, is_v ? "V" : "K", off, off / kv->layout.block_stride,
                 off % kv->layout.block_stride, kv->alloc[a][i], kv->shadow[a][i]);
      }
      bad++;
    }
  }
  return bad;
}

/* ---- Block tables -------------------------------------------------------------------- */

void th_blocks_init(th_blocks* a, uint32_t num_blocks, uint64_t* rng) {
  a->perm = malloc((num_blocks ? num_blocks : 1) * sizeof *a->perm);
  assert_non_null(a->perm);
  a->num_blocks = num_blocks;
  th_blocks_reset(a, rng);
}

void th_blocks_reset(th_blocks* a, uint64_t* rng) {
  for (size_t i = 0; i < a->num_blocks; i++) a->perm[i] = (int32_t)i;
  for (size_t i = a->num_blocks; i > 1; i--) {
    size_t j = (size_t)th_rand_below(rng, i);
    int32_t t = a->perm[i - 1];
    a->perm[i - 1] = a->perm[j];
    a->perm[j] = t;
  }
  a->next = 0;
}

void th_blocks_take(th_blocks* a, int32_t* out, size_t count) {
  if (a->next + count > a->num_blocks)
    fail_msg("test bug: %zu blocks wanted, %zu left", count, a->num_blocks - a->next);
  memcpy(out, a->perm + a->next, count * sizeof *out);
  a->next += count;
}

void th_blocks_free(th_blocks* a) {
  free(a->perm);
  a->perm = NULL;
}

size_t th_nblocks(size_t n, uint32_t block_tokens) {
  return (n + block_tokens - 1) / block_tokens;
}

tutti_request th_request(const th_prompt* p, const int32_t* table, size_t ntable, size_t begin,
                         size_t end) {
  tutti_request r;
  memset(&r, 0, sizeof r);
  r.tokens = p->tokens;
  r.num_tokens = p->n;
  r.block_table = table;
  r.num_block_ids = ntable;
  r.token_begin = begin;
  r.token_end = end;
  r.salt = p->salt_len ? p->salt : NULL;
  r.salt_len = p->salt_len;
  return r;
}

/* ---- Runtime and batches ------------------------------------------------------------- */

int th_options(tutti_options** out, const char* dir, const char* capacity,
               unsigned chunk_tokens, const char* const* extra) {
  char pool[4200];
  char chunk[32];
  tutti_options* o = NULL;
  *out = NULL;
  int rc = tutti_options_create(&o);
  if (rc) return rc;
  snprintf(pool, sizeof pool, "%s/pool.tutti", dir);
  snprintf(chunk, sizeof chunk, "%u", chunk_tokens);
  const char* kv[] = {"pool", pool,           "capacity", capacity ? capacity : "64M",
                      "chunk_tokens", chunk,  "staging",  "16M",
                      "rings", "2",           "threads",  "4",
                      "queue_depth", "32",    NULL};
  int own_pool = 0; /* `extra` names the pool(s) itself */
  for (size_t i = 0; extra && extra[i]; i += 2) own_pool |= strcmp(extra[i], "pool") == 0;
  for (size_t i = own_pool ? 2 : 0; kv[i]; i += 2)
    if ((rc = tutti_options_set(o, kv[i], kv[i + 1])) != 0) goto fail;
  for (size_t i = 0; extra && extra[i]; i += 2)
    if ((rc = tutti_options_set(o, extra[i], extra[i + 1])) != 0) goto fail;
  *out = o;
  return 0;
fail:
  tutti_options_destroy(o);
  return rc;
}

int th_open(tutti_runtime** out, const char* dir, const char* capacity, unsigned chunk_tokens,
            const char* const* extra, const th_kv* kv) {
  tutti_options* o = NULL;
  *out = NULL;
  int rc = th_options(&o, dir, capacity, chunk_tokens, extra);
  if (rc) return rc;
  rc = tf_open(out, o, &kv->layout);
  tutti_options_destroy(o);
  return rc;
}

static _Thread_local char batch_error[1024];

const char* th_batch_error(void) { return batch_error; }

int th_batch_run(tutti_runtime* rt, tutti_op op, const tutti_request* reqs, size_t n,
                 tutti_result* results, int wait_layers, uint32_t num_layers) {
  tutti_batch* b = NULL;
  batch_error[0] = '\0';
  int rc = tutti_batch_create(rt, op, &b);
  if (rc) {
    snprintf(batch_error, sizeof batch_error, "%s", tutti_last_error());
    return rc;
  }
  if ((rc = tutti_batch_add(b, reqs, n)) != 0) goto out;
  if ((rc = tutti_batch_submit(b)) != 0) goto out;
  if (wait_layers)
    for (uint32_t l = 0; l < num_layers; l++)
      if ((rc = tutti_batch_wait_layer(b, l)) != 0) goto out;
  rc = tutti_batch_wait(b);
  if (rc) snprintf(batch_error, sizeof batch_error, "%s", tutti_last_error());
  for (size_t i = 0; results && i < n; i++) {
    int r2 = tutti_batch_result(b, i, &results[i]);
    if (r2 != 0 && rc == 0) rc = r2;
  }
out:
  if (rc && !batch_error[0]) snprintf(batch_error, sizeof batch_error, "%s", tutti_last_error());
  tutti_batch_destroy(b);
  return rc;
}

void th_store_prompt(tutti_runtime* rt, th_kv* kv, const th_prompt* p, const int32_t* table,
                     size_t ntable) {
  tutti_result res;
  th_kv_fill(kv, p, table, 0, p->n);
  tutti_request r = th_request(p, table, ntable, 0, TUTTI_TOKENS_ALL);
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 0, 0));
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks_ok, res.chunks);
}

void th_store_random_prompts(tutti_runtime* rt, th_kv* kv, th_blocks* alloc, uint64_t* rng, uint64_t count,
                             size_t tokens) {
  for (uint64_t i = 0; i < count; i++) {
    th_prompt p;
    th_prompt_random(&p, rng, tokens);
    int32_t table[64];
    const size_t nb = th_nblocks(p.n, kv->spec.block_tokens);
    th_blocks_reset(alloc, rng);
    th_blocks_take(alloc, table, nb);
    th_kv_fill(kv, &p, table, 0, p.n);
    tutti_request r = th_request(&p, table, nb, 0, TUTTI_TOKENS_ALL);
    (void)th_batch_run(rt, TUTTI_OP_STORE, &r, 1, NULL, 0, kv->spec.num_layers);
    th_prompt_free(&p);
  }
}

size_t th_lookup(tutti_runtime* rt, const th_prompt* p) {
  size_t cached = (size_t)-1;
  TH_OK(tutti_lookup(rt, p->tokens, p->n, p->salt_len ? p->salt : NULL, p->salt_len, &cached));
  if (cached > p->n) fail_msg("lookup says %zu of %zu tokens are cached", cached, p->n);
  return cached;
}

void th_load_and_check(tutti_runtime* rt, th_kv* kv, const th_prompt* p, const int32_t* table,
                       size_t ntable, size_t tokens) {
  tutti_result res;
  th_kv_poison_blocks(kv, table, ntable);
  th_kv_expect(kv, p, table, 0, tokens);
  tutti_request r = th_request(p, table, ntable, 0, tokens);
  TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0));
  TH_EQ(res.status, 0);
  TH_EQ(res.tokens, tokens);
  TH_EQ(res.chunks_ok, res.chunks);
  TH_CHECK(kv, p, table, 0, tokens);
  TH_VERIFY_ALL(kv);
}

int th_require_pool(void) {
  char dir[4096];
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  th_kv_spec spec = th_spec_default();
  th_base_seed();
  if (th_mkdtemp(dir, sizeof dir) != 0) return 0;
  int rc = th_kv_create(&kv, &spec);
  if (rc == 0) rc = th_open(&rt, dir, "8M", 32, NULL, kv);
  if (rc == TUTTI_EUNSUPPORTED)
    fprintf(stderr, "# SKIP: no pool can be created under %s: %s\n", dir, tutti_last_error());
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  th_rmtree(dir);
  return rc == TUTTI_EUNSUPPORTED ? TH_SKIP : 0;
}

tutti_stats th_stats(const tutti_runtime* rt) {
  tutti_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  TH_OK(tutti_runtime_stats(rt, &s));
  return s;
}
