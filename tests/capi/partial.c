// SPDX-License-Identifier: Apache-2.0
/* partial: a store whose range ends inside a chunk also stores that chunk's tokens (in
 * multiples of partial_tokens) as a partial chunk; lookups report hits in tokens, and loads move
 * exactly the range asked for, from any token to any token. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

#define CT 64u      /* chunk tokens */
#define G 16u       /* partial_tokens (the default) */
#define N (3 * CT + 40) /* a prompt: three whole chunks and 40 tokens */

typedef struct fixture {
  th_kv_spec spec;
  th_kv* kv;
  tutti_runtime* rt;
  th_blocks alloc;
  uint64_t rng;
  th_prompt p;
  int32_t st[64], ld[64];
  size_t nb;
} fixture;

static void open_rt(fixture* f, const char* dir, const char* const* extra) {
  TH_OK(th_open(&f->rt, dir, "64M", CT, extra, f->kv));
}

static void setup(fixture* f, const char* dir, uint64_t seed, const char* const* extra) {
  f->rng = th_base_seed() ^ seed;
  f->spec = th_spec_default();
  f->spec.num_layers = 3;
  f->spec.num_blocks = 256;
  TH_OK(th_kv_create(&f->kv, &f->spec));
  open_rt(f, dir, extra);
  th_blocks_init(&f->alloc, f->spec.num_blocks, &f->rng);
  th_prompt_random(&f->p, &f->rng, N);
  f->nb = th_nblocks(4 * CT, f->spec.block_tokens); /* room for a longer prompt too */
  th_blocks_take(&f->alloc, f->st, f->nb);
  th_blocks_take(&f->alloc, f->ld, f->nb);
  th_kv_fill(f->kv, &f->p, f->st, 0, N);
}

static void teardown(fixture* f) {
  th_prompt_free(&f->p);
  th_blocks_free(&f->alloc);
  tutti_runtime_close(f->rt);
  th_kv_destroy(f->kv);
}

/* Stores tokens [begin, end) of p from its blocks; returns the result. */
static tutti_result store(fixture* f, const th_prompt* p, size_t begin, size_t end) {
  tutti_request r = th_request(p, f->st, f->nb, begin, end);
  tutti_result res;
  TH_OK(th_batch_run(f->rt, TUTTI_OP_STORE, &r, 1, &res, 0, 0));
  return res;
}

/* Loads [begin, end) of p into poisoned blocks: only those rows change, and hold p's KV. */
static void load_exactly(fixture* f, const th_prompt* p, size_t begin, size_t end) {
  th_kv_poison_blocks(f->kv, f->ld, f->nb);
  th_kv_expect(f->kv, p, f->ld, begin, end);
  tutti_request r = th_request(p, f->ld, f->nb, begin, end);
  tutti_result res;
  TH_OK(th_batch_run(f->rt, TUTTI_OP_LOAD, &r, 1, &res, 1, f->spec.num_layers));
  TH_EQ(res.status, 0);
  TH_EQ(res.tokens, end - begin);
  TH_CHECK(f->kv, p, f->ld, begin, end);
  TH_VERIFY_ALL(f->kv);
}

static void test_a_partial_tail_is_stored_found_and_loaded(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x9A47, NULL);
  tutti_result res = store(&f, &f.p, 0, N);
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks, 4);
  TH_EQ(res.chunks_ok, 4);
  TH_EQ(res.tokens, 3 * CT + 32); /* 40 tokens past the chunks: 32 in multiples of 16 */
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT + 32);
  TH_EQ(th_stats(f.rt).stored_chunks, 4);

  load_exactly(&f, &f.p, 0, 3 * CT + 32);
  load_exactly(&f, &f.p, 5, 3 * CT + 20);        /* from inside the first chunk into the partial */
  load_exactly(&f, &f.p, 3 * CT + 3, 3 * CT + 9); /* inside the partial chunk alone */

  /* past what is stored: the partial chunk cannot serve token 3*CT+32, that chunk misses */
  th_kv_poison_blocks(f.kv, f.ld, f.nb);
  th_kv_expect(f.kv, &f.p, f.ld, 0, 3 * CT);
  tutti_request r = th_request(&f.p, f.ld, f.nb, 0, 3 * CT + 33);
  TH_EQ(th_batch_run(f.rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0), TUTTI_ENOENT);
  TH_EQ(res.chunks, 4);
  TH_EQ(res.chunks_ok, 3);
  TH_EQ(res.tokens, 3 * CT);
  TH_CHECK(f.kv, &f.p, f.ld, 0, 3 * CT);
  TH_VERIFY_ALL(f.kv); /* the failed chunk's blocks were left alone */

  /* a lease pins the partial chunk too, and counts it */
  size_t hit = 0;
  tutti_lease* lease = NULL;
  TH_OK(tutti_lookup_lease(f.rt, f.p.tokens, f.p.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 3 * CT + 32);
  load_exactly(&f, &f.p, 3 * CT, 3 * CT + 32);
  tutti_lease_release(lease);

  /* it lasts: found after a reopen */
  tutti_runtime_close(f.rt);
  open_rt(&f, env->dir, NULL);
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT + 32);
  load_exactly(&f, &f.p, 0, 3 * CT + 32);
  teardown(&f);
}

/* A hit is always a prefix of the prompt asked about: a partial chunk counts only where the
 * prompt has all of its tokens. */
static void test_partial_hits_are_prefixes(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x9A48, NULL);
  store(&f, &f.p, 0, N);
  th_prompt q;
  th_prompt_extend(&q, &f.p, N, &f.rng, N + 500); /* the same prompt, and more */
  TH_EQ(th_lookup(f.rt, &q), 3 * CT + 32);
  th_prompt_free(&q);
  th_prompt_extend(&q, &f.p, 3 * CT + 20, &f.rng, N); /* differs inside the partial chunk */
  TH_EQ(th_lookup(f.rt, &q), 3 * CT);
  th_prompt_free(&q);
  th_prompt_extend(&q, &f.p, 3 * CT + 31, &f.rng, 3 * CT + 31); /* ends before its last token */
  TH_EQ(th_lookup(f.rt, &q), 3 * CT);
  th_prompt_free(&q);
  th_prompt_init(&q, f.p.tokens, f.p.n, "lora-2", 6); /* another salt */
  TH_EQ(th_lookup(f.rt, &q), 0);
  th_prompt_free(&q);
  teardown(&f);
}

/* Where the whole chunk is stored, a partial one of it is not added; a whole chunk stored
 * later is found instead of the partial one. */
static void test_whole_chunks_come_first(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x9A49, NULL);
  th_prompt longer;
  th_prompt_extend(&longer, &f.p, N, &f.rng, 4 * CT);
  th_kv_fill(f.kv, &longer, f.st, 0, longer.n);
  store(&f, &f.p, 0, N); /* 3 whole chunks and a partial one */
  TH_EQ(th_lookup(f.rt, &longer), 3 * CT + 32);
  tutti_result res = store(&f, &longer, 0, 4 * CT);
  TH_EQ(res.chunks_ok, 4);
  TH_EQ(th_lookup(f.rt, &longer), 4 * CT);
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT + 32); /* the short prompt still finds its partial chunk */
  const uint64_t stored = th_stats(f.rt).stored_chunks;
  res = store(&f, &longer, 0, 3 * CT + 50); /* ends inside a chunk that is stored whole */
  TH_EQ(res.status, 0);
  TH_EQ(res.chunks_ok, 4);
  TH_EQ(th_stats(f.rt).stored_chunks, stored); /* nothing written */
  /* a load that ends inside the whole chunk takes it */
  th_kv_poison_blocks(f.kv, f.ld, f.nb);
  th_kv_expect(f.kv, &longer, f.ld, CT, 3 * CT + 50);
  tutti_request r = th_request(&longer, f.ld, f.nb, CT, 3 * CT + 50);
  TH_OK(th_batch_run(f.rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0));
  TH_CHECK(f.kv, &longer, f.ld, CT, 3 * CT + 50);
  TH_VERIFY_ALL(f.kv);
  th_prompt_free(&longer);
  teardown(&f);
}

/* partial_tokens sets the granule; 0 stores whole chunks only; TUTTI_TOKENS_ALL never stores a
 * partial chunk. */
static void test_granule_option(void** state) {
  th_env* env = *state;
  static const char* eight[] = {"partial_tokens", "8", NULL};
  static const char* none[] = {"partial_tokens", "0", NULL};
  fixture f;
  setup(&f, env->dir, 0x9A4A, eight);
  store(&f, &f.p, 0, N);
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT + 40);
  load_exactly(&f, &f.p, 7, 3 * CT + 40);
  teardown(&f);

  char sub[4200];
  snprintf(sub, sizeof sub, "%s/none", env->dir);
  TH_OK(mkdir(sub, 0700) == 0 ? 0 : -1);
  setup(&f, sub, 0x9A4B, none);
  tutti_result res = store(&f, &f.p, 0, N);
  TH_EQ(res.chunks, 3);
  TH_EQ(res.tokens, 3 * CT);
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT);
  teardown(&f);

  snprintf(sub, sizeof sub, "%s/all", env->dir);
  TH_OK(mkdir(sub, 0700) == 0 ? 0 : -1);
  setup(&f, sub, 0x9A4C, NULL);
  res = store(&f, &f.p, 0, TUTTI_TOKENS_ALL);
  TH_EQ(res.chunks, 3);
  TH_EQ(th_lookup(f.rt, &f.p), 3 * CT);
  teardown(&f);
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_a_partial_tail_is_stored_found_and_loaded, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_partial_hits_are_prefixes, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_whole_chunks_come_first, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_granule_option, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
