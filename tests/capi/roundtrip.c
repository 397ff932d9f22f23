// SPDX-License-Identifier: Apache-2.0
/* roundtrip: store then load over random KV layouts, backends, io modes and direct/staged I/O.
 * The dram cases keep their pool under /dev/shm. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "helpers.h"

typedef struct rt_case {
  char name[200];
  const char* backend;
  const char* io_mode;
  const char* direct;
  const char* verify;
  const char* lookahead;
  const char* async_reads; /* uring: reads by io_uring's workers (IOSQE_ASYNC) */
  unsigned chunk_tokens;
  th_kv_spec spec;
} rt_case;

#define N_CASES 26 /* the last 6 on the dram backend */
static rt_case cases[N_CASES];

static void make_cases(void) {
  uint64_t rng = th_base_seed() ^ 0x40u;
  static const uint32_t bts[] = {8, 16, 32};
  static const char* las[] = {"1", "2", "4"};
  for (int i = 0; i < N_CASES; i++) {
    rt_case* c = &cases[i];
    c->backend = i >= 20 ? "dram" : (i & 1) ? "posix" : "uring";
    c->io_mode = (i & 2) ? "per-block-baseline" : "object";
    /* direct_to_blocks: on (aligned NHD layouts only), off, auto */
    int d = (i >> 2) % 3;
    if (d == 0 && (i & 2)) d = 2; /* the baseline always stages: leave it on auto */
    c->direct = d == 0 ? "on" : d == 1 ? "off" : "auto";
    c->async_reads = strcmp(c->backend, "uring") == 0 && (i & 4) ? "on" : "auto";
    c->verify = th_rand_below(&rng, 2) ? "on" : "unsafe-off";
    c->lookahead = las[th_rand_below(&rng, 3)];
    c->chunk_tokens = th_rand_below(&rng, 2) ? 64 : 32;
    th_kv_spec* s = &c->spec;
    *s = th_spec_default();
    s->num_layers = 2 + (uint32_t)th_rand_below(&rng, 5);
    /* direct_to_blocks=on needs 4 KiB blocks: 16 or 32 tokens of 2 heads x 128 bytes; the
     * object mode takes any block size (12 and 48 divide no chunk size; 48 exceeds 32) */
    static const uint32_t any_bts[] = {12, 48};
    s->block_tokens = d == 0 ? bts[1 + th_rand_below(&rng, 2)] : bts[th_rand_below(&rng, 3)];
    if (d != 0 && !(i & 2) && ((i >> 2) + i) % 2 == 0) s->block_tokens = any_bts[(i >> 3) & 1];
    /* pools hold token-major chunks: only NHD blocks can be read into directly */
    s->hnd = d == 0 ? 0 : (int)th_rand_below(&rng, 2);
    s->fused = (i >> 3) & 1;
    int padded = d != 0 && th_rand_below(&rng, 3) != 0;
    if (padded) {
      s->token_pad = th_rand_below(&rng, 2) ? 32 : 0;
      s->block_pad = 64 * (uint32_t)(1 + th_rand_below(&rng, 4));
      s->misalign = th_rand_below(&rng, 2) ? 64 : 0;
    } else if (d != 0 && th_rand_below(&rng, 2)) {
      s->misalign = 512; /* contiguous but not page-aligned */
    }
    snprintf(c->name, sizeof c->name,
             "roundtrip_%s_%s_direct-%s_%s-%s_L%u_bt%u_chunk%u_pad%u-%u_mis%u_verify%s_la%s_async-%s",
             c->backend, c->io_mode, c->direct, s->fused ? "fused" : "separate",
             s->hnd ? "HND" : "NHD", s->num_layers, s->block_tokens, c->chunk_tokens,
             s->token_pad, s->block_pad, s->misalign, c->verify, c->lookahead, c->async_reads);
  }
}

static void check_chunk_status(tutti_batch* b, size_t req, size_t chunks) {
  int st[64];
  size_t n = 999;
  TH_OK(tutti_batch_chunk_status(b, req, st, 64, &n));
  TH_EQ(n, chunks);
  for (size_t i = 0; i < n; i++)
    if (st[i] != 0) fail_msg("chunk %zu has status %d (%s)", i, st[i], tutti_strerror(st[i]));
}

static void test_roundtrip(void** state) {
  th_env* env = *state;
  const rt_case* c = env->param;
  const unsigned ct = c->chunk_tokens;
  uint64_t rng = th_base_seed() ^ th_mix64((uint64_t)(c - cases));
  th_kv_spec spec = c->spec;

  /* two prompts: 3 chunks and a partial tail, exactly 2 chunks */
  th_prompt p1, p2;
  th_prompt_random(&p1, &rng, 3 * ct + 1 + th_rand_below(&rng, ct - 1));
  th_prompt_random(&p2, &rng, 2 * ct);
  size_t nb1 = th_nblocks(p1.n, spec.block_tokens), nb2 = th_nblocks(p2.n, spec.block_tokens);
  spec.num_blocks = (uint32_t)(2 * (nb1 + nb2) + 5);

  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  int32_t s1[64], s2[64], l1[64], l2[64];
  th_blocks_take(&alloc, s1, nb1);
  th_blocks_take(&alloc, s2, nb2);
  th_blocks_take(&alloc, l1, nb1);
  th_blocks_take(&alloc, l2, nb2);

  const char* extra[] = {"backend",   c->backend,   "io_mode",   c->io_mode,   "direct_to_blocks", c->direct,
                         "verify",    c->verify,    "lookahead", c->lookahead, "async_reads",      c->async_reads,
                         NULL};
  tutti_runtime* rt = NULL;
  char shm[64] = "";
  if (strcmp(c->backend, "dram") == 0) th_shm_dir(shm, sizeof shm);
  int rc = th_open(&rt, shm[0] ? shm : env->dir, "64M", ct, extra, kv);
  if (rc == TUTTI_EUNSUPPORTED && strcmp(c->backend, "uring") == 0) {
    print_message("io_uring unavailable: %s\n", tutti_last_error());
    th_kv_destroy(kv);
    th_blocks_free(&alloc);
    th_prompt_free(&p1);
    th_prompt_free(&p2);
    skip();
  }
  TH_OK(rc);
  assert_string_equal(tutti_runtime_backend(rt), c->backend);

  /* store p1 with per-layer waits, reusing (poisoning) each layer's blocks as soon as its
   * wait_layer returns; p2 plainly */
  th_kv_fill(kv, &p1, s1, 0, p1.n);
  th_kv_fill(kv, &p2, s2, 0, p2.n);
  tutti_batch* b = NULL;
  tutti_result res;
  tutti_request r = th_request(&p1, s1, nb1, 0, TUTTI_TOKENS_ALL);
  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE, &b));
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_OK(tutti_batch_submit(b));
  for (uint32_t l = 0; l < spec.num_layers; l++) {
    TH_OK(tutti_batch_wait_layer(b, l));
    th_kv_poison_layer(kv, l, s1, nb1);
  }
  TH_OK(tutti_batch_wait(b));
  TH_OK(tutti_batch_result(b, 0, &res));
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks, 3);
  TH_EQ(res.chunks_ok, 3);
  TH_EQ(res.tokens, 3 * ct);
  check_chunk_status(b, 0, 3);
  tutti_batch_destroy(b);
  th_store_prompt(rt, kv, &p2, s2, nb2);
  TH_VERIFY_ALL(kv); /* a store never writes into the KV cache */

  TH_EQ(th_lookup(rt, &p1), 3 * ct);
  TH_EQ(th_lookup(rt, &p2), 2 * ct);

  /* zero everything, load p1's whole chunks into fresh blocks, and check each layer as soon as
   * wait_layer returns for it */
  th_kv_poison(kv);
  th_kv_expect(kv, &p1, l1, 0, 3 * ct);
  r = th_request(&p1, l1, nb1, 0, TUTTI_TOKENS_ALL);
  TH_OK(tutti_batch_create(rt, TUTTI_OP_LOAD, &b));
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_OK(tutti_batch_submit(b));
  char early[600] = "";
  for (uint32_t l = 0; l < spec.num_layers; l++) {
    char msg[512];
    int rc_l = tutti_batch_wait_layer(b, l);
    size_t bad = th_kv_check(kv, &p1, l1, 0, 3 * ct, l, l + 1, msg, sizeof msg);
    if (rc_l && !early[0])
      snprintf(early, sizeof early, "wait_layer(%u) -> %d: %s", l, rc_l, tutti_last_error());
    if (bad && !early[0])
      snprintf(early, sizeof early, "layer %u not in place after wait_layer: %zu rows, %s", l,
               bad, msg);
  }
  TH_OK(tutti_batch_wait(b));
  if (early[0]) fail_msg("%s", early);
  TH_OK(tutti_batch_result(b, 0, &res));
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks, 3);
  TH_EQ(res.chunks_ok, 3);
  TH_EQ(res.tokens, 3 * ct);
  check_chunk_status(b, 0, 3);
  tutti_batch_destroy(b);
  TH_CHECK(kv, &p1, l1, 0, 3 * ct);

  /* p2: only its second chunk */
  th_kv_expect(kv, &p2, l2, ct, 2 * ct);
  r = th_request(&p2, l2, nb2, ct, 2 * ct);
  TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 1, spec.num_layers));
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks, 1);
  TH_EQ(res.chunks_ok, 1);
  TH_EQ(res.tokens, ct);
  TH_CHECK(kv, &p2, l2, ct, 2 * ct);
  TH_VERIFY_ALL(kv); /* nothing else (other blocks, padding, tokens < ct) was touched */
  th_load_and_check(rt, kv, &p2, l2, nb2, 2 * ct); /* whole, without wait_layer */

  if (strcmp(c->io_mode, "object") == 0) {
    /* a range that starts and ends inside chunks moves exactly its tokens: the rows before and
     * after it in the same blocks keep what they held */
    size_t lo = 1 + th_rand_below(&rng, ct - 1), hi = ct + 1 + th_rand_below(&rng, ct - 1);
    th_kv_poison_blocks(kv, l2, nb2);
    th_kv_expect(kv, &p2, l2, lo, hi);
    r = th_request(&p2, l2, nb2, lo, hi);
    TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 1, spec.num_layers));
    TH_EQ(res.status, 0);
    TH_EQ(res.chunks, 2);
    TH_EQ(res.tokens, hi - lo);
    TH_CHECK(kv, &p2, l2, lo, hi);
    TH_VERIFY_ALL(kv);
    /* p1's tokens past its whole chunks are not in the pool: that chunk misses, the others land */
    th_kv_poison_blocks(kv, l1, nb1);
    th_kv_expect(kv, &p1, l1, 0, 3 * ct);
    r = th_request(&p1, l1, nb1, 0, p1.n);
    TH_EQ(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0), TUTTI_ENOENT);
    TH_EQ(res.status, TUTTI_ENOENT);
    TH_EQ(res.chunks, 4);
    TH_EQ(res.chunks_ok, 3);
    TH_EQ(res.tokens, 3 * ct);
    TH_CHECK(kv, &p1, l1, 0, 3 * ct);
  }

  /* statistics */
  uint64_t chunk_bytes = (uint64_t)ct * spec.num_kv_heads * spec.head_dim * spec.elem_bytes *
                         2 * spec.num_layers;
  tutti_stats st = th_stats(rt);
  TH_EQ(st.num_layers, spec.num_layers);
  if (st.bytes_written < 5 * chunk_bytes)
    fail_msg("bytes_written %llu < %llu", (unsigned long long)st.bytes_written,
             (unsigned long long)(5 * chunk_bytes));
  if (st.bytes_read < 4 * chunk_bytes)
    fail_msg("bytes_read %llu < %llu", (unsigned long long)st.bytes_read,
             (unsigned long long)(4 * chunk_bytes));
  assert_true(st.stored_chunks >= 5);
  assert_true(st.ios > 0);
  assert_true(st.lookups >= 2);
  assert_true(st.hit_chunks >= 5);
  assert_true(st.layer_waits >= 2 * spec.num_layers);
  assert_true(st.slots_total > 0);
  assert_true(st.slots_used >= 5 && st.slots_used <= st.slots_total);
  uint64_t ns[8];
  size_t n = 999;
  TH_OK(tutti_runtime_layer_wait_ns(rt, ns, 8, &n));
  TH_EQ(n, spec.num_layers);
  TH_OK(tutti_runtime_layer_wait_ns(rt, ns, 1, &n));
  TH_EQ(n, 1);

  tutti_runtime_close(rt);
  if (shm[0]) th_rmtree(shm);
  th_kv_destroy(kv);
  th_blocks_free(&alloc);
  th_prompt_free(&p1);
  th_prompt_free(&p2);
}

/* dram keeps its pool in memory: a pool on a disk is refused with the reason. */
static void test_dram_needs_tmpfs(void** state) {
  th_env* env = *state;
  struct statfs fs;
  TH_OK(statfs(env->dir, &fs));
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    print_message("%s is on tmpfs: nothing to refuse\n", env->dir);
    skip();
  }
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  const char* extra[] = {"backend", "dram", NULL};
  tutti_runtime* rt = NULL;
  TH_EQ(th_open(&rt, env->dir, "64M", 32, extra, kv), TUTTI_EUNSUPPORTED);
  assert_non_null(strstr(tutti_last_error(), "not on tmpfs"));
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

/* backend auto on a pool under /dev/shm is dram (its mapping is faster there than read() and
 * write()), and its loads land every byte. */
static void test_auto_on_tmpfs_is_dram(void** state) {
  (void)state;
  char shm[64];
  th_shm_dir(shm, sizeof shm);
  uint64_t rng = th_base_seed() ^ 0xA070u;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_prompt p;
  th_prompt_random(&p, &rng, 4 * 32);
  const size_t nb = th_nblocks(p.n, spec.block_tokens);
  int32_t st[16], ld[16];
  th_blocks_take(&alloc, st, nb);
  th_blocks_take(&alloc, ld, nb);
  const char* extra[] = {"backend", "auto", NULL}; /* whatever TUTTI_BACKEND says */
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, shm, "64M", 32, extra, kv));
  assert_string_equal(tutti_runtime_backend(rt), "dram");
  th_store_prompt(rt, kv, &p, st, nb);
  th_load_and_check(rt, kv, &p, ld, nb, p.n);
  TH_VERIFY_ALL(kv);
  tutti_runtime_close(rt);
  th_rmtree(shm);
  th_prompt_free(&p);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* wait_layer in any order (last layer first, then backwards, some twice) with lookahead 1
 * neither deadlocks nor returns before the layer is in place. */
static void test_wait_layer_any_order(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x41u;
  th_kv_spec spec = th_spec_default();
  spec.num_layers = 6;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_prompt p;
  th_prompt_random(&p, &rng, 4 * 32);
  size_t nb = th_nblocks(p.n, spec.block_tokens);
  int32_t st[16], ld[16];
  th_blocks_take(&alloc, st, nb);
  th_blocks_take(&alloc, ld, nb);
  const char* extra[] = {"lookahead", "1", NULL};
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", 32, extra, kv));
  alarm(120); /* a deadlock fails the program instead of hanging it */
  th_store_prompt(rt, kv, &p, st, nb);
  for (int order = 0; order < 2; order++) {
    tutti_batch* b = NULL;
    tutti_request r = th_request(&p, order ? st : ld, nb, 0, TUTTI_TOKENS_ALL);
    if (order == 0) th_kv_poison_blocks(kv, ld, nb);
    TH_OK(tutti_batch_create(rt, order ? TUTTI_OP_STORE : TUTTI_OP_LOAD, &b));
    TH_OK(tutti_batch_add(b, &r, 1));
    TH_OK(tutti_batch_submit(b));
    char early[600] = "";
    for (int i = (int)spec.num_layers - 1; i >= 0; i--) {
      char msg[512];
      int rc = tutti_batch_wait_layer(b, (uint32_t)i);
      if (rc == 0 && (i % 2)) rc = tutti_batch_wait_layer(b, (uint32_t)i); /* again */
      if (rc && !early[0]) snprintf(early, sizeof early, "wait_layer(%d) -> %d", i, rc);
      if (order == 0 && !early[0] &&
          th_kv_check(kv, &p, ld, 0, p.n, (uint32_t)i, (uint32_t)i + 1, msg, sizeof msg))
        snprintf(early, sizeof early, "layer %d not in place after wait_layer: %s", i, msg);
    }
    TH_OK(tutti_batch_wait(b));
    tutti_batch_destroy(b);
    if (early[0]) fail_msg("%s", early);
  }
  alarm(0);
  th_kv_expect(kv, &p, ld, 0, p.n);
  TH_VERIFY_ALL(kv);
  tutti_runtime_close(rt);
  th_prompt_free(&p);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* tutti_kv_layout_init fills the documented NHD and HND strides. */
static void test_layout_init(void** state) {
  (void)state;
  tutti_kv_layout L;
  const uint64_t row = 64 * 2;
  memset(&L, 0xff, sizeof L);
  TH_OK(tutti_kv_layout_init(&L, 3, 10, 16, 2, 64, 2, 0));
  TH_EQ(L.struct_size, sizeof L);
  TH_EQ(L.num_layers, 3);
  TH_EQ(L.num_blocks, 10);
  TH_EQ(L.block_tokens, 16);
  TH_EQ(L.num_kv_heads, 2);
  TH_EQ(L.head_dim, 64);
  TH_EQ(L.elem_bytes, 2);
  TH_EQ(L.memory, TUTTI_MEMORY_HOST);
  TH_EQ(L.head_stride, row);
  TH_EQ(L.token_stride, 2 * row);
  TH_EQ(L.block_stride, 16 * 2 * row);
  TH_OK(tutti_kv_layout_init(&L, 3, 10, 16, 2, 64, 2, 1));
  TH_EQ(L.token_stride, row);
  TH_EQ(L.head_stride, 16 * row);
  TH_EQ(L.block_stride, 16 * 2 * row);
}

int main(void) {
  struct CMUnitTest tests[N_CASES + 4];
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  make_cases();
  tests[0] = (struct CMUnitTest)cmocka_unit_test(test_layout_init);
  tests[1] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
      test_wait_layer_any_order, th_setup_dir, th_teardown_dir);
  for (int i = 0; i < N_CASES; i++) {
    tests[i + 2] = (struct CMUnitTest)cmocka_unit_test_prestate_setup_teardown(
        test_roundtrip, th_setup_dir, th_teardown_dir, &cases[i]);
    tests[i + 2].name = cases[i].name;
  }
  tests[N_CASES + 2] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
      test_dram_needs_tmpfs, th_setup_dir, th_teardown_dir);
  tests[N_CASES + 3] = (struct CMUnitTest)cmocka_unit_test(test_auto_on_tmpfs_is_dram);
  return _cmocka_run_group_tests("roundtrip", tests, N_CASES + 4, NULL, NULL);
}
