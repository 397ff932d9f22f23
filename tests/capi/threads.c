// SPDX-License-Identifier: Apache-2.0
/* threads: four threads store, look up and load their own and shared prompts on one runtime. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
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

/* Counts this process's threads named `name` and checks each one's nice value; -1 when one
 * has another. */
static int threads_at(const char* name, int nice) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "", stat[1024] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue; /* the thread just ended */
    int got = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    if (!got || strcmp(comm, name) != 0) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (!f) continue;
    got = fgets(stat, sizeof stat, f) != NULL;
    fclose(f);
    /* after "pid (comm) ": state is field 3, nice field 19 */
    const char* p = strrchr(stat, ')');
    int field = 2, value = 0;
    for (; got && p && *p; p++)
      if (*p == ' ' && ++field == 19) {
        value = atoi(p + 1);
        break;
      }
    if (field != 19 || value != nice) {
      closedir(d);
      return -1;
    }
    count++;
  }
  closedir(d);
  return count;
}

/* The threads that write stores run niced (store_nice), those that load at the process's own
 * priority: a load never yields the CPU to a store. */
static void check_niced_stores(th_env* env, const char* backend) {
  uint64_t rng = th_base_seed() ^ 0x72;
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/%s", env->dir, backend);
  assert_int_equal(mkdir(dir, 0700), 0);
  const char* extra[] = {"backend", backend, "store_nice", "7", NULL};
  tutti_runtime* rt = NULL;
  int rc = th_open(&rt, dir, "64M", CT, extra, kv);
  if (rc == TUTTI_EUNSUPPORTED) { /* no io_uring here */
    printf("# backend %s: %s\n", backend, tutti_last_error());
    th_kv_destroy(kv);
    return;
  }
  TH_OK(rc);
  th_prompt p;
  th_prompt_random(&p, &rng, 3 * CT);
  int32_t st[6] = {0, 1, 2, 3, 4, 5}, ld[6] = {10, 11, 12, 13, 14, 15};
  th_store_prompt(rt, kv, &p, st, th_nblocks(p.n, spec.block_tokens));
  th_load_and_check(rt, kv, &p, ld, th_nblocks(p.n, spec.block_tokens), p.n);

  const int base = getpriority(PRIO_PROCESS, 0), niced = base > 7 ? base : 7;
  char load_name[32], store_name[32];
  snprintf(load_name, sizeof load_name, "tutti-%s", backend);
  snprintf(store_name, sizeof store_name, "tutti-%s-st", backend);
  int loaders = 0, storers = 0, sched = 0;
  /* a thread names and nices itself as it starts: give the slowest a moment */
  for (int tries = 0; tries < 200 && !(loaders > 0 && storers > 0 && sched == 1); tries++) {
    if (tries) usleep(10000);
    loaders = threads_at(load_name, base);
    storers = threads_at(store_name, niced);
    sched = threads_at("tutti-sched-st", niced);
  }
  if (loaders <= 0 || storers <= 0 || sched != 1)
    fail_msg("backend %s: %d load threads at nice %d, %d store threads and %d store schedulers at "
             "nice %d (-1: one at another nice)", backend, loaders, base, storers, sched, niced);
  TH_EQ(threads_at("tutti-sched-ld", base), 1);
  tutti_runtime_close(rt);
  th_prompt_free(&p);
  th_kv_destroy(kv);
}

static void test_store_threads_niced(void** state) {
  check_niced_stores(*state, "posix");
  check_niced_stores(*state, "uring");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_threads_private, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_threads_shared, th_setup_dir, th_teardown_dir),
      cmocka_unit_test(test_last_error_per_thread),
      cmocka_unit_test_setup_teardown(test_store_threads_niced, th_setup_dir, th_teardown_dir),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
