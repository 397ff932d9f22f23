// SPDX-License-Identifier: Apache-2.0
/* badinput: NULLs, bad structs, ranges, options, paths and order give exact codes, never harm. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#define CT 32u

/* A runtime with one stored prompt that must keep loading after every bad call. */
typedef struct bi_ctx {
  th_env* env;
  th_kv* kv;
  tutti_runtime* rt;
  th_prompt p;
  int32_t st[16], ld[16];
  int32_t ex[16], ex2[16]; /* two more tables of 9 blocks */
  size_t nb;
  uint64_t rng;
} bi_ctx;

static void ctx_open(bi_ctx* c, th_env* env, uint64_t salt, int do_register) {
  memset(c, 0, sizeof *c);
  c->env = env;
  c->rng = th_base_seed() ^ salt;
  th_kv_spec spec = th_spec_default();
  spec.num_blocks = 40;
  TH_OK(th_kv_create(&c->kv, &spec));
  th_prompt_random(&c->p, &c->rng, 3 * CT + 9);
  c->nb = th_nblocks(c->p.n, spec.block_tokens);
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &c->rng);
  th_blocks_take(&alloc, c->st, c->nb);
  th_blocks_take(&alloc, c->ld, c->nb);
  th_blocks_take(&alloc, c->ex, 9);
  th_blocks_take(&alloc, c->ex2, 9);
  th_blocks_free(&alloc);
  tutti_options* o = NULL;
  TH_OK(th_options(&o, env->dir, "64M", CT, NULL));
  TH_OK(tutti_runtime_open(o, &c->rt));
  tutti_options_destroy(o);
  if (do_register) {
    TH_OK(tutti_runtime_register_kv(c->rt, &c->kv->layout));
    th_store_prompt(c->rt, c->kv, &c->p, c->st, c->nb);
  }
}

static void ctx_close(bi_ctx* c) {
  tutti_runtime_close(c->rt);
  th_kv_destroy(c->kv);
  th_prompt_free(&c->p);
}

/* The stored prompt still hits and loads byte-identical. */
static void still_loads(bi_ctx* c) {
  TH_EQ(th_lookup(c->rt, &c->p), 3 * CT);
  th_load_and_check(c->rt, c->kv, &c->p, c->ld, c->nb, 3 * CT);
}

/* ---- library-wide ------------------------------------------------------------------- */

static void test_version_strerror(void** state) {
  (void)state;
  TH_EQ(tutti_version_number(), TUTTI_VERSION_NUMBER);
  assert_non_null(tutti_version_string());
  assert_true(tutti_version_string()[0] != '\0');
  for (int code = 0; code >= TUTTI_EBUSY; code--) {
    const char* s = tutti_strerror(code);
    assert_non_null(s);
    assert_true(s[0] != '\0');
    for (int other = 0; other > code; other--)
      if (strcmp(s, tutti_strerror(other)) == 0)
        fail_msg("codes %d and %d share the name \"%s\"", code, other, s);
  }
  assert_non_null(tutti_strerror(-1000));
  assert_non_null(tutti_strerror(7));
  assert_non_null(tutti_last_error());
}

static void test_options(void** state) {
  (void)state;
  tutti_options* o = NULL;
  TH_ERR(TUTTI_EINVAL, tutti_options_create(NULL));
  TH_OK(tutti_options_create(&o));
  assert_non_null(o);
  TH_ERR(TUTTI_EINVAL, tutti_options_set(NULL, "pool", "/tmp/x"));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, NULL, "1"));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "pool", NULL));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "no_such_key", "1"));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "", "1"));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "Capacity", "64M"));
  static const char* bad[][2] = {
      {"capacity", "12Q"},         {"capacity", ""},           {"capacity", "M"},
      {"capacity", "-1"},          {"capacity", "abc"},        {"capacity", "64MM"},
      {"chunk_tokens", "abc"},     {"chunk_tokens", "0"},      {"chunk_tokens", "-32"},
      {"chunk_tokens", "12x"},     {"backend", "foo"},         {"backend", ""},
      {"io_mode", "fast"},         {"direct_to_blocks", "maybe"}, {"verify", "2"}, {"verify", "0"},
      {"verify", "yes please"},    {"staging", "lots"},        {"lookahead", "x"},
      {"rings", "x"},              {"queue_depth", "x"},       {"threads", "x"},
      {"create", "2"},             {"sqpoll_shared", "yes"},   {"sqpoll_idle_ms", "0"},
      {"gpu_uring_completions", "host"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = tutti_options_set(o, bad[i][0], bad[i][1]);
    if (rc != TUTTI_EINVAL)
      fail_msg("options_set(%s, \"%s\") -> %d, expected TUTTI_EINVAL", bad[i][0], bad[i][1], rc);
    if (!tutti_last_error()[0])
      fail_msg("options_set(%s, \"%s\"): no message", bad[i][0], bad[i][1]);
  }
  static const char* good[][2] = {
      {"capacity", "64M"},     {"capacity", "1G"},          {"capacity", "1048576"},
      {"capacity", "2T"},      {"capacity", "512K"},        {"chunk_tokens", "64"},
      {"backend", "auto"},     {"backend", "uring"},        {"backend", "posix"},
      {"backend", "gpu-uring"}, {"backend", "cufile"},      {"backend", "dram"},
      {"backend", "passthru"},
      {"namespace", "m-1"},    {"namespace", ""},           {"io_mode", "object"},
      {"io_mode", "per-block-baseline"}, {"direct_to_blocks", "auto"},
      {"direct_to_blocks", "on"}, {"direct_to_blocks", "off"}, {"verify", "unsafe-off"},
      {"verify", "1"},         {"staging", "16M"},          {"lookahead", "2"},
      {"rings", "1"},          {"queue_depth", "16"},       {"threads", "2"},
      {"create", "0"},         {"create", "1"},             {"sqpoll_shared", "1"},
      {"sqpoll_idle_ms", "2"},    {"gpu_uring_completions", "cpu"},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int rc = tutti_options_set(o, good[i][0], good[i][1]);
    if (rc != 0)
      fail_msg("options_set(%s, \"%s\") -> %d: %s", good[i][0], good[i][1], rc,
               tutti_last_error());
  }
  tutti_options_destroy(o);
  tutti_options_destroy(NULL);

  TH_OK(tutti_options_create(&o));
  TH_ERR(TUTTI_EINVAL, tutti_runtime_open(o, NULL));
  tutti_options_destroy(o);
  tutti_runtime_close(NULL);
  (void)tutti_runtime_backend(NULL); /* any answer, but no crash */
}

/* Options are a handle like any other: NULL is TUTTI_EINVAL (tutti.h convention 3). */
/* gpu-uring and cufile load into CUDA memory: with host memory, or without a GPU, they are
 * refused with a reason that names them, never half set up. */
static void test_gpu_backends_need_cuda_memory(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  static const char* names[] = {"gpu-uring", "cufile"};
  for (size_t i = 0; i < 2; i++) {
    const char* extra[] = {"backend", names[i], NULL};
    tutti_runtime* rt = NULL;
    TH_EQ(th_open(&rt, env->dir, "64M", 32, extra, kv), TUTTI_EUNSUPPORTED);
    if (!strstr(tutti_last_error(), names[i]))
      fail_msg("%s: the reason does not name the backend: %s", names[i], tutti_last_error());
    tutti_runtime_close(rt);
  }
  th_kv_destroy(kv);
}

/* passthru needs a pool on an NVMe namespace: elsewhere it is refused with the reason. */
static void test_passthru_needs_nvme(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  const char* extra[] = {"backend", "passthru", NULL};
  tutti_runtime* rt = NULL;
  int rc = th_open(&rt, env->dir, "64M", 32, extra, kv);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  if (rc == 0) {
    print_message("%s is on an NVMe namespace here: nothing to refuse\n", env->dir);
    skip();
  }
  TH_EQ(rc, TUTTI_EUNSUPPORTED);
  if (!strstr(tutti_last_error(), "NVMe") && !strstr(tutti_last_error(), "block device"))
    fail_msg("the reason does not say why: %s", tutti_last_error());
}

static void test_open_null_options(void** state) {
  (void)state;
  tutti_runtime* rt = NULL;
  int rc = tutti_runtime_open(NULL, &rt);
  if (rc == 0) tutti_runtime_close(rt); /* don't leak it when the check fails */
  TH_EQ(rc, TUTTI_EINVAL);
  assert_null(rt);
}

/* A bad ?size= in a pool URI fails at set or at open. */
static void test_bad_uri_size(void** state) {
  th_env* env = *state;
  char uri[4300];
  snprintf(uri, sizeof uri, "file://%s/pool.tutti?size=12Q", env->dir);
  tutti_options* o = NULL;
  tutti_runtime* rt = NULL;
  TH_OK(tutti_options_create(&o));
  int rc = tutti_options_set(o, "pool", uri);
  if (rc == 0) {
    rc = tutti_runtime_open(o, &rt);
    if (rc == 0) tutti_runtime_close(rt);
  }
  if (rc != TUTTI_EINVAL) fail_msg("pool %s -> %d, expected TUTTI_EINVAL", uri, rc);
  assert_true(tutti_last_error()[0] != '\0');
  tutti_options_destroy(o);
}

/* ---- registration ------------------------------------------------------------------- */

static void test_register(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA1, 0);
  size_t cached = 0;
  tutti_batch* b = NULL;
  TH_ERR(TUTTI_ESTATE, tutti_lookup(c.rt, c.p.tokens, c.p.n, NULL, 0, &cached));
  TH_ERR(TUTTI_ESTATE, tutti_batch_create(c.rt, TUTTI_OP_LOAD, &b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_create(c.rt, TUTTI_OP_STORE, &b));

  TH_ERR(TUTTI_EINVAL, tutti_runtime_register_kv(NULL, &c.kv->layout));
  TH_ERR(TUTTI_EINVAL, tutti_runtime_register_kv(c.rt, NULL));
  const tutti_kv_layout good = c.kv->layout;
  tutti_kv_layout L;
  void* no_layer1[2] = {c.kv->k[0], NULL};
#define BAD_LAYOUT(field_assignment)                                                     \
  do {                                                                                   \
    L = good;                                                                            \
    field_assignment;                                                                    \
    int rc_ = tutti_runtime_register_kv(c.rt, &L);                                       \
    if (rc_ != TUTTI_EINVAL)                                                             \
      fail_msg("register_kv with %s -> %d (%s), expected TUTTI_EINVAL", #field_assignment, \
               rc_, tutti_strerror(rc_));                                                \
    if (!tutti_last_error()[0]) fail_msg("register_kv with %s: no message", #field_assignment); \
  } while (0)
  BAD_LAYOUT(L.struct_size = 0);
  BAD_LAYOUT(L.struct_size = 4);
  BAD_LAYOUT(L.struct_size = sizeof L / 2);
  BAD_LAYOUT(L.num_layers = 0);
  BAD_LAYOUT(L.num_blocks = 0);
  BAD_LAYOUT(L.block_tokens = 0);
  BAD_LAYOUT(L.num_kv_heads = 0);
  BAD_LAYOUT(L.head_dim = 0);
  BAD_LAYOUT(L.elem_bytes = 0);
  BAD_LAYOUT(L.memory = 5);
  BAD_LAYOUT(L.k_base = NULL);
  BAD_LAYOUT(L.k_base = no_layer1);
#undef BAD_LAYOUT

  /* none of that consumed the one registration */
  TH_OK(tutti_runtime_register_kv(c.rt, &good));
  TH_ERR(TUTTI_ESTATE, tutti_runtime_register_kv(c.rt, &good));
  assert_non_null(tutti_runtime_backend(c.rt));
  th_store_prompt(c.rt, c.kv, &c.p, c.st, c.nb);
  still_loads(&c);

  tutti_kv_layout tmp;
  TH_ERR(TUTTI_EINVAL, tutti_kv_layout_init(NULL, 2, 8, 16, 2, 64, 2, 0));
  TH_ERR(TUTTI_EINVAL, tutti_kv_layout_init(&tmp, 2, 8, 16, 2, 64, 2, 2));
  still_loads(&c);
  ctx_close(&c);
}

/* chunk_tokens that is not a multiple of the block size (24 over blocks of 16): chunks start
 * inside blocks, and round-trip. */
static void test_chunk_not_multiple(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xA7;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_options* o = NULL;
  tutti_runtime* rt = NULL;
  TH_OK(th_options(&o, env->dir, "64M", 24, NULL));
  TH_OK(tutti_runtime_open(o, &rt));
  tutti_options_destroy(o);
  TH_OK(tutti_runtime_register_kv(rt, &kv->layout));
  th_prompt p;
  th_prompt_random(&p, &rng, 5 * 24 + 7);
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  int32_t st[64], ld[64];
  size_t nb = th_nblocks(p.n, spec.block_tokens);
  th_blocks_take(&alloc, st, nb);
  th_blocks_take(&alloc, ld, nb);
  th_kv_fill(kv, &p, st, 0, p.n);
  th_store_prompt(rt, kv, &p, st, nb);
  TH_EQ(th_lookup(rt, &p), 5 * 24);
  th_load_and_check(rt, kv, &p, ld, nb, 5 * 24);
  th_blocks_free(&alloc);
  th_prompt_free(&p);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

/* direct_to_blocks=on with a layout that cannot be read into directly is refused. */
static void test_direct_on_unaligned(void** state) {
  th_env* env = *state;
  static const char* on[] = {"direct_to_blocks", "on", NULL};
  th_kv_spec specs[3];
  specs[0] = th_spec_default();
  specs[0].misalign = 64; /* blocks not 4 KiB aligned */
  specs[1] = th_spec_default();
  specs[1].block_tokens = 8; /* 2 KiB blocks */
  specs[2] = th_spec_default();
  specs[2].block_pad = 64;
  for (int i = 0; i < 3; i++) {
    th_kv* kv = NULL;
    tutti_options* o = NULL;
    tutti_runtime* rt = NULL;
    TH_OK(th_kv_create(&kv, &specs[i]));
    TH_OK(th_options(&o, env->dir, "64M", CT, on));
    TH_OK(tutti_runtime_open(o, &rt));
    tutti_options_destroy(o);
    TH_ERR(TUTTI_EINVAL, tutti_runtime_register_kv(rt, &kv->layout));
    tutti_runtime_close(rt);
    th_kv_destroy(kv);
  }
}

/* ---- lookup and stats --------------------------------------------------------------- */

static void test_lookup_stats(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA2, 1);
  size_t cached = 77;
  TH_ERR(TUTTI_EINVAL, tutti_lookup(NULL, c.p.tokens, c.p.n, NULL, 0, &cached));
  TH_ERR(TUTTI_EINVAL, tutti_lookup(c.rt, NULL, c.p.n, NULL, 0, &cached));
  TH_ERR(TUTTI_EINVAL, tutti_lookup(c.rt, c.p.tokens, c.p.n, NULL, 4, &cached));
  TH_ERR(TUTTI_EINVAL, tutti_lookup(c.rt, c.p.tokens, c.p.n, NULL, 0, NULL));
  TH_OK(tutti_lookup(c.rt, c.p.tokens, 0, NULL, 0, &cached));
  TH_EQ(cached, 0);
  still_loads(&c);

  tutti_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  TH_ERR(TUTTI_EINVAL, tutti_runtime_stats(NULL, &s));
  TH_ERR(TUTTI_EINVAL, tutti_runtime_stats(c.rt, NULL));
  s.struct_size = 0;
  TH_ERR(TUTTI_EINVAL, tutti_runtime_stats(c.rt, &s));
  s.struct_size = 3;
  TH_ERR(TUTTI_EINVAL, tutti_runtime_stats(c.rt, &s));
  uint64_t ns[4];
  size_t n = 0;
  TH_ERR(TUTTI_EINVAL, tutti_runtime_layer_wait_ns(NULL, ns, 4, &n));
  TH_ERR(TUTTI_EINVAL, tutti_runtime_layer_wait_ns(c.rt, NULL, 4, &n));
  TH_ERR(TUTTI_EINVAL, tutti_runtime_layer_wait_ns(c.rt, ns, 4, NULL));
  TH_OK(tutti_runtime_layer_wait_ns(c.rt, ns, 4, &n));
  TH_EQ(n, c.kv->spec.num_layers);
  still_loads(&c);
  ctx_close(&c);
}

/* ---- batches ------------------------------------------------------------------------ */

/* tutti_batch_add of one request on a fresh batch must fail with `code`. */
static void add_fails(bi_ctx* c, tutti_op op, const tutti_request* r, size_t n, int code,
                      const char* what) {
  tutti_batch* b = NULL;
  TH_OK(tutti_batch_create(c->rt, op, &b));
  int rc = tutti_batch_add(b, r, n);
  if (rc != code)
    fail_msg("%s: batch_add(%s) -> %d (%s), expected %d", what,
             op == TUTTI_OP_LOAD ? "load" : "store", rc, tutti_strerror(rc), code);
  if (!tutti_last_error()[0]) fail_msg("%s: no message", what);
  tutti_batch_destroy(b);
}

static void test_bad_requests(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA3, 1);
  tutti_batch* b = NULL;
  tutti_request good = th_request(&c.p, c.ld, c.nb, 0, TUTTI_TOKENS_ALL);
  tutti_request r;
  int32_t tab[16];

  TH_ERR(TUTTI_EINVAL, tutti_batch_create(NULL, TUTTI_OP_LOAD, &b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_create(c.rt, (tutti_op)7, &b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_create(c.rt, (tutti_op)-1, &b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_create(c.rt, TUTTI_OP_MIN_ENUM_, &b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_create(c.rt, TUTTI_OP_LOAD, NULL));
  TH_OK(tutti_batch_create(c.rt, TUTTI_OP_LOAD, &b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_add(NULL, &good, 1));
  TH_ERR(TUTTI_EINVAL, tutti_batch_add(b, NULL, 1));
  tutti_batch_destroy(b);

  for (int op = TUTTI_OP_LOAD; op <= TUTTI_OP_STORE; op++) {
    const int32_t* t0 = op == TUTTI_OP_LOAD ? c.ld : c.st;
    memcpy(tab, t0, c.nb * sizeof *tab);
    r = good;
    r.block_table = tab;
    r.tokens = NULL;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "tokens NULL");
    r = good;
    r.block_table = NULL;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "block_table NULL");
    r = good;
    r.block_table = tab;
    tab[1] = -1;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "block id -1");
    tab[1] = (int32_t)c.kv->spec.num_blocks;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "block id num_blocks");
    tab[1] = INT32_MAX;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "block id INT32_MAX");
    memcpy(tab, t0, c.nb * sizeof *tab);
    r.num_block_ids = 3 * CT / c.kv->spec.block_tokens - 1; /* one block short of 3 chunks */
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "block table too short");
    r = good;
    r.block_table = tab;
    r.token_begin = 2 * CT;
    r.token_end = CT;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "token_begin > token_end");
    r.token_begin = 0;
    r.token_end = c.p.n + 1;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "token_end > num_tokens");
    r.token_begin = 4 * CT;
    r.token_end = TUTTI_TOKENS_ALL;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "token_begin > num_tokens");
    r.token_begin = 0;
    r.token_end = TUTTI_TOKENS_ALL - 1;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "token_end SIZE_MAX - 1");
    r = good;
    r.block_table = tab;
    r.salt = NULL;
    r.salt_len = 4;
    add_fails(&c, op, &r, 1, TUTTI_EINVAL, "salt NULL with salt_len 4");
    tutti_request two[2] = {good, good};
    two[1].block_table = tab;
    tab[0] = -7;
    add_fails(&c, op, two, 2, TUTTI_EINVAL, "second of two requests bad");
  }
  still_loads(&c);
  ctx_close(&c);
}

/* token_end 0 is an empty range, not the whole prompt: the engine's `token_end = hit` after a
 * lookup that missed moves nothing. */
static void test_empty_range(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA6, 1);
  th_load_and_check(c.rt, c.kv, &c.p, c.ld, c.nb, 0); /* poisons, loads [0, 0), all bytes unchanged */

  tutti_request r = th_request(&c.p, c.ld, c.nb, CT, CT);
  tutti_result res;
  TH_OK(th_batch_run(c.rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0));
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks, 0);
  TH_EQ(res.tokens, 0);
  TH_VERIFY_ALL(c.kv);

  th_prompt other;
  th_prompt_random(&other, &c.rng, 2 * CT);
  r = th_request(&other, c.ex, th_nblocks(other.n, c.kv->spec.block_tokens), 0, 0);
  TH_OK(th_batch_run(c.rt, TUTTI_OP_STORE, &r, 1, &res, 0, 0));
  TH_EQ(res.chunks, 0);
  TH_EQ(th_lookup(c.rt, &other), 0); /* nothing was stored */
  th_prompt_free(&other);
  still_loads(&c);
  ctx_close(&c);
}

static void test_batch_order(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA4, 1);
  tutti_batch* b = NULL;
  tutti_result res;
  int st[8];
  size_t n = 0;
  const uint32_t layers = c.kv->spec.num_layers;
  tutti_request r = th_request(&c.p, c.ld, c.nb, 0, TUTTI_TOKENS_ALL);

  TH_ERR(TUTTI_EINVAL, tutti_batch_submit(NULL));
  TH_ERR(TUTTI_EINVAL, tutti_batch_wait(NULL));
  TH_ERR(TUTTI_EINVAL, tutti_batch_wait_layer(NULL, 0));
  TH_ERR(TUTTI_EINVAL, tutti_batch_result(NULL, 0, &res));
  TH_ERR(TUTTI_EINVAL, tutti_batch_chunk_status(NULL, 0, st, 8, &n));
  tutti_batch_destroy(NULL);

  th_kv_poison_blocks(c.kv, c.ld, c.nb);
  TH_OK(tutti_batch_create(c.rt, TUTTI_OP_LOAD, &b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait_layer(b, 0));
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait(b));
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait_layer(b, 0));
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait(b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_result(b, 0, &res));
  TH_ERR(TUTTI_ESTATE, tutti_batch_chunk_status(b, 0, st, 8, &n));
  TH_OK(tutti_batch_submit(b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_submit(b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_add(b, &r, 1));
  TH_ERR(TUTTI_EINVAL, tutti_batch_wait_layer(b, layers));
  TH_ERR(TUTTI_EINVAL, tutti_batch_wait_layer(b, UINT32_MAX));
  TH_OK(tutti_batch_wait_layer(b, 0));
  TH_OK(tutti_batch_wait(b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_submit(b));
  TH_ERR(TUTTI_ESTATE, tutti_batch_add(b, &r, 1));
  TH_ERR(TUTTI_EINVAL, tutti_batch_wait_layer(b, layers));
  TH_ERR(TUTTI_EINVAL, tutti_batch_result(b, 1, &res));
  TH_ERR(TUTTI_EINVAL, tutti_batch_result(b, 0, NULL));
  TH_ERR(TUTTI_EINVAL, tutti_batch_chunk_status(b, 1, st, 8, &n));
  TH_ERR(TUTTI_EINVAL, tutti_batch_chunk_status(b, 0, NULL, 8, &n));
  TH_ERR(TUTTI_EINVAL, tutti_batch_chunk_status(b, 0, st, 8, NULL));
  TH_OK(tutti_batch_result(b, 0, &res));
  TH_EQ(res.status, 0);
  TH_EQ(res.tokens, 3 * CT);
  TH_OK(tutti_batch_chunk_status(b, 0, st, 2, &n));
  TH_EQ(n, 2); /* min(cap, chunks) */
  tutti_batch_destroy(b);
  th_kv_expect(c.kv, &c.p, c.ld, 0, 3 * CT);
  TH_CHECK(c.kv, &c.p, c.ld, 0, 3 * CT);
  TH_VERIFY_ALL(c.kv);

  /* a store batch destroyed right after submit: destroy waits; whatever it committed is
   * whole */
  th_prompt q;
  th_prompt_extend(&q, &c.p, CT + 3, &c.rng, 4 * CT);
  th_kv_fill(c.kv, &q, c.ex, 0, q.n);
  tutti_request rq = th_request(&q, c.ex, th_nblocks(q.n, 16), 0, TUTTI_TOKENS_ALL);
  TH_OK(tutti_batch_create(c.rt, TUTTI_OP_STORE, &b));
  TH_OK(tutti_batch_add(b, &rq, 1));
  TH_OK(tutti_batch_submit(b));
  tutti_batch_destroy(b);
  size_t hit = th_lookup(c.rt, &q);
  assert_true(hit >= CT); /* chunk 0 is c.p's */
  if (hit != 4 * CT) print_message("  destroy after submit: %zu of %u tokens hit\n", hit, 4 * CT);
  th_load_and_check(c.rt, c.kv, &q, c.ex2, th_nblocks(q.n, 16), hit);
  th_prompt_free(&q);

  /* an empty batch never breaks anything */
  TH_OK(tutti_batch_create(c.rt, TUTTI_OP_LOAD, &b));
  int rc = tutti_batch_submit(b);
  if (rc == 0) TH_OK(tutti_batch_wait(b));
  else if (rc != TUTTI_ESTATE && rc != TUTTI_EINVAL)
    fail_msg("submit of an empty batch -> %d (%s)", rc, tutti_strerror(rc));
  tutti_batch_destroy(b);
  still_loads(&c);
  ctx_close(&c);
}

/* ---- pool paths and capacity -------------------------------------------------------- */

/* Opens and registers a runtime on `pool`; returns the first error, with a message. */
static int open_pool(const th_kv* kv, const char* pool, const char* capacity, const char* create,
                     tutti_runtime** out) {
  tutti_options* o = NULL;
  tutti_runtime* rt = NULL;
  *out = NULL;
  const char* extra[] = {"pool", pool, "create", create, NULL};
  TH_OK(th_options(&o, "/unused", capacity, CT, extra));
  int rc = tutti_runtime_open(o, &rt);
  tutti_options_destroy(o);
  if (rc) return rc;
  rc = tutti_runtime_register_kv(rt, &kv->layout);
  if (rc) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", tutti_last_error());
    tutti_runtime_close(rt);
    if (!msg[0]) fail_msg("register_kv(%s) -> %d without a message", pool, rc);
    return rc;
  }
  *out = rt;
  return 0;
}

static void expect_path_error(bi_ctx* c, const char* pool, const char* create) {
  tutti_runtime* rt = NULL;
  int rc = open_pool(c->kv, pool, "64M", create, &rt);
  if (rc == 0) {
    tutti_runtime_close(rt);
    fail_msg("pool %s (create=%s) opened; expected TUTTI_EACCES", pool, create);
  }
  if (rc != TUTTI_EACCES && rc != TUTTI_EIO)
    fail_msg("pool %s (create=%s) -> %d (%s), expected TUTTI_EACCES", pool, create, rc,
             tutti_strerror(rc));
  print_message("  %s: %s\n", pool, tutti_strerror(rc));
}

static void test_paths(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA5, 1);
  char path[2048], file[1200], inner[2400];

  snprintf(path, sizeof path, "%s/no/such/dir/pool.tutti", c.env->dir);
  expect_path_error(&c, path, "1");
  snprintf(file, sizeof file, "%s/a-file", c.env->dir);
  FILE* f = fopen(file, "w");
  assert_non_null(f);
  fputs("not a directory\n", f);
  fclose(f);
  snprintf(inner, sizeof inner, "%s/pool.tutti", file);
  expect_path_error(&c, inner, "1");
  snprintf(path, sizeof path, "%s/missing.tutti", c.env->dir);
  expect_path_error(&c, path, "0");
  struct stat sb;
  assert_true(stat(path, &sb) != 0); /* create=0 created nothing */
  if (geteuid() != 0) { /* root writes anywhere: only a non-root run can try this one */
    snprintf(file, sizeof file, "%s/read-only", c.env->dir);
    assert_int_equal(mkdir(file, 0500), 0);
    snprintf(inner, sizeof inner, "%s/pool.tutti", file);
    expect_path_error(&c, inner, "1");
    chmod(file, 0700);
  }
  still_loads(&c);

  /* a file that is not a pool is refused, not overwritten */
  snprintf(path, sizeof path, "%s/garbage.pool", c.env->dir);
  f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 0; i < 1 << 20; i++) fputc((int)(th_rand(&c.rng) & 0xff), f);
  fclose(f);
  tutti_runtime* rt = NULL;
  int rc = open_pool(c.kv, path, "64M", "1", &rt);
  if (rc == 0) {
    tutti_runtime_close(rt);
    fail_msg("a 1 MiB file of random bytes was accepted as a pool");
  }
  assert_true(rc != TUTTI_EINTERNAL);
  print_message("  garbage pool: %s: %s\n", tutti_strerror(rc), tutti_last_error());

  /* a directory means <dir>/tutti.pool */
  snprintf(path, sizeof path, "%s/pooldir", c.env->dir);
  assert_int_equal(mkdir(path, 0700), 0);
  TH_OK(open_pool(c.kv, path, "64M", "1", &rt));
  tutti_runtime_close(rt);
  snprintf(inner, sizeof inner, "%s/tutti.pool", path);
  assert_int_equal(stat(inner, &sb), 0);
  still_loads(&c);
  ctx_close(&c);
}

/* A pool too small for one chunk: refused at register or ENOSPC on store; another runtime's
 * data is unaffected. */
static void test_tiny_pool(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA6, 1);
  char path[4300];
  snprintf(path, sizeof path, "%s/tiny.pool", c.env->dir);
  /* one chunk: 32 tokens x 2 heads x 128 bytes x K,V x 2 layers = 32 KiB */
  tutti_runtime* rt = NULL;
  int rc = open_pool(c.kv, path, "16K", "1", &rt);
  if (rc != 0) {
    if (rc != TUTTI_ENOSPC && rc != TUTTI_EINVAL)
      fail_msg("tiny pool -> %d (%s), expected TUTTI_ENOSPC or TUTTI_EINVAL", rc,
               tutti_strerror(rc));
    print_message("  tiny pool refused at register: %s\n", tutti_last_error());
  } else {
    tutti_result res;
    memset(&res, 0, sizeof res);
    int32_t tab[16];
    memcpy(tab, c.st, sizeof tab);
    th_kv_fill(c.kv, &c.p, tab, 0, c.p.n);
    tutti_request r = th_request(&c.p, tab, c.nb, 0, TUTTI_TOKENS_ALL);
    TH_EQ(th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 0, 0), TUTTI_ENOSPC);
    assert_true(th_batch_error()[0] != '\0');
    TH_EQ(res.status, TUTTI_ENOSPC);
    TH_EQ(res.chunks_ok, 0);
    TH_EQ(th_lookup(rt, &c.p), 0);
    tutti_runtime_close(rt);
  }
  still_loads(&c);
  ctx_close(&c);
}

/* A disk too full for the pool: RLIMIT_FSIZE makes the pre-allocation fail as a full disk
 * would. The pool is refused with TUTTI_ENOSPC, the file it created is gone again, and the
 * pool that was already there still loads. (Stores never meet a full disk: pools are pre-allocated.) */
static void test_full_disk(void** state) {
  bi_ctx c;
  ctx_open(&c, *state, 0xA7, 1);
  char path[4300];
  snprintf(path, sizeof path, "%s/full.pool", c.env->dir);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 1 << 20; /* this "disk" holds 1 MiB */
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  tutti_runtime* rt = NULL;
  int rc = open_pool(c.kv, path, "64M", "1", &rt);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, prev);
  if (rc == 0) tutti_runtime_close(rt);
  TH_EQ(rc, TUTTI_ENOSPC);
  struct stat sb;
  assert_int_equal(stat(path, &sb), -1);
  TH_EQ(errno, ENOENT);
  still_loads(&c);
  ctx_close(&c);
}

/* Another process truncating a dram pool file under tutti's mapping: loads and stores fail with
 * TUTTI_EIO, and the process lives on (the touch raised SIGBUS). */
static void test_dram_truncated(void** state) {
  (void)state;
  char shm[64];
  th_shm_dir(shm, sizeof shm);
  uint64_t rng = th_base_seed() ^ 0xA8;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_prompt p, q;
  th_prompt_random(&p, &rng, 3 * CT);
  th_prompt_random(&q, &rng, 2 * CT);
  int32_t st[16], ld[16], sq[16];
  size_t nb = th_nblocks(p.n, spec.block_tokens), nq = th_nblocks(q.n, spec.block_tokens);
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_blocks_take(&alloc, st, nb);
  th_blocks_take(&alloc, ld, nb);
  th_blocks_take(&alloc, sq, nq);
  th_blocks_free(&alloc);
  const char* extra[] = {"backend", "dram", NULL};
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, shm, "16M", CT, extra, kv));
  th_store_prompt(rt, kv, &p, st, nb);
  TH_EQ(th_lookup(rt, &p), 3 * CT);

  char pool[128];
  snprintf(pool, sizeof pool, "%s/pool.tutti", shm);
  pid_t pid = fork();
  if (pid == 0) _exit(truncate(pool, 4096) == 0 ? 0 : 1);
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

  tutti_result res;
  tutti_request r = th_request(&p, ld, nb, 0, TUTTI_TOKENS_ALL);
  TH_EQ(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0), TUTTI_EIO);
  print_message("load: %s\n", th_batch_error());
  assert_non_null(strstr(th_batch_error(), pool));
  TH_EQ(res.status, TUTTI_EIO);
  TH_EQ(res.chunks_ok, 0);
  th_kv_fill(kv, &q, sq, 0, q.n);
  r = th_request(&q, sq, nq, 0, TUTTI_TOKENS_ALL);
  TH_EQ(th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 0, 0), TUTTI_EIO);
  print_message("store: %s\n", th_batch_error());
  TH_EQ(res.chunks_ok, 0);
  tutti_runtime_close(rt);

  th_kv_destroy(kv);
  th_prompt_free(&p);
  th_prompt_free(&q);
  th_rmtree(shm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_strerror),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_open_null_options),
      cmocka_unit_test_setup_teardown(test_gpu_backends_need_cuda_memory, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_passthru_needs_nvme, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_bad_uri_size, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_register, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_chunk_not_multiple, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_direct_on_unaligned, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_lookup_stats, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_bad_requests, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_empty_range, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_batch_order, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_paths, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_tiny_pool, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_full_disk, th_setup_dir, th_teardown_dir),
      cmocka_unit_test(test_dram_truncated),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("badinput", tests, NULL, NULL);
}
