// SPDX-License-Identifier: Apache-2.0
/* bylayer: TUTTI_OP_STORE_BY_LAYER, the store an engine makes while it computes a prompt: a layer
 * is written only once declared ready, the batch commits after the last, and one destroyed
 * before that stores nothing. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"

#define CT 32u /* chunk tokens */
#define LAYERS 4u

static th_kv_spec spec_for_layers(void) {
  th_kv_spec s = th_spec_default();
  s.num_layers = LAYERS;
  s.num_blocks = 64;
  return s;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* The engine's layers, computed one by one: every layer's K and V tensors hold the poison until
 * reveal(l) copies the prompt's pattern in (into the cache and its shadow). */
typedef struct layers {
  th_kv* kv;
  unsigned char* k[LAYERS];
  unsigned char* v[LAYERS];
  unsigned char* k_shadow[LAYERS];
  unsigned char* v_shadow[LAYERS];
} layers;

static unsigned char* copy_of(const void* from, size_t n) {
  unsigned char* p = malloc(n);
  assert_non_null(p);
  memcpy(p, from, n);
  return p;
}

static void layers_init(layers* s, th_kv* kv, const th_prompt* p, const int32_t* table, size_t nb) {
  s->kv = kv;
  th_kv_poison(kv);
  th_kv_fill(kv, p, table, 0, p->n);
  for (uint32_t l = 0; l < LAYERS; l++) {
    s->k[l] = copy_of(kv->k[l], kv->tensor_bytes);
    s->v[l] = copy_of(kv->v[l], kv->tensor_bytes);
    s->k_shadow[l] = copy_of(kv->k_shadow[l], kv->tensor_bytes);
    s->v_shadow[l] = copy_of(kv->v_shadow[l], kv->tensor_bytes);
    th_kv_poison_layer(kv, l, table, nb);
  }
}

static void reveal(layers* s, uint32_t l) {
  const size_t n = s->kv->tensor_bytes;
  memcpy(s->kv->k[l], s->k[l], n);
  memcpy(s->kv->v[l], s->v[l], n);
  memcpy(s->kv->k_shadow[l], s->k_shadow[l], n);
  memcpy(s->kv->v_shadow[l], s->v_shadow[l], n);
}

static void layers_free(layers* s) {
  for (uint32_t l = 0; l < LAYERS; l++) free(s->k[l]), free(s->v[l]), free(s->k_shadow[l]), free(s->v_shadow[l]);
}

/* Layers declared ready in `order`, each only after its bytes are in place: what was stored and
 * loaded back is the prompt's KV in every layer, never the poison that was there before. The
 * pauses give a store that did not wait time to write the poison. */
static void store_in_order(void** state, const uint32_t* order) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x1A7E ^ order[0];
  th_kv_spec spec = spec_for_layers();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_prompt p;
  th_prompt_random(&p, &rng, 4 * CT + 5);
  const size_t nb = th_nblocks(p.n, spec.block_tokens);
  int32_t table[64], load_table[64];
  th_blocks_take(&alloc, table, nb);
  th_blocks_take(&alloc, load_table, nb);
  layers s;
  layers_init(&s, kv, &p, table, nb);

  tutti_batch* b = NULL;
  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE_BY_LAYER, &b));
  tutti_request r = th_request(&p, table, nb, 0, TUTTI_TOKENS_ALL);
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_OK(tutti_batch_submit(b));
  for (uint32_t i = 0; i < LAYERS; i++) {
    sleep_ms(20);
    TH_EQ(th_lookup(rt, &p), 0); /* nothing is visible before the last layer is written */
    uint32_t written = 99;
    int done = 1;
    TH_OK(tutti_batch_poll(b, &written, &done));
    TH_EQ(done, 0);
    if (i == 0) TH_EQ(written, 0); /* no layer is written before it is ready */
    reveal(&s, order[i]);
    TH_OK(tutti_batch_layer_ready(b, order[i], NULL));
  }
  TH_OK(tutti_batch_wait(b));
  tutti_result res;
  TH_OK(tutti_batch_result(b, 0, &res));
  TH_EQ(res.chunks_ok, 4);
  tutti_batch_destroy(b);
  TH_EQ(th_lookup(rt, &p), 4 * CT);

  th_load_and_check(rt, kv, &p, load_table, nb, 4 * CT);
  layers_free(&s);
  th_prompt_free(&p);
  th_blocks_free(&alloc);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

static void test_in_order(void** state) {
  const uint32_t order[LAYERS] = {0, 1, 2, 3};
  store_in_order(state, order);
}

/* Layers declared out of order: none is written before it is ready (the poison would show),
 * and the batch commits after the last. */
static void test_out_of_order(void** state) {
  const uint32_t order[LAYERS] = {3, 1, 2, 0};
  store_in_order(state, order);
}

/* An engine that aborts the request mid-prompt destroys the batch: nothing is stored, nothing
 * hangs, and the same prompt can be stored again. */
static void test_destroyed_before_the_last_layer(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xAB0;
  th_kv_spec spec = spec_for_layers();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_prompt p;
  th_prompt_random(&p, &rng, 3 * CT);
  const size_t nb = th_nblocks(p.n, spec.block_tokens);
  int32_t table[64], load_table[64];
  th_blocks_take(&alloc, table, nb);
  th_blocks_take(&alloc, load_table, nb);
  th_kv_fill(kv, &p, table, 0, p.n);

  for (uint32_t declared = 0; declared < LAYERS; declared++) {
    tutti_batch* b = NULL;
    TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE_BY_LAYER, &b));
    tutti_request r = th_request(&p, table, nb, 0, TUTTI_TOKENS_ALL);
    TH_OK(tutti_batch_add(b, &r, 1));
    TH_OK(tutti_batch_submit(b));
    for (uint32_t l = 0; l < declared; l++) TH_OK(tutti_batch_layer_ready(b, l, NULL));
    tutti_batch_destroy(b);
    TH_EQ(th_lookup(rt, &p), 0);
  }
  /* A runtime closed under a store with layers undeclared: the close returns, nothing stored. */
  tutti_batch* open_batch = NULL;
  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE_BY_LAYER, &open_batch));
  tutti_request r = th_request(&p, table, nb, 0, TUTTI_TOKENS_ALL);
  TH_OK(tutti_batch_add(open_batch, &r, 1));
  TH_OK(tutti_batch_submit(open_batch));
  TH_OK(tutti_batch_layer_ready(open_batch, 0, NULL));
  tutti_runtime_close(rt);
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait(open_batch)); /* cancelled: its chunks failed */
  tutti_batch_destroy(open_batch);
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  TH_EQ(th_lookup(rt, &p), 0);
  tutti_result res;
  TH_OK(th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 0, LAYERS));
  TH_EQ(res.chunks_ok, 3);
  th_load_and_check(rt, kv, &p, load_table, nb, 3 * CT);
  th_prompt_free(&p);
  th_blocks_free(&alloc);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

/* Misuse is refused with a reason, and changes nothing. */
static void test_refusals(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0x8EF;
  th_kv_spec spec = spec_for_layers();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_prompt p;
  th_prompt_random(&p, &rng, 2 * CT);
  const size_t nb = th_nblocks(p.n, spec.block_tokens);
  int32_t table[64];
  th_blocks_take(&alloc, table, nb);
  th_kv_fill(kv, &p, table, 0, p.n);
  tutti_request r = th_request(&p, table, nb, 0, TUTTI_TOKENS_ALL);

  TH_ERR(TUTTI_EINVAL, tutti_batch_layer_ready(NULL, 0, NULL));
  tutti_batch* b = NULL;
  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE, &b));
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_OK(tutti_batch_submit(b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_layer_ready(b, 0, NULL)); /* a plain store */
  TH_OK(tutti_batch_wait(b));
  tutti_batch_destroy(b);

  TH_OK(tutti_batch_create(rt, TUTTI_OP_STORE_BY_LAYER, &b));
  TH_OK(tutti_batch_add(b, &r, 1));
  TH_ERR(TUTTI_ESTATE, tutti_batch_layer_ready(b, 0, NULL)); /* before submit */
  uint32_t written = 0;
  int done = 0;
  TH_ERR(TUTTI_ESTATE, tutti_batch_poll(b, &written, &done));
  TH_OK(tutti_batch_submit(b));
  TH_ERR(TUTTI_EINVAL, tutti_batch_layer_ready(b, LAYERS, NULL));
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait(b));          /* it would wait for the caller */
  TH_ERR(TUTTI_ESTATE, tutti_batch_wait_layer(b, 0)); /* not declared */
  for (uint32_t l = 0; l < LAYERS; l++) TH_OK(tutti_batch_layer_ready(b, l, NULL));
  TH_ERR(TUTTI_EINVAL, tutti_batch_layer_ready(b, 1, NULL)); /* twice */
  TH_OK(tutti_batch_wait(b));
  TH_OK(tutti_batch_poll(b, &written, &done));
  TH_EQ(written, LAYERS);
  TH_EQ(done, 1);
  TH_ERR(TUTTI_EINVAL, tutti_batch_poll(b, NULL, &done));
  TH_ERR(TUTTI_EINVAL, tutti_batch_poll(NULL, &written, &done));
  tutti_batch_destroy(b);

  TH_ERR(TUTTI_EINVAL, tutti_batch_create(rt, (tutti_op)3, &b));
  th_prompt_free(&p);
  th_blocks_free(&alloc);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_in_order, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_out_of_order, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_destroyed_before_the_last_layer, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_refusals, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
