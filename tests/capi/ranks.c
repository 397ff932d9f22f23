// SPDX-License-Identifier: Apache-2.0
/* ranks: the runtimes of a tensor-parallel engine's ranks share one pool (options ranks, rank).
 * Processes that start together create it once; each stores and loads its own shard of the
 * same prompts (other bytes under the same tokens) and only ever gets its own back, also after
 * a restart; a rank's stores evict only its own share; conflicts are refused clearly. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#define CT 32u    /* chunk tokens */
#define RANKS 3
#define NP 4      /* prompts, the same tokens on every rank */
#define NB 10     /* blocks per prompt: up to 160 tokens */

/* The same prompts on every rank, with rank r's bytes: the fixture's pattern follows the
 * prompt's chain, which is mixed with the rank (tutti sees the same tokens on every rank). */
static void rank_prompts(th_prompt p[NP], unsigned rank) {
  uint64_t rng = th_base_seed() ^ 0x5A4D;
  for (int i = 0; i < NP; i++) {
    th_prompt_random(&p[i], &rng, CT * (size_t)(1 + i) + (size_t)(i * 5));
    for (size_t t = 0; t < p[i].n; t++) p[i].chain[t] = th_mix64(p[i].chain[t] + 0x9E37u * (rank + 1));
  }
}

static void free_prompts(th_prompt p[NP]) {
  for (int i = 0; i < NP; i++) th_prompt_free(&p[i]);
}

static size_t chunks_of(const th_prompt p[NP]) {
  size_t n = 0;
  for (int i = 0; i < NP; i++) n += p[i].n / CT;
  return n;
}

static th_kv_spec rank_spec(void) {
  th_kv_spec s = th_spec_default();
  s.num_blocks = NP * NB;
  return s;
}

static void table_of(int32_t table[NB], int prompt) {
  for (int b = 0; b < NB; b++) table[b] = prompt * NB + b;
}

/* Opens rank `rank` of `ranks` on the pool in dir; 0 or the failing code. */
static int open_rank(tutti_runtime** rt, const char* dir, const th_kv* kv, unsigned rank, unsigned ranks,
                     const char* capacity) {
  char r[16], n[16];
  snprintf(r, sizeof r, "%u", rank);
  snprintf(n, sizeof n, "%u", ranks);
  const char* extra[] = {"rank", r, "ranks", n, NULL};
  return th_open(rt, dir, capacity, CT, extra, kv);
}

/* Loads every prompt into poisoned blocks and compares them with this rank's bytes. Returns
 * how many rows differ (no cmocka calls: it runs in child processes too). */
static size_t load_and_compare(tutti_runtime* rt, th_kv* kv, th_prompt p[NP], char* msg, size_t cap) {
  size_t bad = 0;
  th_kv_poison(kv);
  for (int i = 0; i < NP && !bad; i++) {
    int32_t table[NB];
    table_of(table, i);
    const size_t hit = p[i].n / CT * CT;
    size_t cached = 0;
    if (tutti_lookup(rt, p[i].tokens, p[i].n, NULL, 0, &cached) != 0 || cached != hit) {
      snprintf(msg, cap, "prompt %d: lookup found %zu of %zu tokens: %s", i, cached, hit, tutti_last_error());
      return 1;
    }
    tutti_request rq = th_request(&p[i], table, NB, 0, hit);
    tutti_result res;
    const int rc = th_batch_run(rt, TUTTI_OP_LOAD, &rq, 1, &res, 0, kv->spec.num_layers);
    if (rc != 0 || res.status != 0 || res.tokens != hit) {
      snprintf(msg, cap, "prompt %d: load -> %d, status %d, %zu tokens: %s", i, rc, res.status, (size_t)res.tokens,
               th_batch_error());
      return 1;
    }
    bad += th_kv_check(kv, &p[i], table, 0, hit, 0, kv->spec.num_layers, msg, cap);
  }
  return bad;
}

/* One rank's process: opens the shared pool (the ranks race to create it), stores its shard
 * of every prompt and loads it back. Exits 0 on success; rank 1 exits without closing its
 * runtime, as a killed process would. */
static void rank_main(const char* dir, unsigned rank) {
  /* A crash ends this process (cmocka's handlers would go on running tests in it). */
  signal(SIGSEGV, SIG_DFL);
  signal(SIGBUS, SIG_DFL);
  signal(SIGABRT, SIG_DFL);
  th_prompt p[NP];
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  th_kv_spec spec = rank_spec();
  char msg[512] = "";
  rank_prompts(p, rank);
  if (th_kv_create(&kv, &spec) != 0 || open_rank(&rt, dir, kv, rank, RANKS, "16M") != 0) {
    fprintf(stderr, "rank %u: open: %s\n", rank, tutti_last_error());
    _exit(2);
  }
  for (int i = 0; i < NP; i++) {
    int32_t table[NB];
    table_of(table, i);
    th_kv_fill(kv, &p[i], table, 0, p[i].n);
    tutti_request rq = th_request(&p[i], table, NB, 0, TUTTI_TOKENS_ALL);
    tutti_result res;
    if (th_batch_run(rt, TUTTI_OP_STORE, &rq, 1, &res, 0, spec.num_layers) != 0 || res.status != 0) {
      fprintf(stderr, "rank %u: store of prompt %d: %s\n", rank, i, th_batch_error());
      _exit(3);
    }
  }
  if (load_and_compare(rt, kv, p, msg, sizeof msg) != 0) {
    fprintf(stderr, "rank %u: %s\n", rank, msg);
    _exit(4);
  }
  if (rank == 1) _exit(0);  /* dies with its runtime open: its share must open again */
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  free_prompts(p);
  _exit(0);
}

static void test_ranks_share_one_pool(void** state) {
  th_env* env = *state;
  pid_t pids[RANKS];
  for (unsigned r = 0; r < RANKS; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) rank_main(env->dir, r);
  }
  for (unsigned r = 0; r < RANKS; r++) {
    int status = 0;
    assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("rank %u's process failed (status 0x%x; its stderr says why)", r, status);
  }
  /* Each rank reopens its share: its chunks were recovered, and they are its own bytes. */
  th_kv_spec spec = rank_spec();
  uint64_t slots = 0;
  for (unsigned r = 0; r < RANKS; r++) {
    th_prompt p[NP];
    th_kv* kv = NULL;
    tutti_runtime* rt = NULL;
    char msg[512] = "";
    rank_prompts(p, r);
    TH_OK(th_kv_create(&kv, &spec));
    TH_OK(open_rank(&rt, env->dir, kv, r, RANKS, "16M"));
    const tutti_stats s = th_stats(rt);
    TH_EQ(s.slots_used, chunks_of(p));
    if (r == 0) slots = s.slots_total;
    TH_EQ(s.slots_total, slots); /* equal shares */
    if (load_and_compare(rt, kv, p, msg, sizeof msg) != 0) fail_msg("rank %u after reopening: %s", r, msg);
    tutti_runtime_close(rt);
    th_kv_destroy(kv);
    free_prompts(p);
  }
  print_message("  %d ranks, %llu slots each, every rank got its own bytes back\n", RANKS,
                (unsigned long long)slots);
}

static void test_conflicts_are_refused(void** state) {
  th_env* env = *state;
  th_kv_spec spec = rank_spec();
  th_kv* kv = NULL;
  tutti_runtime *a = NULL, *b = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  TH_OK(open_rank(&a, env->dir, kv, 0, 2, "8M"));
  /* Locks belong to open files, so a second runtime in this process is refused like another process. */
  TH_ERR(TUTTI_EBUSY, open_rank(&b, env->dir, kv, 0, 2, "8M"));
  print_message("  the same rank twice: %s\n", tutti_last_error());
  TH_ERR(TUTTI_EBUSY, th_open(&b, env->dir, "8M", CT, NULL, kv)); /* a runtime alone, while ranks run */
  TH_OK(open_rank(&b, env->dir, kv, 1, 2, "8M"));
  tutti_runtime_close(b);
  tutti_runtime_close(a);
  TH_ERR(TUTTI_ELAYOUT, th_open(&b, env->dir, "8M", CT, NULL, kv));
  print_message("  a runtime alone: %s\n", tutti_last_error());
  TH_ERR(TUTTI_ELAYOUT, open_rank(&b, env->dir, kv, 0, 3, "8M"));
  print_message("  another number of ranks: %s\n", tutti_last_error());
  TH_ERR(TUTTI_EINVAL, open_rank(&b, env->dir, kv, 2, 2, "8M"));
  print_message("  rank 2 of 2: %s\n", tutti_last_error());
  th_kv_destroy(kv);
}

/* Rank 0 stores far more than its share holds: it evicts its own chunks, never rank 1's. */
static void test_a_rank_evicts_only_its_share(void** state) {
  th_env* env = *state;
  th_kv_spec spec = rank_spec();
  spec.num_blocks = 256;
  th_kv *kv0 = NULL, *kv1 = NULL;
  tutti_runtime *r0 = NULL, *r1 = NULL;
  th_prompt p[NP];
  char msg[512] = "";
  uint64_t rng = th_base_seed() ^ 0xE71C;
  TH_OK(th_kv_create(&kv0, &spec));
  TH_OK(th_kv_create(&kv1, &spec));
  TH_OK(open_rank(&r0, env->dir, kv0, 0, 2, "4M"));
  TH_OK(open_rank(&r1, env->dir, kv1, 1, 2, "4M"));
  rank_prompts(p, 1);
  for (int i = 0; i < NP; i++) {
    int32_t table[NB];
    table_of(table, i);
    th_store_prompt(r1, kv1, &p[i], table, NB);
  }
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  const uint64_t share = th_stats(r0).slots_total;
  th_store_random_prompts(r0, kv0, &alloc, &rng, share, 4 * CT); /* 4x its share */
  th_blocks_free(&alloc);
  const tutti_stats s0 = th_stats(r0), s1 = th_stats(r1);
  assert_true(s0.evictions > 0);
  TH_EQ(s1.evictions, 0);
  TH_EQ(s1.slots_used, chunks_of(p));
  if (load_and_compare(r1, kv1, p, msg, sizeof msg) != 0) fail_msg("rank 1: %s", msg);
  print_message("  rank 0 evicted %llu of its own chunks; rank 1 kept all %d\n", (unsigned long long)s0.evictions,
                NP);
  free_prompts(p);
  tutti_runtime_close(r0);
  tutti_runtime_close(r1);
  th_kv_destroy(kv0);
  th_kv_destroy(kv1);
}

int main(void) {
  int rc = th_require_pool();
  if (rc) return rc;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_ranks_share_one_pool, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_conflicts_are_refused, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_a_rank_evicts_only_its_share, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
