/* threads: four threads store, look up and load their own and shared prompts on one runtime. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define CT 32u
#define NTHREADS 4
#define ITERS 6
#define MAXB 12 /* blocks per table: prompts up to 5 chunks + tail of 16-token blocks */

typedef struct worker {
  int id;
  tutti_runtime* rt;
  th_kv* kv;
  const th_prompt* shared; /* NULL: private prompts only */
  int32_t st[MAXB], ld[MAXB];
  char err[600];
  int loads, stores;
} worker;

#define W_FAIL(w, ...)                                     \
  do {                                                     \
    snprintf((w)->err, sizeof (w)->err, __VA_ARGS__);      \
    return;                                                \
  } while (0)

static void store_load(worker* w, const th_prompt* p, int iter) {
  const th_kv_spec* s = &w->kv->spec;
  size_t nb = th_nblocks(p->n, s->block_tokens);
  size_t full = p->n / CT * CT;
  tutti_result res;
  char msg[512];
  memset(&res, 0, sizeof res);

  th_kv_fill(w->kv, p, w->st, 0, p->n);
  tutti_request r = th_request(p, w->st, nb, 0, TUTTI_TOKENS_ALL);
  int rc = th_batch_run(w->rt, TUTTI_OP_STORE, &r, 1, &res, iter & 1, s->num_layers);
  if (rc != 0 || res.status != 0 || res.chunks_ok != full / CT)
    W_FAIL(w, "thread %d iter %d: store -> %d (%s), status %d, %u/%u chunks: %s", w->id, iter,
           rc, tutti_strerror(rc), res.status, res.chunks_ok, res.chunks, tutti_last_error());
  w->stores++;

  size_t cached = 0;
  rc = tutti_lookup(w->rt, p->tokens, p->n, p->salt_len ? p->salt : NULL, p->salt_len, &cached);
  if (rc != 0 || cached != full)
    W_FAIL(w, "thread %d iter %d: lookup -> %d, %zu of %zu tokens", w->id, iter, rc, cached, full);

  th_kv_poison_blocks(w->kv, w->ld, nb);
  r = th_request(p, w->ld, nb, 0, TUTTI_TOKENS_ALL);
  rc = th_batch_run(w->rt, TUTTI_OP_LOAD, &r, 1, &res, !(iter & 1), s->num_layers);
  if (rc != 0 || res.status != 0 || res.tokens != full)
    W_FAIL(w, "thread %d iter %d: load -> %d (%s), status %d, %zu of %zu tokens: %s", w->id,
           iter, rc, tutti_strerror(rc), res.status, res.tokens, full, tutti_last_error());
  size_t bad = th_kv_check(w->kv, p, w->ld, 0, full, 0, s->num_layers, msg, sizeof msg);
  if (bad) W_FAIL(w, "thread %d iter %d: %zu rows differ: %s", w->id, iter, bad, msg);
  th_kv_expect(w->kv, p, w->ld, 0, full); /* the shadow follows (own blocks only) */
  w->loads++;
}

static void* worker_main(void* arg) {
  worker* w = arg;
  uint64_t rng = th_base_seed() ^ th_mix64(0x7700u + (uint64_t)w->id);
  for (int iter = 0; iter < ITERS && !w->err[0]; iter++) {
    th_prompt p;
    th_prompt_random(&p, &rng, CT * (1 + th_rand_below(&rng, 5)) + th_rand_below(&rng, 16));
    if (iter == 2) { /* one salted prompt per thread */
      th_prompt tmp = p;
      char salt[8];
      snprintf(salt, sizeof salt, "t%d", w->id);
      th_prompt_init(&p, tmp.tokens, tmp.n, salt, strlen(salt));
      th_prompt_free(&tmp);
    }
    store_load(w, &p, iter);
    th_prompt_free(&p);
    if (w->shared && !w->err[0]) store_load(w, w->shared, iter); /* the same chunks */
  }
  return NULL;
}

static void run_threads(th_env* env, int with_shared) {
  uint64_t rng = th_base_seed() ^ 0x71;
  th_kv_spec spec = th_spec_default();
  spec.num_layers = 3;
  spec.num_blocks = NTHREADS * 2 * MAXB + 4;
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  tutti_runtime* rt = NULL;
  TH_OK(th_open(&rt, env->dir, "64M", CT, NULL, kv));

  th_prompt shared;
  th_prompt_random(&shared, &rng, 4 * CT + 3);
  worker w[NTHREADS];
  pthread_t tid[NTHREADS];
  memset(w, 0, sizeof w);
  for (int i = 0; i < NTHREADS; i++) {
    w[i].id = i;
    w[i].rt = rt;
    w[i].kv = kv;
    w[i].shared = with_shared ? &shared : NULL;
    th_blocks_take(&alloc, w[i].st, MAXB);
    th_blocks_take(&alloc, w[i].ld, MAXB);
  }
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < NTHREADS; i++)
    if (w[i].err[0]) fail_msg("%s", w[i].err);
  for (int i = 0; i < NTHREADS; i++) {
    TH_EQ(w[i].stores, (with_shared ? 2 : 1) * ITERS);
    TH_EQ(w[i].loads, (with_shared ? 2 : 1) * ITERS);
  }
  /* the whole cache: only the blocks the threads owned changed, and those hold what they
   * last wrote or loaded (the shadow followed every fill, poison and load) */
  TH_VERIFY_ALL(kv);

  tutti_stats st = th_stats(rt);
  assert_true(st.stored_chunks > 0);
  assert_true(st.lookups >= NTHREADS * ITERS);
  if (with_shared) TH_EQ(th_lookup(rt, &shared), shared.n / CT * CT);
  tutti_runtime_close(rt);
  th_prompt_free(&shared);
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

/* Each thread its own prompts. */
static void test_threads_private(void** state) { run_threads(*state, 0); }

/* Each thread its own prompts, and all of them the same shared prompt at the same time: a
 * store that finds the chunks being written by another batch may only report them once they
 * are committed. */
static void test_threads_shared(void** state) { run_threads(*state, 1); }

/* tutti_last_error() is per thread. */
typedef struct err_probe {
  char before[600];
  char after[600];
  int rc;
} err_probe;

static void* err_thread(void* arg) {
  err_probe* e = arg;
  snprintf(e->before, sizeof e->before, "%s", tutti_last_error());
  size_t n;
  e->rc = tutti_lookup(NULL, NULL, 0, NULL, 0, &n);
  snprintf(e->after, sizeof e->after, "%s", tutti_last_error());
  return NULL;
}

static void test_last_error_per_thread(void** state) {
  (void)state;
  tutti_options* o = NULL;
  TH_OK(tutti_options_create(&o));
  TH_ERR(TUTTI_EINVAL, tutti_options_set(o, "no-such-key", "1"));
  char mine[600];
  snprintf(mine, sizeof mine, "%s", tutti_last_error());
  err_probe e;
  memset(&e, 0, sizeof e);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, err_thread, &e), 0);
  pthread_join(t, NULL);
  assert_string_equal(e.before, ""); /* a fresh thread has no error */
  TH_EQ(e.rc, TUTTI_EINVAL);
  assert_true(e.after[0] != '\0');
  assert_string_equal(tutti_last_error(), mine); /* untouched by the other thread */
  tutti_options_destroy(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_threads_private, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_threads_shared, th_setup_dir, th_teardown_dir),
      cmocka_unit_test(test_last_error_per_thread),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
