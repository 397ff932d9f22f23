// SPDX-License-Identifier: Apache-2.0
/* lease: tutti_lookup_lease pins what it found, so stores that need room evict other chunks
 * first and a later load of the leased prefix cannot miss; released or expired, the chunks are
 * evictable again. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"

#define CT 32u /* chunk tokens */

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

typedef struct fixture {
  th_kv_spec spec;
  th_kv* kv;
  tutti_runtime* rt;
  th_blocks alloc;
  uint64_t rng;
  th_prompt leased;
  int32_t leased_table[64];
  size_t leased_blocks;
} fixture;

/* A pool far smaller than the prompts stored below, holding `leased` (4 chunks) first. */
static void setup(fixture* f, const char* dir, uint64_t seed) {
  f->rng = th_base_seed() ^ seed;
  f->spec = th_spec_default();
  f->spec.num_blocks = 256;
  TH_OK(th_kv_create(&f->kv, &f->spec));
  TH_OK(th_open(&f->rt, dir, "2M", CT, NULL, f->kv)); /* a few dozen chunks */
  th_blocks_init(&f->alloc, f->spec.num_blocks, &f->rng);
  th_prompt_random(&f->leased, &f->rng, 4 * CT);
  f->leased_blocks = th_nblocks(f->leased.n, f->spec.block_tokens);
  th_blocks_take(&f->alloc, f->leased_table, f->leased_blocks);
  th_store_prompt(f->rt, f->kv, &f->leased, f->leased_table, f->leased_blocks);
}

/* Stores other prompts of 4 chunks, more than the pool holds. */
static void store_others(fixture* f) {
  th_store_random_prompts(f->rt, f->kv, &f->alloc, &f->rng, th_stats(f->rt).slots_total / 4 + 4, 4 * CT);
}

static void teardown(fixture* f) {
  th_prompt_free(&f->leased);
  th_blocks_free(&f->alloc);
  tutti_runtime_close(f->rt);
  th_kv_destroy(f->kv);
}

static void test_a_leased_prefix_survives_stores_that_need_room(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x1EA5E);
  size_t hit = 0;
  tutti_lease* lease = NULL;
  TH_OK(tutti_lookup_lease(f.rt, f.leased.tokens, f.leased.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  store_others(&f);
  TH_EQ(th_stats(f.rt).evictions > 0, 1); /* the pool did evict, other chunks */
  TH_EQ(th_lookup(f.rt, &f.leased), 4 * CT);
  int32_t into[64];
  th_blocks_reset(&f.alloc, &f.rng);
  th_blocks_take(&f.alloc, into, f.leased_blocks);
  th_load_and_check(f.rt, f.kv, &f.leased, into, f.leased_blocks, 4 * CT);
  tutti_lease_release(lease);
  store_others(&f);
  TH_EQ(th_lookup(f.rt, &f.leased), 0); /* released: evictable like any chunk */
  teardown(&f);
}

static void test_an_expired_lease_pins_nothing(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0xE8F1);
  size_t hit = 0;
  tutti_lease* lease = NULL;
  TH_OK(tutti_lookup_lease(f.rt, f.leased.tokens, f.leased.n, NULL, 0, 20, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  sleep_ms(60);
  store_others(&f);
  TH_EQ(th_lookup(f.rt, &f.leased), 0);
  tutti_lease_release(lease); /* expired: releasing it is still required, and harmless */
  teardown(&f);
}

static void test_misses_refusals_and_close(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x0DD);
  size_t hit = 99;
  tutti_lease* lease = NULL;
  th_prompt other;
  th_prompt_random(&other, &f.rng, 2 * CT);
  TH_OK(tutti_lookup_lease(f.rt, other.tokens, other.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 0);
  if (lease == NULL) fail_msg("a miss still gives a lease");
  tutti_lease_release(lease);
  tutti_lease_release(NULL);
  TH_ERR(TUTTI_EINVAL, tutti_lookup_lease(NULL, other.tokens, other.n, NULL, 0, 0, &hit, &lease));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_lease(f.rt, NULL, 5, NULL, 0, 0, &hit, &lease));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_lease(f.rt, other.tokens, other.n, NULL, 0, 0, NULL, &lease));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_lease(f.rt, other.tokens, other.n, NULL, 0, 0, &hit, NULL));
  /* A lease may outlive the runtime's close. */
  TH_OK(tutti_lookup_lease(f.rt, f.leased.tokens, f.leased.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  th_prompt_free(&other);
  teardown(&f);
  tutti_lease_release(lease);
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_a_leased_prefix_survives_stores_that_need_room, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_an_expired_lease_pins_nothing, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_misses_refusals_and_close, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
