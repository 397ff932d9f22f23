// SPDX-License-Identifier: Apache-2.0
/* prefix: partial prefix hits, divergence inside a chunk, salts and namespaces never mix. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define CT 32u

static size_t lookup_salt(tutti_runtime* rt, const th_prompt* p, size_t n, const void* salt,
                          size_t salt_len) {
  size_t cached = (size_t)-1;
  TH_OK(tutti_lookup(rt, p->tokens, n, salt, salt_len, &cached));
  return cached;
}

static void test_prefix_hits(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xC1;
  th_kv_spec spec = th_spec_default();
  spec.num_layers = 3;
  spec.block_tokens = 16;
  spec.num_blocks = 160;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));

  th_prompt a, longer, b2, c, d, as;
  th_prompt_random(&a, &rng, 5 * CT + 10);
  th_prompt_extend(&longer, &a, a.n, &rng, a.n + 100); /* a, then 100 more tokens */
  th_prompt_extend(&b2, &a, 100, &rng, 200);            /* shares 3 full chunks */
  th_prompt_extend(&c, &a, 2 * CT + 6, &rng, a.n);      /* diverges inside chunk 2 */
  th_prompt_extend(&d, &a, 0, &rng, a.n);               /* diverges at token 0 */
  th_prompt_init(&as, a.tokens, a.n, "tenant-1", 8);    /* same tokens, salted */

  int32_t ta[16], tas[16], tl[32];
  size_t nba = th_nblocks(a.n, 16);
  th_blocks_take(&alloc, ta, nba);
  th_blocks_take(&alloc, tas, nba);
  th_store_prompt(rt, kv, &a, ta, nba);

  TH_EQ(th_lookup(rt, &a), 5 * CT);
  TH_EQ(lookup_salt(rt, &a, 100, NULL, 0), 3 * CT);
  TH_EQ(lookup_salt(rt, &a, CT - 1, NULL, 0), 0);
  TH_EQ(lookup_salt(rt, &a, CT, NULL, 0), CT);
  TH_EQ(lookup_salt(rt, &a, a.n, "xyz", 0), 5 * CT); /* salt_len 0: no salt */
  TH_EQ(th_lookup(rt, &longer), 5 * CT);
  TH_EQ(th_lookup(rt, &b2), 3 * CT);
  TH_EQ(th_lookup(rt, &c), 2 * CT);
  TH_EQ(th_lookup(rt, &d), 0);
  TH_EQ(th_lookup(rt, &as), 0);
  TH_EQ(lookup_salt(rt, &a, a.n, "tenant-2", 8), 0);

  /* load each hit into fresh blocks and compare with the bytes stored for a */
  const th_prompt* hits[3] = {&longer, &b2, &c};
  const size_t hit_tokens[3] = {5 * CT, 3 * CT, 2 * CT};
  for (int i = 0; i < 3; i++) {
    size_t nb = th_nblocks(hits[i]->n, 16);
    th_blocks_take(&alloc, tl, nb);
    th_load_and_check(rt, kv, hits[i], tl, nb, hit_tokens[i]);
  }

  /* asking c for one chunk more than its hit: chunk 2 is missing */
  {
    size_t nb = th_nblocks(c.n, 16);
    th_blocks_take(&alloc, tl, nb);
    th_kv_poison_blocks(kv, tl, nb);
    tutti_request r = th_request(&c, tl, nb, 0, 3 * CT);
    tutti_result res;
    TH_EQ(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 0, 0), TUTTI_ENOENT);
    assert_true(th_batch_error()[0] != '\0');
    TH_EQ(res.status, TUTTI_ENOENT);
    TH_EQ(res.chunks, 3);
    TH_EQ(res.chunks_ok, 2);
    TH_EQ(res.tokens, 2 * CT);
    th_kv_expect(kv, &c, tl, 0, 2 * CT);
    th_kv_dontcare(kv, &c, tl, 2 * CT, 3 * CT);
    TH_CHECK(kv, &c, tl, 0, 2 * CT);
    TH_VERIFY_ALL(kv);
  }

  /* the salted copy is a different entry with different bytes */
  th_store_prompt(rt, kv, &as, tas, nba);
  TH_EQ(th_lookup(rt, &as), 5 * CT);
  TH_EQ(lookup_salt(rt, &a, a.n, "tenant-1", 7), 0); /* a prefix of the salt is another salt */
  TH_EQ(th_lookup(rt, &a), 5 * CT);
  th_blocks_take(&alloc, tl, nba);
  th_load_and_check(rt, kv, &as, tl, nba, 5 * CT);
  th_load_and_check(rt, kv, &a, tl, nba, 5 * CT);
  th_load_and_check(rt, kv, &as, tl, nba, 5 * CT);

  /* a prefix-only store of the longer prompt adds its 6th chunk to the chain */
  {
    size_t nb = th_nblocks(longer.n, 16);
    int32_t t6[32];
    th_blocks_reset(&alloc, &rng);
    th_blocks_take(&alloc, t6, nb);
    th_store_prompt(rt, kv, &longer, t6, nb);
    TH_EQ(th_lookup(rt, &longer), longer.n / CT * CT);
    th_blocks_take(&alloc, tl, nb);
    th_load_and_check(rt, kv, &longer, tl, nb, longer.n / CT * CT);
  }

  tutti_runtime_close(rt);
  th_prompt_free(&a);
  th_prompt_free(&longer);
  th_prompt_free(&b2);
  th_prompt_free(&c);
  th_prompt_free(&d);
  th_prompt_free(&as);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* The same tokens under two namespaces are two entries of one pool. */
static void test_namespace(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xC2;
  th_kv_spec spec = th_spec_default();
  spec.num_blocks = 64;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);

  th_prompt pa, pb;
  th_prompt_random(&pa, &rng, 4 * CT);
  /* pb: same tokens, no salt in its requests, but its pattern seeded differently so that
   * bytes of namespace B can never pass for bytes of namespace A */
  th_prompt_init(&pb, pa.tokens, pa.n, "ns-b", 4);
  pb.salt_len = 0;
  size_t nb = th_nblocks(pa.n, spec.block_tokens);
  int32_t st[16], ld[16];
  th_blocks_take(&alloc, st, nb);
  th_blocks_take(&alloc, ld, nb);

  const char* ns_a[] = {"namespace", "model-a", NULL};
  const char* ns_b[] = {"namespace", "model-b", NULL};
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, ns_a, kv));
  th_store_prompt(rt, kv, &pa, st, nb);
  TH_EQ(th_lookup(rt, &pa), 4 * CT);
  tutti_runtime_close(rt);

  TH_OK(th_open(&rt, env->dir, "64M", CT, ns_b, kv));
  TH_EQ(th_lookup(rt, &pa), 0);
  th_store_prompt(rt, kv, &pb, st, nb);
  TH_EQ(th_lookup(rt, &pb), 4 * CT);
  th_load_and_check(rt, kv, &pb, ld, nb, 4 * CT);
  tutti_runtime_close(rt);

  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv)); /* the default namespace "" */
  TH_EQ(th_lookup(rt, &pa), 0);
  tutti_runtime_close(rt);

  TH_OK(th_open(&rt, env->dir, "64M", CT, ns_a, kv));
  TH_EQ(th_lookup(rt, &pa), 4 * CT);
  th_load_and_check(rt, kv, &pa, ld, nb, 4 * CT);
  tutti_runtime_close(rt);

  th_prompt_free(&pa);
  th_prompt_free(&pb);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_prefix_hits, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_namespace, th_setup_dir, th_teardown_dir),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("prefix", tests, NULL, NULL);
}
