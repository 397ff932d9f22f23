// SPDX-License-Identifier: Apache-2.0
/* tier: the DRAM tier above the pool (option dram_tier). Loads it serves must hand back the
 * stored bytes, as loads from the pool do; stores go through it (write-through), so a chunk
 * stored again over an evicted one's slot is never served stale; a tier smaller than the
 * working set evicts and still loads right; backends it cannot sit in front of say so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

static const char* const kBackends[] = {"uring", "posix"};

/* Layers x chunks of a prompt: the chunk-layer loads one full load makes. */
static uint64_t extents_of(const th_kv* kv, size_t tokens, unsigned chunk_tokens) {
  return (uint64_t)kv->spec.num_layers * (tokens / chunk_tokens);
}

/* A tier that holds everything: the store fills it, every load is a hit, bytes are right, both
 * direct to the blocks and staged. */
static void test_hits(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x71u;
  for (int b = 0; b < 2; b++)
    for (int direct = 0; direct < 2; direct++) {
      th_kv_spec spec = th_spec_default();
      spec.head_dim = 128; /* 4 KiB blocks: direct I/O possible */
      th_kv* kv = NULL;
      TH_OK(th_kv_create(&kv, &spec));
      char dir[1100];
      snprintf(dir, sizeof dir, "%s/%s-%d", env->dir, kBackends[b], direct);
      TH_EQ(mkdir(dir, 0700), 0);
      const char* extra[] = {"backend", kBackends[b], "dram_tier", "16M", "direct_to_blocks", direct ? "on" : "off", NULL};
      tutti_runtime* rt = NULL;
      TH_OK(th_open(&rt, dir, "64M", 64, extra, kv));
      th_prompt p;
      th_prompt_random(&p, &rng, 256);
      th_blocks blocks;
      th_blocks_init(&blocks, spec.num_blocks, &rng);
      int32_t t1[16], t2[16];
      th_blocks_take(&blocks, t1, 16);
      th_blocks_take(&blocks, t2, 16);
      th_store_prompt(rt, kv, &p, t1, 16);
      tutti_stats s0 = th_stats(rt);
      th_load_and_check(rt, kv, &p, t2, 16, 256);
      tutti_stats s1 = th_stats(rt);
      TH_EQ(s1.tier_hits - s0.tier_hits, extents_of(kv, 256, 64));
      TH_EQ(s1.tier_misses - s0.tier_misses, 0);
      tutti_runtime_close(rt);
      th_blocks_free(&blocks);
      th_prompt_free(&p);
      th_kv_destroy(kv);
    }
}

/* A tier of a few extents under several prompts: evictions, misses read from the pool (and
 * kept), every load right; the counters add up to the loads made. */
static void test_evictions(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x72u;
  th_kv_spec spec = th_spec_default();
  spec.num_blocks = 256;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  /* One extent: 64 tokens x 2 heads x 64 dims x 2 bytes, K and V = 32 KiB; the tier holds 5. */
  const char* extra[] = {"backend", "uring", "dram_tier", "160K", NULL};
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", 64, extra, kv));
  enum { PROMPTS = 4, TOKENS = 256, NB = TOKENS / 16 };
  th_prompt p[PROMPTS];
  int32_t table[PROMPTS][NB], into[NB];
  th_blocks blocks;
  th_blocks_init(&blocks, spec.num_blocks, &rng);
  for (int i = 0; i < PROMPTS; i++) {
    th_prompt_random(&p[i], &rng, TOKENS);
    th_blocks_take(&blocks, table[i], NB);
    th_store_prompt(rt, kv, &p[i], table[i], NB);
  }
  th_blocks_take(&blocks, into, NB);
  tutti_stats s0 = th_stats(rt);
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < PROMPTS; i++) th_load_and_check(rt, kv, &p[i], into, NB, TOKENS);
  tutti_stats s1 = th_stats(rt);
  TH_EQ((s1.tier_hits - s0.tier_hits) + (s1.tier_misses - s0.tier_misses), 2 * PROMPTS * extents_of(kv, TOKENS, 64));
  if (s1.tier_misses == s0.tier_misses) fail_msg("a tier of 5 extents under 32 served every load");
  tutti_runtime_close(rt);
  th_blocks_free(&blocks);
  for (int i = 0; i < PROMPTS; i++) th_prompt_free(&p[i]);
  th_kv_destroy(kv);
}

/* A slot reused by another chunk: the tier must not hand back the old chunk's bytes. A pool of
 * one prompt's chunks evicts the first prompt when a second is stored; the tier, large enough
 * for both, saw both stores: loading the second must give its bytes, and the first is gone. */
static void test_slot_reuse(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x73u;
  th_kv_spec spec = th_spec_default();
  spec.num_blocks = 1024;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  const char* extra[] = {"backend", "posix", "dram_tier", "8M", NULL};
  tutti_runtime* rt = NULL;
  /* a pool of a few chunks */
  TH_OK(th_open(&rt, env->dir, "2M", 64, extra, kv));
  const tutti_stats s = th_stats(rt);
  th_prompt a, b;
  th_prompt_random(&a, &rng, 64 * s.slots_total);
  th_prompt_random(&b, &rng, 64 * s.slots_total);
  const size_t nb = th_nblocks(a.n, 16);
  int32_t* ta = malloc(nb * sizeof *ta);
  int32_t* tb = malloc(nb * sizeof *tb);
  th_blocks blocks;
  th_blocks_init(&blocks, spec.num_blocks, &rng);
  th_blocks_take(&blocks, ta, nb);
  th_blocks_take(&blocks, tb, nb);
  th_store_prompt(rt, kv, &a, ta, nb);
  th_store_prompt(rt, kv, &b, tb, nb); /* takes every slot a had */
  TH_EQ(th_lookup(rt, &a), 0);
  th_load_and_check(rt, kv, &b, ta, nb, b.n);
  tutti_runtime_close(rt);
  th_blocks_free(&blocks);
  free(ta);
  free(tb);
  th_prompt_free(&a);
  th_prompt_free(&b);
  th_kv_destroy(kv);
}

static void test_refusals(void** state) {
  th_env* env = *state;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  const char* tiny[] = {"dram_tier", "4K", NULL}; /* smaller than one extent */
  TH_ERR(TUTTI_EINVAL, th_open(&rt, env->dir, "16M", 64, tiny, kv));
  tutti_options* o = NULL;
  TH_OK(tutti_options_create(&o));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "dram_tier", "lots"));
  tutti_options_destroy(o);
  /* An old caller's smaller tutti_stats still works; a wrong size does not. */
  const char* ok[] = {"dram_tier", "1M", NULL};
  TH_OK(th_open(&rt, env->dir, "16M", 64, ok, kv));
  tutti_stats st;
  memset(&st, 0xab, sizeof st);
  st.struct_size = (uint32_t)offsetof(tutti_stats, tier_hits);
  TH_OK(tutti_runtime_stats(rt, &st));
  TH_EQ(st.tier_hits, 0xababababababababull);
  st.struct_size = 12;
  TH_ERR(TUTTI_EINVAL, tutti_runtime_stats(rt, &st));
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_hits, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_evictions, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_slot_reuse, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_refusals, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
