// SPDX-License-Identifier: Apache-2.0
/* batch: several requests per store/load batch, per-request results and chunk statuses. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define CT 32u /* chunk tokens */
#define MAXR 5

typedef struct req_set {
  th_prompt p[MAXR];
  int32_t store_tab[MAXR][32];
  int32_t load_tab[MAXR][32];
  size_t nb[MAXR];
  size_t n;
} req_set;

static th_kv_spec spec_for_batch(void) {
  th_kv_spec s = th_spec_default();
  s.num_layers = 3;
  s.block_tokens = 16;
  s.num_blocks = 256;
  return s;
}

static void get_status(tutti_batch* b, size_t req, int* st, size_t expect_n) {
  size_t n = 999;
  TH_OK(tutti_batch_chunk_status(b, req, st, 16, &n));
  TH_EQ(n, expect_n);
}

/* 3-5 different prompts stored in one batch and loaded in one batch, some partially. */
static void test_multi(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xB1;
  th_kv_spec spec = spec_for_batch();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));

  for (int round = 0; round < 3; round++) {
    req_set rs;
    rs.n = 3 + (size_t)round; /* 3, 4, 5 requests */
    th_blocks_reset(&alloc, &rng);
    th_kv_poison(kv);
    tutti_request reqs[MAXR];
    tutti_result res[MAXR];
    for (size_t i = 0; i < rs.n; i++) {
      size_t n = CT * (1 + th_rand_below(&rng, 5)) + th_rand_below(&rng, CT);
      th_prompt_random(&rs.p[i], &rng, n);
      if (i == 1) { /* one salted request */
        th_prompt tmp = rs.p[i];
        th_prompt_init(&rs.p[i], tmp.tokens, tmp.n, "lora-7", 6);
        th_prompt_free(&tmp);
      }
      rs.nb[i] = th_nblocks(n, spec.block_tokens);
      th_blocks_take(&alloc, rs.store_tab[i], rs.nb[i]);
      th_blocks_take(&alloc, rs.load_tab[i], rs.nb[i]);
      th_kv_fill(kv, &rs.p[i], rs.store_tab[i], 0, n);
      reqs[i] = th_request(&rs.p[i], rs.store_tab[i], rs.nb[i], 0, TUTTI_TOKENS_ALL);
    }
    TH_OK(th_batch_run(rt, TUTTI_OP_STORE, reqs, rs.n, res, 1, spec.num_layers));
    for (size_t i = 0; i < rs.n; i++) {
      size_t chunks = rs.p[i].n / CT;
      TH_EQ(res[i].status, 0);
      TH_EQ(res[i].chunks, chunks);
      TH_EQ(res[i].chunks_ok, chunks);
      TH_EQ(res[i].tokens, chunks * CT);
      TH_EQ(th_lookup(rt, &rs.p[i]), chunks * CT);
    }
    TH_VERIFY_ALL(kv);

    /* the salted prompt without its salt misses */
    size_t cached = 1;
    TH_OK(tutti_lookup(rt, rs.p[1].tokens, rs.p[1].n, NULL, 0, &cached));
    TH_EQ(cached, 0);

    /* load: request 0 only its first chunk, request 2 from chunk 1 on, others whole */
    size_t begin[MAXR], end[MAXR];
    for (size_t i = 0; i < rs.n; i++) {
      size_t full = rs.p[i].n / CT * CT;
      begin[i] = 0;
      end[i] = full;
      if (i == 0) end[i] = CT;
      if (i == 2 && full > CT) begin[i] = CT;
      reqs[i] = th_request(&rs.p[i], rs.load_tab[i], rs.nb[i], begin[i], i == 0 ? CT : TUTTI_TOKENS_ALL);
      th_kv_expect(kv, &rs.p[i], rs.load_tab[i], begin[i], end[i]);
    }
    TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, reqs, rs.n, res, round & 1, spec.num_layers));
    for (size_t i = 0; i < rs.n; i++) {
      TH_EQ(res[i].status, 0);
      TH_EQ(res[i].chunks, (end[i] - begin[i]) / CT);
      TH_EQ(res[i].chunks_ok, (end[i] - begin[i]) / CT);
      TH_EQ(res[i].tokens, end[i] - begin[i]);
      TH_CHECK(kv, &rs.p[i], rs.load_tab[i], begin[i], end[i]);
    }
    TH_VERIFY_ALL(kv);

    /* storing the same prompts again: every chunk is already present */
    for (size_t i = 0; i < rs.n; i++)
      reqs[i] = th_request(&rs.p[i], rs.store_tab[i], rs.nb[i], 0, TUTTI_TOKENS_ALL);
    TH_OK(th_batch_run(rt, TUTTI_OP_STORE, reqs, rs.n, res, 0, 0));
    for (size_t i = 0; i < rs.n; i++) {
      TH_EQ(res[i].status, 0);
      TH_EQ(res[i].chunks_ok, rs.p[i].n / CT);
    }
    for (size_t i = 0; i < rs.n; i++) th_prompt_free(&rs.p[i]);
  }
  tutti_runtime_close(rt);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* A load batch with a never-stored prompt and a half-stored one: those requests fail with
 * TUTTI_ENOENT on their missing chunks, the others load correctly. */
static void test_missing(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xB2;
  th_kv_spec spec = spec_for_batch();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));

  th_prompt p[4];
  int32_t st[4][16], ld[4][16];
  size_t nb[4];
  for (int i = 0; i < 4; i++) {
    th_prompt_random(&p[i], &rng, 4 * CT);
    nb[i] = th_nblocks(p[i].n, spec.block_tokens);
    th_blocks_take(&alloc, st[i], nb[i]);
    th_blocks_take(&alloc, ld[i], nb[i]);
    th_kv_fill(kv, &p[i], st[i], 0, p[i].n);
  }
  /* p0 whole, p1 never, p2 its first two chunks, p3 chunks 0 and 2 (not 1) */
  tutti_request reqs[4];
  tutti_result res[4];
  reqs[0] = th_request(&p[0], st[0], nb[0], 0, TUTTI_TOKENS_ALL);
  reqs[1] = th_request(&p[2], st[2], nb[2], 0, 2 * CT);
  reqs[2] = th_request(&p[3], st[3], nb[3], 0, CT);
  reqs[3] = th_request(&p[3], st[3], nb[3], 2 * CT, 3 * CT);
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, reqs, 4, res, 0, 0));
  TH_EQ(res[0].chunks_ok, 4);
  TH_EQ(res[1].chunks_ok, 2);
  TH_EQ(res[1].chunks, 2);
  TH_EQ(res[2].chunks_ok, 1);
  TH_EQ(res[3].chunks_ok, 1);
  TH_EQ(res[3].tokens, CT);
  TH_EQ(th_lookup(rt, &p[0]), 4 * CT);
  TH_EQ(th_lookup(rt, &p[1]), 0);
  TH_EQ(th_lookup(rt, &p[2]), 2 * CT);
  TH_EQ(th_lookup(rt, &p[3]), CT); /* a hit is always a prefix */

  th_kv_poison(kv);
  for (int i = 0; i < 4; i++) reqs[i] = th_request(&p[i], ld[i], nb[i], 0, TUTTI_TOKENS_ALL);
  tutti_batch* b = NULL;
  TH_OK(tutti_batch_create(rt, TUTTI_OP_LOAD, &b));
  TH_OK(tutti_batch_add(b, reqs, 4));
  TH_OK(tutti_batch_submit(b));
  TH_ERR(TUTTI_ENOENT, tutti_batch_wait(b));
  for (int i = 0; i < 4; i++) TH_OK(tutti_batch_result(b, (size_t)i, &res[i]));
  int s[16];

  TH_EQ(res[0].status, 0);
  TH_EQ(res[0].tokens, 4 * CT);
  th_kv_expect(kv, &p[0], ld[0], 0, 4 * CT);

  TH_EQ(res[1].status, TUTTI_ENOENT);
  TH_EQ(res[1].chunks, 4);
  TH_EQ(res[1].chunks_ok, 0);
  TH_EQ(res[1].tokens, 0);
  get_status(b, 1, s, 4);
  for (int c = 0; c < 4; c++) TH_EQ(s[c], TUTTI_ENOENT);
  th_kv_dontcare(kv, &p[1], ld[1], 0, 4 * CT);

  TH_EQ(res[2].status, TUTTI_ENOENT);
  TH_EQ(res[2].chunks, 4);
  TH_EQ(res[2].chunks_ok, 2);
  TH_EQ(res[2].tokens, 2 * CT);
  get_status(b, 2, s, 4);
  TH_EQ(s[0], 0);
  TH_EQ(s[1], 0);
  TH_EQ(s[2], TUTTI_ENOENT);
  TH_EQ(s[3], TUTTI_ENOENT);
  th_kv_expect(kv, &p[2], ld[2], 0, 2 * CT);
  th_kv_dontcare(kv, &p[2], ld[2], 2 * CT, 4 * CT);

  /* p3: chunk 1 missing; chunk 2 may be loaded or skipped, but never wrong */
  TH_EQ(res[3].status, TUTTI_ENOENT);
  TH_EQ(res[3].chunks, 4);
  TH_EQ(res[3].tokens, CT);
  get_status(b, 3, s, 4);
  TH_EQ(s[0], 0);
  TH_EQ(s[1], TUTTI_ENOENT);
  assert_true(s[3] != 0);
  TH_EQ(res[3].chunks_ok, s[2] == 0 ? 2 : 1);
  th_kv_expect(kv, &p[3], ld[3], 0, CT);
  th_kv_dontcare(kv, &p[3], ld[3], CT, 2 * CT);
  if (s[2] == 0) {
    th_kv_expect(kv, &p[3], ld[3], 2 * CT, 3 * CT);
    TH_CHECK(kv, &p[3], ld[3], 2 * CT, 3 * CT);
  } else {
    th_kv_dontcare(kv, &p[3], ld[3], 2 * CT, 3 * CT);
  }
  th_kv_dontcare(kv, &p[3], ld[3], 3 * CT, 4 * CT);
  tutti_batch_destroy(b);

  TH_CHECK(kv, &p[0], ld[0], 0, 4 * CT);
  TH_CHECK(kv, &p[2], ld[2], 0, 2 * CT);
  TH_CHECK(kv, &p[3], ld[3], 0, CT);
  TH_VERIFY_ALL(kv);
  tutti_stats stats = th_stats(rt);
  assert_true(stats.failed_chunks >= 4 + 2 + 1);

  /* the runtime is still fine: p0 loads again */
  th_load_and_check(rt, kv, &p[0], st[0], nb[0], 4 * CT);
  for (int i = 0; i < 4; i++) th_prompt_free(&p[i]);
  tutti_runtime_close(rt);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* Requests sharing a prefix in one store batch; a load batch and a store batch in flight
 * together. */
static void test_shared_and_overlap(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xB3;
  th_kv_spec spec = spec_for_batch();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));

  th_prompt a, b, c, d;
  th_prompt_random(&a, &rng, 3 * CT + 5);
  th_prompt_extend(&b, &a, 2 * CT + 7, &rng, 5 * CT); /* shares 2 chunks with a */
  th_prompt_extend(&c, &a, 3 * CT + 5, &rng, 4 * CT); /* shares 3 chunks with a */
  th_prompt_random(&d, &rng, 2 * CT);
  int32_t ta[8], tb[16], tc[16], td[8], la[8], lb[16], lc[16], ld2[8];
  th_blocks_take(&alloc, ta, th_nblocks(a.n, 16));
  th_blocks_take(&alloc, tb, th_nblocks(b.n, 16));
  th_blocks_take(&alloc, tc, th_nblocks(c.n, 16));
  th_blocks_take(&alloc, td, th_nblocks(d.n, 16));
  th_blocks_take(&alloc, la, th_nblocks(a.n, 16));
  th_blocks_take(&alloc, lb, th_nblocks(b.n, 16));
  th_blocks_take(&alloc, lc, th_nblocks(c.n, 16));
  th_blocks_take(&alloc, ld2, th_nblocks(d.n, 16));
  th_kv_fill(kv, &a, ta, 0, a.n);
  th_kv_fill(kv, &b, tb, 0, b.n);
  th_kv_fill(kv, &c, tc, 0, c.n);
  th_kv_fill(kv, &d, td, 0, d.n);

  tutti_request reqs[3] = {th_request(&a, ta, th_nblocks(a.n, 16), 0, TUTTI_TOKENS_ALL),
                           th_request(&b, tb, th_nblocks(b.n, 16), 0, TUTTI_TOKENS_ALL),
                           th_request(&c, tc, th_nblocks(c.n, 16), 0, TUTTI_TOKENS_ALL)};
  tutti_result res[3];
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, reqs, 3, res, 0, 0));
  TH_EQ(res[0].chunks_ok, 3);
  TH_EQ(res[1].chunks_ok, 5);
  TH_EQ(res[2].chunks_ok, 4);
  for (int i = 0; i < 3; i++) TH_EQ(res[i].status, 0);
  TH_EQ(th_lookup(rt, &a), 3 * CT);
  TH_EQ(th_lookup(rt, &b), 5 * CT);
  TH_EQ(th_lookup(rt, &c), 4 * CT);

  /* a store of d and a load of a, b, c, both submitted before either is waited for */
  tutti_batch *sb = NULL, *lb_ = NULL;
  tutti_request sreq = th_request(&d, td, th_nblocks(d.n, 16), 0, TUTTI_TOKENS_ALL);
  tutti_request lreq[3] = {th_request(&a, la, th_nblocks(a.n, 16), 0, TUTTI_TOKENS_ALL),
                           th_request(&b, lb, th_nblocks(b.n, 16), 0, TUTTI_TOKENS_ALL),
                           th_request(&c, lc, th_nblocks(c.n, 16), 0, TUTTI_TOKENS_ALL)};
  th_kv_expect(kv, &a, la, 0, 3 * CT);
  th_kv_expect(kv, &b, lb, 0, 5 * CT);
  th_kv_expect(kv, &c, lc, 0, 4 * CT);
  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE, &sb));
  TH_OK(tutti_batch_create(rt, TUTTI_OP_LOAD, &lb_));
  TH_OK(tutti_batch_add(sb, &sreq, 1));
  TH_OK(tutti_batch_add(lb_, lreq, 3));
  TH_OK(tutti_batch_submit(sb));
  TH_OK(tutti_batch_submit(lb_));
  TH_OK(tutti_batch_wait(lb_));
  TH_OK(tutti_batch_wait(sb));
  for (int i = 0; i < 3; i++) {
    TH_OK(tutti_batch_result(lb_, (size_t)i, &res[i]));
    TH_EQ(res[i].status, 0);
  }
  TH_EQ(res[0].tokens, 3 * CT);
  TH_EQ(res[1].tokens, 5 * CT);
  TH_EQ(res[2].tokens, 4 * CT);
  TH_OK(tutti_batch_result(sb, 0, &res[0]));
  TH_EQ(res[0].chunks_ok, 2);
  tutti_batch_destroy(sb);
  tutti_batch_destroy(lb_);
  TH_CHECK(kv, &a, la, 0, 3 * CT);
  TH_CHECK(kv, &b, lb, 0, 5 * CT);
  TH_CHECK(kv, &c, lc, 0, 4 * CT);
  TH_VERIFY_ALL(kv);
  TH_EQ(th_lookup(rt, &d), 2 * CT);
  th_load_and_check(rt, kv, &d, ld2, th_nblocks(d.n, 16), 2 * CT);

  th_prompt_free(&a);
  th_prompt_free(&b);
  th_prompt_free(&c);
  th_prompt_free(&d);
  tutti_runtime_close(rt);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* Ranges shorter than a chunk: a load moves exactly them; a store of a prompt shorter than a
 * chunk with TUTTI_TOKENS_ALL stores nothing. */
static void test_less_than_a_chunk(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xB5;
  th_kv_spec spec = spec_for_batch();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  th_prompt s, l;
  th_prompt_random(&s, &rng, CT - 12);
  th_prompt_random(&l, &rng, 2 * CT);
  int32_t tab[4] = {3, 1, 4, 0};
  th_kv_fill(kv, &s, tab, 0, s.n);
  th_kv_fill(kv, &l, tab, 0, l.n);
  th_store_prompt(rt, kv, &l, tab, 4);
  tutti_request reqs[2] = {th_request(&s, tab, 2, 0, TUTTI_TOKENS_ALL), th_request(&l, tab, 4, CT, CT + 20)};
  tutti_result res[2];
  for (int op = TUTTI_OP_LOAD; op <= TUTTI_OP_STORE; op++) {
    TH_OK(th_batch_run(rt, (tutti_op)op, reqs, 2, res, 1, spec.num_layers));
    for (int i = 0; i < 2; i++) {
      /* l's second chunk: loaded [CT, CT + 20); stored, 16 tokens of it (partial_tokens), but
       * the whole chunk is in the pool: nothing is written */
      const int moved = i == 1;
      TH_EQ(res[i].status, 0);
      TH_EQ(res[i].chunks, moved);
      TH_EQ(res[i].chunks_ok, moved);
      TH_EQ(res[i].tokens, moved ? (op == TUTTI_OP_LOAD ? 20 : 16) : 0);
    }
  }
  TH_EQ(th_lookup(rt, &s), 0);
  TH_VERIFY_ALL(kv);
  tutti_runtime_close(rt);
  th_prompt_free(&s);
  th_prompt_free(&l);
  th_kv_destroy(kv);
}

/* The same prompt in two store batches in flight together: when the second one's wait
 * returns, its chunks (counted in chunks_ok) are committed and visible, whichever batch wrote
 * them. */
static void test_duplicate_in_flight(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xB4;
  th_kv_spec spec = spec_for_batch();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  for (int round = 0; round < 4; round++) {
    th_prompt p;
    int32_t ta[16], tb[16], tl[16];
    th_prompt_random(&p, &rng, 4 * CT);
    size_t nb = th_nblocks(p.n, spec.block_tokens);
    th_blocks_reset(&alloc, &rng);
    th_blocks_take(&alloc, ta, nb);
    th_blocks_take(&alloc, tb, nb);
    th_blocks_take(&alloc, tl, nb);
    th_kv_fill(kv, &p, ta, 0, p.n);
    th_kv_fill(kv, &p, tb, 0, p.n);
    tutti_request ra = th_request(&p, ta, nb, 0, TUTTI_TOKENS_ALL), rb = th_request(&p, tb, nb, 0, TUTTI_TOKENS_ALL);
    tutti_batch *a = NULL, *b = NULL;
    tutti_result res;
    TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE, &a));
    TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE, &b));
    TH_OK(tutti_batch_add(a, &ra, 1));
    TH_OK(tutti_batch_add(b, &rb, 1));
    TH_OK(tutti_batch_submit(a));
    TH_OK(tutti_batch_submit(b));
    tutti_batch* first = round & 1 ? a : b; /* wait for either one first */
    tutti_batch* second = round & 1 ? b : a;
    TH_OK(tutti_batch_wait(first));
    TH_OK(tutti_batch_result(first, 0, &res));
    TH_EQ(res.status, 0);
    TH_EQ(res.chunks_ok, 4);
    size_t hit = th_lookup(rt, &p);
    TH_OK(tutti_batch_wait(second)); /* before failing: the batch still reads ta/tb */
    tutti_batch_destroy(a);
    tutti_batch_destroy(b);
    if (hit != 4 * CT)
      fail_msg("round %d: a store batch reported 4 chunks ok, but lookup right after its wait "
               "finds %zu of %u tokens", round, hit, 4 * CT);
    th_load_and_check(rt, kv, &p, tl, nb, 4 * CT);
    th_prompt_free(&p);
  }
  tutti_runtime_close(rt);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_multi, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_missing, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_shared_and_overlap, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_less_than_a_chunk, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_duplicate_in_flight, th_setup_dir, th_teardown_dir),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("batch", tests, NULL, NULL);
}
