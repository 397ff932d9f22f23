// SPDX-License-Identifier: Apache-2.0
/* mla: K-only KV caches (TUTTI_KV_K_ONLY: one latent vector per token, as MLA models keep),
 * stored and loaded byte-exact on each CPU backend, straight into the blocks and through
 * staging; a pool made for them is refused to a K+V cache of the same sizes, and the other way
 * round. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

#define LAYERS 3u
#define BLOCKS 64u
#define LATENT 576u /* DeepSeek-V3: 512 latent + 64 rope elements */
#define CT 64u

typedef struct mla_kv {
  uint8_t* mem; /* per layer: BLOCKS x bt x LATENT x 2 bytes, then as much for a V (K+V caches) */
  size_t layer_bytes;
  void* k[LAYERS];
  tutti_kv_layout layout;
} mla_kv;

static void mla_create(mla_kv* kv, uint32_t bt, uint32_t flags) {
  TH_OK(tutti_kv_layout_init(&kv->layout, LAYERS, BLOCKS, bt, 1, LATENT, 2, 0));
  kv->layer_bytes = (size_t)BLOCKS * kv->layout.block_stride;
  kv->layer_bytes = 2 * kv->layer_bytes;
  kv->mem = aligned_alloc(4096, LAYERS * kv->layer_bytes);
  assert_non_null(kv->mem);
  memset(kv->mem, 0xA5, LAYERS * kv->layer_bytes);
  for (uint32_t l = 0; l < LAYERS; l++) kv->k[l] = kv->mem + l * kv->layer_bytes;
  kv->layout.k_base = kv->k;
  kv->layout.v_offset = kv->layer_bytes / 2; /* ignored with TUTTI_KV_K_ONLY */
  kv->layout.flags = flags;
}

/* The bytes of token t (in the blocks of `table`) of layer l. */
static uint8_t* row(const mla_kv* kv, const int32_t* table, uint32_t l, size_t t) {
  uint32_t bt = kv->layout.block_tokens;
  return kv->mem + l * kv->layer_bytes + (size_t)table[t / bt] * kv->layout.block_stride +
         (t % bt) * kv->layout.token_stride;
}

static int open_rt(tutti_runtime** rt, const char* dir, const char* backend, const char* direct,
                   const tutti_kv_layout* l) {
  const char* extra[] = {"backend", backend, "direct_to_blocks", direct, NULL};
  tutti_options* o = NULL;
  int rc = th_options(&o, dir, "64M", CT, extra);
  if (!rc) rc = tutti_runtime_open(o, rt);
  tutti_options_destroy(o);
  if (!rc) rc = tutti_runtime_register_kv(*rt, l);
  return rc;
}

static void roundtrip(const char* dir, const char* backend, const char* direct, uint32_t bt, uint64_t seed) {
  mla_kv kv;
  mla_create(&kv, bt, TUTTI_KV_K_ONLY);
  tutti_runtime* rt = NULL;
  TH_OK(open_rt(&rt, dir, backend, direct, &kv.layout));
  uint64_t rng = th_base_seed() ^ seed;
  th_prompt p;
  th_prompt_random(&p, &rng, 2 * CT + 40);
  int32_t st[64], ld[64];
  const size_t nb = th_nblocks(p.n, bt);
  for (size_t i = 0; i < nb; i++) st[i] = (int32_t)i, ld[i] = (int32_t)(BLOCKS - 1 - i);
  for (uint32_t l = 0; l < LAYERS; l++)
    for (size_t t = 0; t < p.n; t++)
      for (uint32_t b = 0; b < 2 * LATENT; b++) row(&kv, st, l, t)[b] = (uint8_t)th_rand_below(&rng, 256);

  tutti_request r = th_request(&p, st, nb, 0, p.n);
  tutti_result res;
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 1, LAYERS));
  TH_EQ(res.tokens, 2 * CT + 32); /* whole chunks and a partial one of 32 */
  TH_EQ(th_lookup(rt, &p), 2 * CT + 32);
  tutti_stats s = th_stats(rt);
  /* a slot holds K alone: one chunk-layer is the chunk's latents, 4 KiB aligned */
  const uint64_t k_bytes = ((uint64_t)CT * LATENT * 2 + 4095) / 4096 * 4096;
  TH_EQ(s.bytes_written, 3 * LAYERS * k_bytes);

  /* load [5, 2*CT + 30) into other blocks: exactly those rows change */
  uint8_t* before = malloc(LAYERS * kv.layer_bytes);
  memcpy(before, kv.mem, LAYERS * kv.layer_bytes);
  r = th_request(&p, ld, nb, 5, 2 * CT + 30);
  TH_OK(th_batch_run(rt, TUTTI_OP_LOAD, &r, 1, &res, 1, LAYERS));
  TH_EQ(res.tokens, 2 * CT + 25);
  for (uint32_t l = 0; l < LAYERS; l++)
    for (size_t t = 5; t < 2 * CT + 30; t++) {
      if (memcmp(row(&kv, ld, l, t), row(&kv, st, l, t), 2 * LATENT) != 0)
        fail_msg("%s %s bt %u: layer %u token %zu differs from what was stored", backend, direct, bt, l, t);
      memcpy(before + (row(&kv, ld, l, t) - kv.mem), row(&kv, st, l, t), 2 * LATENT);
    }
  if (memcmp(before, kv.mem, LAYERS * kv.layer_bytes) != 0)
    fail_msg("%s %s bt %u: bytes outside the loaded rows changed", backend, direct, bt);
  free(before);
  tutti_runtime_close(rt);

  /* the pool is a K-only pool: a K+V cache of the same sizes is another shape */
  mla_kv both;
  mla_create(&both, bt, 0);
  TH_EQ(open_rt(&rt, dir, backend, direct, &both.layout), TUTTI_ELAYOUT);
  tutti_runtime_close(rt);
  rt = NULL;
  both.layout.flags = 2; /* no such flag */
  TH_EQ(open_rt(&rt, dir, backend, direct, &both.layout), TUTTI_EINVAL);
  tutti_runtime_close(rt);
  free(both.mem);
  th_prompt_free(&p);
  free(kv.mem);
}

static void test_k_only(void** state) {
  th_env* env = *state;
  static const struct {
    const char *backend, *direct;
    uint32_t bt;
  } cases[] = {{"uring", "auto", 32}, {"posix", "off", 32}, {"uring", "off", 16}, {"posix", "auto", 24}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%zu", env->dir, i);
    TH_OK(mkdir(dir, 0700) == 0 ? 0 : -1);
    roundtrip(dir, cases[i].backend, cases[i].direct, cases[i].bt, 0x3A11 + i);
  }
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_k_only, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
