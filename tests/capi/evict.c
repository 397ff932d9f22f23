// SPDX-License-Identifier: Apache-2.0
/* evict: a small pool evicts least-recently-used chunks; survivors and pinned loads stay intact. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

#define CT 32u
#define PROMPT_TOKENS (2 * CT) /* two chunks per prompt */
#define MAX_PROMPTS 1200

typedef struct ev_ctx {
  th_env* env;
  char dir[4200];
  th_kv* kv;
  tutti_runtime* rt;
  th_prompt p[MAX_PROMPTS];
  size_t np;
  int32_t store_tab[8], load_tab[8];
  size_t nb;
  uint64_t rng;
} ev_ctx;

static void add_prompt(ev_ctx* c) {
  if (c->np >= MAX_PROMPTS) fail_msg("pool never filled up after %zu prompts", c->np);
  th_prompt_random(&c->p[c->np], &c->rng, PROMPT_TOKENS);
  th_store_prompt(c->rt, c->kv, &c->p[c->np], c->store_tab, c->nb);
  c->np++;
}

/* Every hit loads byte-identical; a full-range load of a partly evicted prompt fails with
 * TUTTI_ENOENT but its ok chunks are right. Returns the hit. */
static size_t check_prompt(ev_ctx* c, size_t i) {
  th_prompt* p = &c->p[i];
  size_t hit = th_lookup(c->rt, p);
  if (hit % CT) fail_msg("prompt %zu: hit %zu is not a multiple of %u", i, hit, CT);
  if (hit) th_load_and_check(c->rt, c->kv, p, c->load_tab, c->nb, hit);
  if (hit < PROMPT_TOKENS) {
    int st[2];
    size_t n = 0;
    tutti_batch* b = NULL;
    tutti_result res;
    tutti_request r = th_request(p, c->load_tab, c->nb, 0, TUTTI_TOKENS_ALL);
    th_kv_poison_blocks(c->kv, c->load_tab, c->nb);
    TH_OK(tutti_batch_create(c->rt, TUTTI_OP_LOAD, &b));
    TH_OK(tutti_batch_add(b, &r, 1));
    TH_OK(tutti_batch_submit(b));
    TH_ERR(TUTTI_ENOENT, tutti_batch_wait(b));
    TH_OK(tutti_batch_result(b, 0, &res));
    TH_OK(tutti_batch_chunk_status(b, 0, st, 2, &n));
    tutti_batch_destroy(b);
    TH_EQ(n, 2);
    TH_EQ(res.status, TUTTI_ENOENT);
    /* the chunks still present could have been evicted between lookup and load only by a
     * concurrent store; there is none, so the leading run is exactly the hit */
    TH_EQ(res.tokens, hit);
    for (size_t k = 0; k < 2; k++) {
      if (st[k] == 0) {
        th_kv_expect(c->kv, p, c->load_tab, k * CT, (k + 1) * CT);
      } else {
        TH_EQ(st[k], TUTTI_ENOENT);
        th_kv_dontcare(c->kv, p, c->load_tab, k * CT, (k + 1) * CT);
      }
    }
    TH_VERIFY_ALL(c->kv);
  }
  return hit;
}

/* Opens a pool small enough to hold only a few dozen chunks (each try in its own dir). */
static void open_small(ev_ctx* c) {
  static const char* caps[] = {"1M", "2M", "4M", "8M"};
  int rc = TUTTI_EINVAL;
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    snprintf(c->dir, sizeof c->dir, "%s/try%zu", c->env->dir, i);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    rc = th_open(&c->rt, c->dir, caps[i], CT, NULL, c->kv);
    if (rc == 0) {
      tutti_stats s = th_stats(c->rt);
      print_message("capacity %s: %llu slots\n", caps[i], (unsigned long long)s.slots_total);
      if (s.slots_total >= 16) return;
      tutti_runtime_close(c->rt);
      c->rt = NULL;
    }
  }
  fail_msg("no small pool could be opened (last code %d: %s)", rc, tutti_last_error());
}

static void test_evict(void** state) {
  ev_ctx* c = calloc(1, sizeof *c);
  assert_non_null(c);
  c->env = *state;
  c->rng = th_base_seed() ^ 0xE1;
  th_kv_spec spec = th_spec_default();
  spec.num_blocks = 16;
  TH_OK(th_kv_create(&c->kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &c->rng);
  c->nb = th_nblocks(PROMPT_TOKENS, spec.block_tokens);
  th_blocks_take(&alloc, c->store_tab, c->nb);
  th_blocks_take(&alloc, c->load_tab, c->nb);
  open_small(c);

  /* 1. fill until the first eviction: about the pool's capacity in chunks */
  while (th_stats(c->rt).evictions == 0) add_prompt(c);
  size_t cap_chunks = 2 * (c->np - 1);
  print_message("first eviction after %zu prompts\n", c->np);
  assert_true(cap_chunks >= 12);
  /* then as much again, and a half */
  size_t more = c->np + c->np / 2;
  for (size_t i = 0; i < more; i++) add_prompt(c);
  tutti_stats st = th_stats(c->rt);
  assert_true(st.evictions > 0);
  assert_true(st.slots_used <= st.slots_total);

  /* 2. old prompts are gone, the newest hit fully, nothing loads wrong bytes */
  size_t total_hit = 0, newest_full = 0;
  size_t* hits = calloc(c->np, sizeof *hits);
  assert_non_null(hits);
  for (size_t i = 0; i < c->np; i++) {
    size_t hit = hits[i] = check_prompt(c, i);
    total_hit += hit;
    if (i + 3 >= c->np) TH_EQ(hit, PROMPT_TOKENS);
    if (hit == PROMPT_TOKENS && i + 3 >= c->np) newest_full++;
  }
  TH_EQ(th_lookup(c->rt, &c->p[0]), 0);
  TH_EQ(th_lookup(c->rt, &c->p[1]), 0);
  if (total_hit / CT > cap_chunks + 2)
    fail_msg("%zu chunks hit, but the pool holds about %zu", total_hit / CT, cap_chunks);
  TH_EQ(newest_full, 3);

  /* 3. least recently used: touch the oldest complete prompt, store half a pool more; the
   * touched prompt survives, the untouched next one is evicted. (Step 2 used them in order;
   * y is not looked up again here, a lookup may count as a use.) */
  size_t x = 0;
  while (x < c->np && hits[x] < PROMPT_TOKENS) x++;
  assert_true(x + 2 < c->np);
  size_t y = x + 1;
  TH_EQ(hits[y], PROMPT_TOKENS);
  free(hits);
  th_load_and_check(c->rt, c->kv, &c->p[x], c->load_tab, c->nb, PROMPT_TOKENS);
  for (size_t i = 0; i < cap_chunks / 4 + 1; i++) add_prompt(c);
  TH_EQ(th_lookup(c->rt, &c->p[x]), PROMPT_TOKENS);
  if (th_lookup(c->rt, &c->p[y]) == PROMPT_TOKENS)
    fail_msg("prompt %zu (untouched, older) survived while newer ones were evicted", y);
  check_prompt(c, x);
  check_prompt(c, y);

  /* 4. a load in flight pins its chunks: store a pool's worth while it runs */
  {
    size_t z = c->np - 1;
    tutti_batch* lb = NULL;
    tutti_result res;
    tutti_request r = th_request(&c->p[z], c->load_tab, c->nb, 0, TUTTI_TOKENS_ALL);
    th_kv_poison_blocks(c->kv, c->load_tab, c->nb);
    th_kv_expect(c->kv, &c->p[z], c->load_tab, 0, PROMPT_TOKENS);
    TH_OK(tutti_batch_create(c->rt, TUTTI_OP_LOAD, &lb));
    TH_OK(tutti_batch_add(lb, &r, 1));
    TH_OK(tutti_batch_submit(lb));
    for (size_t i = 0; i < cap_chunks / 2 + 2; i++) add_prompt(c);
    TH_OK(tutti_batch_wait(lb));
    TH_OK(tutti_batch_result(lb, 0, &res));
    tutti_batch_destroy(lb);
    TH_EQ(res.status, 0);
    TH_EQ(res.tokens, PROMPT_TOKENS);
    TH_CHECK(c->kv, &c->p[z], c->load_tab, 0, PROMPT_TOKENS);
    TH_VERIFY_ALL(c->kv);
  }
  /* 5. a store batch whose requests together exceed free space still commits by evicting */
  {
    th_prompt q[4];
    int32_t tabs[4][8];
    tutti_request reqs[4];
    tutti_result res[4];
    th_blocks_reset(&alloc, &c->rng);
    for (int i = 0; i < 4; i++) {
      th_prompt_random(&q[i], &c->rng, PROMPT_TOKENS);
      th_blocks_take(&alloc, tabs[i], c->nb);
      th_kv_fill(c->kv, &q[i], tabs[i], 0, PROMPT_TOKENS);
      reqs[i] = th_request(&q[i], tabs[i], c->nb, 0, TUTTI_TOKENS_ALL);
    }
    TH_OK(th_batch_run(c->rt, TUTTI_OP_STORE, reqs, 4, res, 1, spec.num_layers));
    for (int i = 0; i < 4; i++) {
      TH_EQ(res[i].chunks_ok, 2);
      TH_EQ(th_lookup(c->rt, &q[i]), PROMPT_TOKENS);
    }
    th_blocks_reset(&alloc, &c->rng);
    th_blocks_take(&alloc, c->store_tab, c->nb); /* fresh tables for what follows */
    th_blocks_take(&alloc, c->load_tab, c->nb);
    for (int i = 0; i < 4; i++) {
      th_load_and_check(c->rt, c->kv, &q[i], c->load_tab, c->nb, PROMPT_TOKENS);
      th_prompt_free(&q[i]);
    }
  }
  st = th_stats(c->rt);
  assert_true(st.evictions >= c->np - cap_chunks / 2 - 2);

  tutti_runtime_close(c->rt);
  for (size_t i = 0; i < c->np; i++) th_prompt_free(&c->p[i]);
  th_blocks_free(&alloc);
  th_kv_destroy(c->kv);
  free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_evict, th_setup_dir, th_teardown_dir),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("evict", tests, NULL, NULL);
}
