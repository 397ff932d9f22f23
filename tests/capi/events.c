// SPDX-License-Identifier: Apache-2.0
/* events: KV events (option kv_events) report every chunk a store committed, with its tokens
 * and its parent's key, in the prompt's order, and every chunk evicted; a full queue drops the
 * oldest and counts them. Histograms count every layer wait and batch. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define CT 32u
#define GRANULE 16u

typedef struct key128 {
  uint64_t lo, hi;
} key128;

static key128 key_of(const uint64_t k[2]) {
  key128 r = {k[0], k[1]};
  return r;
}

static int key_eq(key128 a, key128 b) { return a.lo == b.lo && a.hi == b.hi; }

static size_t drain(tutti_runtime* rt, tutti_kv_event* ev, size_t cap, uint64_t* dropped) {
  size_t n = 0;
  TH_OK(tutti_runtime_events(rt, ev, cap, &n, dropped));
  return n;
}

static void test_stored_chunks_carry_their_tokens_and_parents(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  uint64_t rng = th_base_seed() ^ 0xE7E7;
  const char* extra[] = {"kv_events", "4096", "partial_tokens", "16", NULL};
  TH_OK(th_kv_create(&kv, &spec));
  TH_OK(th_open(&rt, env->dir, "2M", CT, extra, kv));
  th_prompt p;
  th_prompt_random(&p, &rng, 3 * CT + GRANULE + 5); /* 3 whole chunks and a partial one of 16 */
  int32_t table[8];
  for (int b = 0; b < 8; b++) table[b] = b;
  th_kv_fill(kv, &p, table, 0, p.n);
  tutti_request rq = th_request(&p, table, 8, 0, p.n); /* to its end: the tail as a partial chunk */
  tutti_result res;
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, &rq, 1, &res, 0, spec.num_layers));
  TH_EQ(res.chunks_ok, 4);

  tutti_kv_event ev[64];
  uint64_t dropped = 99;
  const size_t n = drain(rt, ev, 64, &dropped);
  TH_EQ(n, 4);
  TH_EQ(dropped, 0);
  for (size_t i = 0; i < n; i++) {
    TH_EQ(ev[i].type, TUTTI_KV_STORED);
    TH_EQ(ev[i].num_tokens, i < 3 ? CT : GRANULE);
    assert_non_null(ev[i].tokens);
    assert_memory_equal(ev[i].tokens, p.tokens + i * CT, ev[i].num_tokens * sizeof(int32_t));
    if (i > 0 && i < 3) assert_true(key_eq(key_of(ev[i].parent), key_of(ev[i - 1].key)));
  }
  /* The partial chunk follows the last whole one; the first chunk has no parent. */
  assert_true(key_eq(key_of(ev[3].parent), key_of(ev[2].key)));
  TH_EQ(ev[0].parent[0] | ev[0].parent[1], 0);
  TH_EQ(drain(rt, ev, 64, NULL), 0); /* handed out once */

  /* Room for the others: every eviction is reported, and only chunks that were stored leave. */
  const tutti_stats before = th_stats(rt);
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  size_t cap = 4096, stored = 0, removed = 0;
  tutti_kv_event* all = calloc(cap, sizeof *all);
  key128* stored_keys = calloc(cap, sizeof *stored_keys);
  assert_non_null(all);
  assert_non_null(stored_keys);
  for (int round = 0; round < 4; round++) {
    th_store_random_prompts(rt, kv, &alloc, &rng, before.slots_total / 8 + 2, 4 * CT);
    const size_t got = drain(rt, all, cap, &dropped);
    TH_EQ(dropped, 0);
    for (size_t i = 0; i < got; i++) {
      if (all[i].type == TUTTI_KV_STORED) {
        stored_keys[stored++ % cap] = key_of(all[i].key);
        continue;
      }
      TH_EQ(all[i].type, TUTTI_KV_REMOVED);
      assert_null(all[i].tokens);
      int known = 0;
      for (size_t k = 0; k < stored && k < cap && !known; k++) known = key_eq(stored_keys[k], key_of(all[i].key));
      for (size_t k = 0; k < 4 && !known; k++) known = key_eq(key_of(ev[k].key), key_of(all[i].key));
      if (!known) fail_msg("a removed chunk that was never reported stored");
      removed++;
    }
  }
  const tutti_stats after = th_stats(rt);
  TH_EQ(after.stored_chunks - before.stored_chunks, stored);
  TH_EQ(after.evictions - before.evictions, removed);
  assert_true(removed > 0);
  print_message("  %zu chunks stored and %zu evicted, each reported once\n", stored, removed);
  free(all);
  free(stored_keys);
  th_blocks_free(&alloc);
  th_prompt_free(&p);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

static void test_a_full_queue_drops_the_oldest(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  uint64_t rng = th_base_seed() ^ 0xD0;
  const char* extra[] = {"kv_events", "2", NULL};
  TH_OK(th_kv_create(&kv, &spec));
  TH_OK(th_open(&rt, env->dir, "8M", CT, extra, kv));
  th_prompt p;
  th_prompt_random(&p, &rng, 4 * CT);
  int32_t table[8];
  for (int b = 0; b < 8; b++) table[b] = b;
  th_store_prompt(rt, kv, &p, table, th_nblocks(p.n, spec.block_tokens));
  tutti_kv_event ev[8];
  uint64_t dropped = 0;
  TH_EQ(drain(rt, ev, 1, &dropped), 1); /* cap 1: one now, the other later */
  TH_EQ(dropped, 2);
  assert_memory_equal(ev[0].tokens, p.tokens + 2 * CT, CT * sizeof(int32_t));
  TH_EQ(drain(rt, ev, 8, &dropped), 1);
  TH_EQ(dropped, 0);
  assert_memory_equal(ev[0].tokens, p.tokens + 3 * CT, CT * sizeof(int32_t));
  th_prompt_free(&p);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

static void test_without_the_option_there_are_none(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  TH_OK(th_open(&rt, env->dir, "8M", CT, NULL, kv));
  tutti_kv_event ev[1];
  size_t n = 7;
  TH_ERR(TUTTI_ESTATE, tutti_runtime_events(rt, ev, 1, &n, NULL));
  TH_EQ(n, 0);
  print_message("  %s\n", tutti_last_error());
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

static uint64_t bucket_sum(const tutti_histogram* h) {
  uint64_t s = 0;
  for (int i = 0; i < TUTTI_HISTOGRAM_BUCKETS; i++) s += h->buckets[i];
  return s;
}

static void test_histograms_count_every_wait_and_batch(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  uint64_t rng = th_base_seed() ^ 0x415;
  TH_OK(th_kv_create(&kv, &spec));
  TH_OK(th_open(&rt, env->dir, "8M", CT, NULL, kv));
  th_prompt p;
  th_prompt_random(&p, &rng, 4 * CT);
  int32_t table[8];
  for (int b = 0; b < 8; b++) table[b] = b;
  th_store_prompt(rt, kv, &p, table, 8);
  const int loads = 3;
  for (int i = 0; i < loads; i++) {
    tutti_request rq = th_request(&p, table, 8, 0, p.n);
    tutti_result res;
    TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, &rq, 1, &res, 1, spec.num_layers));
    TH_EQ(res.status, 0);
  }
  tutti_histogram h[3];
  for (int k = 0; k < 3; k++) {
    TH_OK(tutti_runtime_histogram(rt, k, &h[k]));
    TH_EQ(bucket_sum(&h[k]), h[k].count);
  }
  TH_EQ(h[TUTTI_HISTOGRAM_LAYER_WAIT].count, loads * spec.num_layers);
  TH_EQ(h[TUTTI_HISTOGRAM_LOAD].count, loads);
  TH_EQ(h[TUTTI_HISTOGRAM_STORE].count, 1);
  assert_true(h[TUTTI_HISTOGRAM_LOAD].sum_ns > 0 && h[TUTTI_HISTOGRAM_STORE].sum_ns > 0);
  const tutti_stats s = th_stats(rt);
  TH_EQ(h[TUTTI_HISTOGRAM_LAYER_WAIT].sum_ns, s.layer_wait_ns);
  TH_ERR(TUTTI_EINVAL, tutti_runtime_histogram(rt, 3, &h[0]));
  th_prompt_free(&p);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

int main(void) {
  int rc = th_require_pool();
  if (rc) return rc;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_stored_chunks_carry_their_tokens_and_parents, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_a_full_queue_drops_the_oldest, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_without_the_option_there_are_none, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_histograms_count_every_wait_and_batch, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
