// SPDX-License-Identifier: Apache-2.0
/* torture: a child storing and loading is SIGKILLed at random; reopens work, hits load intact. */
/*
 * Usage: integrity_torture [--kills N] [--kills-per-pool M] [--verbose]
 *   N kills in all (default 300, what CI runs); a fresh pool of the next shape every M kills
 *   (default 25). Seed: TUTTI_TEST_SEED. The kill moments are wall-clock times, so a seed
 *   replays the same prompts, layouts and operations, not the same interrupted instruction.
 *
 * Every M kills, a fresh pool of the next shape; then eight children creating a pool of that
 * shape elsewhere are killed at moments steered into the creation (by what earlier kills left),
 * after which that pool must open all the same.
 * Each kill: the child opens the pool with a random engine layout of the pool's shape (NHD or
 * HND, fused or not, block size, padded strides) on uring or posix, then stores and loads
 * random requests (prompts sharing prefixes, 1-3 requests a batch, random chunk ranges) and
 * checks every byte it loads; now and then it closes and reopens. The parent kills it 0-10 ms
 * after the fork (a quarter of the kills) or 0-60 ms after its first open, reopens the pool
 * (another random layout and backend; TUTTI_EBUSY is retried for 10 s while the dead child's
 * io_uring is torn down), looks up every prompt and loads every chunk a lookup reports,
 * counting wrong bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integrity.h"

#define UNIVERSE 40   /* prompts per pool */
#define MAX_CHUNKS 5  /* chunks per prompt */
#define SLOTS 24      /* slots per pool: eviction all the time */
#define NUM_BLOCKS 64 /* blocks per layer of the engine's cache: 3 requests of 5 chunks */
#define CREATION_KILLS 8 /* per pool: a child creating a pool of the shape is killed */

static long g_kills = 300;
static long g_kills_per_pool = 25;
static int g_verbose;

/* What a child reports to the parent (a shared mapping: survives the SIGKILL). */
typedef struct child_report {
  volatile uint64_t stores, loads, chunks_stored, chunks_verified, wrong_bytes, opens;
  volatile int failed;
  volatile int phase; /* what the child was doing when it died: a PHASE_* */
  char msg[1024];
} child_report;

enum { PHASE_START, PHASE_OPEN, PHASE_STORE, PHASE_LOAD, PHASE_CLOSE, PHASE_OTHER, PHASE_COUNT };
static const char* const phase_names[PHASE_COUNT] = {"start", "open", "store", "load", "close",
                                                     "between"};

typedef struct pool_ctx {
  char dir[4096];
  it_shape shape;
  char capacity[64];
  it_universe u;
  uint64_t seed;
} pool_ctx;

static const char* const* backend_opts(uint64_t* rng) {
  /* little staging: faulting in 16 MiB per open would dwarf everything else */
  static const char* uring[] = {"backend", "uring", "staging", "512K", NULL};
  static const char* posix[] = {"backend", "posix", "staging", "512K", NULL};
  return th_rand_below(rng, 2) ? uring : posix;
}

static void child_fail(child_report* rep, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rep->msg, sizeof rep->msg, fmt, ap);
  va_end(ap);
  rep->failed = 1;
  fprintf(stderr, "torture child: %s\n", rep->msg);
  _exit(code);
}

/* A random request over whole chunks [begin, end) of prompt p, chunks limited to `limit`. */
static int pick_range(const th_prompt* p, size_t limit_chunks, uint32_t ct, uint32_t bt,
                      it_tables* tabs, uint64_t* rng, it_req* out) {
  size_t nch = limit_chunks;
  if (nch == 0) return 0;
  size_t b = th_rand_below(rng, 10) < 7 ? 0 : (size_t)th_rand_below(rng, nch);
  size_t e = b + 1 + (size_t)th_rand_below(rng, nch - b);
  size_t nblocks = e * ct / bt;
  int32_t* table = it_tables_take(tabs, nblocks);
  if (!table) return 0;
  out->p = p;
  out->table = table;
  out->ntable = nblocks;
  out->begin = b * ct;
  out->end = e * ct;
  return 1;
}

/* The child: random stores and loads until killed. Never returns. */
static void child_main(const pool_ctx* pc, uint64_t seed, child_report* rep) {
  uint64_t rng = th_mix64(seed);
  const uint32_t ct = pc->shape.chunk_tokens;
  char desc[256];
  for (;;) {
    th_kv_spec spec = it_random_spec(&pc->shape, NUM_BLOCKS, &rng);
    th_kv* kv = NULL;
    tutti_runtime* rt = NULL;
    if (th_kv_create(&kv, &spec) != 0) child_fail(rep, 10, "cannot allocate the KV cache");
    const char* const* extra = backend_opts(&rng);
    rep->phase = PHASE_OPEN;
    int rc = it_open(&rt, pc->dir, pc->capacity, ct, extra, kv, 10000, NULL);
    rep->phase = PHASE_OTHER;
    if (rc != 0)
      child_fail(rep, 4, "open (%s, %s) -> %d (%s): %s", extra[1],
                 it_spec_describe(&spec, desc, sizeof desc), rc, tutti_strerror(rc),
                 tutti_last_error());
    rep->opens++;
    it_tables tabs;
    it_tables_init(&tabs, spec.num_blocks, &rng);
    long ops = 10 + (long)th_rand_below(&rng, 150);
    for (long op = 0; op < ops; op++) {
      it_req reqs[3];
      size_t n = 0, want = 1 + (size_t)th_rand_below(&rng, 3);
      it_outcome out;
      it_tables_reset(&tabs, &rng);
      if (th_rand_below(&rng, 100) < 55) {
        for (size_t i = 0; i < want; i++) {
          const th_prompt* p = &pc->u.p[th_rand_below(&rng, pc->u.count)];
          n += (size_t)pick_range(p, it_whole_chunks(p, ct), ct, spec.block_tokens, &tabs, &rng,
                                  &reqs[n]);
        }
        if (!n) continue;
        rep->phase = PHASE_STORE;
        it_store(rt, kv, reqs, n, &out);
        rep->phase = PHASE_OTHER;
        if (out.rc != 0 || it_inconsistent(reqs, n, &out, ct))
          child_fail(rep, 4, "store of %zu requests (%s, %s) -> %d (%s): %s", n, extra[1],
                     it_spec_describe(&spec, desc, sizeof desc), out.rc,
                     tutti_strerror(out.rc), out.msg);
        rep->stores++;
        for (size_t i = 0; i < n; i++) rep->chunks_stored += (reqs[i].end - reqs[i].begin) / ct;
      } else {
        for (size_t i = 0; i < want; i++) {
          const th_prompt* p = &pc->u.p[th_rand_below(&rng, pc->u.count)];
          size_t hit = 0;
          rc = tutti_lookup(rt, p->tokens, p->n, NULL, 0, &hit);
          if (rc != 0) child_fail(rep, 4, "lookup -> %d: %s", rc, tutti_last_error());
          n += (size_t)pick_range(p, hit / ct, ct, spec.block_tokens, &tabs, &rng, &reqs[n]);
        }
        if (!n) continue;
        rep->phase = PHASE_LOAD;
        it_load(rt, kv, reqs, n, &out);
        rep->phase = PHASE_OTHER;
        rep->wrong_bytes += out.wrong_bytes;
        if (out.wrong_bytes)
          child_fail(rep, 3, "load of %zu requests (%s, %s): %zu wrong bytes; first: %s", n,
                     extra[1], it_spec_describe(&spec, desc, sizeof desc), out.wrong_bytes,
                     out.msg);
        if (out.rc != 0 || it_inconsistent(reqs, n, &out, ct))
          child_fail(rep, 4,
                     "load of %zu requests that lookups reported (%s, %s) -> %d (%s): %s", n,
                     extra[1], it_spec_describe(&spec, desc, sizeof desc), out.rc,
                     tutti_strerror(out.rc), out.msg);
        rep->loads++;
        for (size_t i = 0; i < n; i++) rep->chunks_verified += (reqs[i].end - reqs[i].begin) / ct;
      }
    }
    it_tables_free(&tabs);
    rep->phase = PHASE_CLOSE;
    tutti_runtime_close(rt);
    rep->phase = PHASE_OTHER;
    th_kv_destroy(kv);
  }
}

typedef struct totals {
  long kills, reopens, failures;
  uint64_t chunks_verified, child_chunks_verified, wrong_bytes, child_stores, child_loads;
  int max_busy_ms;
  long killed_in[PHASE_COUNT];
  long creation_kills, creation_states[4]; /* file absent, empty, no superblock yet, a pool */
  double creation_window_us; /* where creation kills aim: moves towards the creation's middle */
} totals;

/* Counts a failure; prints the first 20. */
static void fail_once(totals* t, const char* fmt, ...) {
  if (t->failures++ >= 20) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (t->failures == 20) fprintf(stderr, "torture: more failures are counted, not shown\n");
}

/* After a kill: the pool reopens, every prompt is looked up and every chunk reported loads. */
static void verify_pool(const pool_ctx* pc, long round, uint64_t* rng, totals* t) {
  const uint32_t ct = pc->shape.chunk_tokens;
  char desc[256];
  th_kv_spec spec = it_random_spec(&pc->shape, NUM_BLOCKS, rng);
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  if (th_kv_create(&kv, &spec) != 0) {
    fail_once(t, "kill %ld: cannot allocate the KV cache", round);
    return;
  }
  const char* const* extra = backend_opts(rng);
  int waited = 0;
  int rc = it_open(&rt, pc->dir, pc->capacity, ct, extra, kv, 10000, &waited);
  if (waited > t->max_busy_ms) t->max_busy_ms = waited;
  if (rc != 0) {
    fail_once(t, "kill %ld: reopen (%s, %s) -> %d (%s) after %d ms of EBUSY retries: %s", round,
              extra[1], it_spec_describe(&spec, desc, sizeof desc), rc, tutti_strerror(rc),
              waited, tutti_last_error());
    th_kv_destroy(kv);
    return;
  }
  t->reopens++;
  size_t hits[UNIVERSE];
  for (size_t i = 0; i < pc->u.count; i++) {
    const th_prompt* p = &pc->u.p[i];
    hits[i] = 0;
    rc = tutti_lookup(rt, p->tokens, p->n, NULL, 0, &hits[i]);
    if (rc != 0 || hits[i] % ct || hits[i] > p->n) {
      fail_once(t, "kill %ld: lookup of prompt %zu -> %d, %zu tokens: %s", round, i, rc, hits[i],
                tutti_last_error());
      hits[i] = 0;
    }
  }
  /* every hit loads, three prompts a batch */
  it_tables tabs;
  it_tables_init(&tabs, spec.num_blocks, rng);
  for (size_t i = 0; i < pc->u.count;) {
    it_req reqs[3];
    size_t n = 0;
    it_tables_reset(&tabs, rng);
    for (; i < pc->u.count && n < 3; i++) {
      if (!hits[i]) continue;
      size_t nb = hits[i] / spec.block_tokens;
      reqs[n++] = (it_req){&pc->u.p[i], it_tables_take(&tabs, nb), nb, 0, hits[i]};
    }
    if (!n) break;
    it_outcome out;
    it_load(rt, kv, reqs, n, &out);
    t->wrong_bytes += out.wrong_bytes;
    if (out.wrong_bytes)
      fail_once(t, "kill %ld: %zu wrong bytes loading what lookups reported (%s, %s); first: %s",
                round, out.wrong_bytes, extra[1], it_spec_describe(&spec, desc, sizeof desc),
                out.msg);
    if (out.rc != 0 || it_inconsistent(reqs, n, &out, ct))
      fail_once(t, "kill %ld: load of %zu prompts that lookups reported (%s, %s) -> %d (%s): %s",
                round, n, extra[1], it_spec_describe(&spec, desc, sizeof desc), out.rc,
                tutti_strerror(out.rc), out.msg);
    for (size_t k = 0; k < n; k++) t->chunks_verified += out.res[k].chunks_ok;
  }
  it_tables_free(&tabs);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
}

/* What a killed creation left at `path`: 0 nothing, 1 an empty file, 2 a file whose first
 * bytes are not a pool superblock (yet), 3 a pool. */
static int creation_state(const char* path) {
  unsigned char magic[8] = {0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = pread(fd, magic, sizeof magic, 0);
  close(fd);
  if (n <= 0) return 1;
  return memcmp(magic, "TUTTIPL", 8) == 0 ? 3 : 2;
}

/* A child creating a pool in a fresh directory is killed at a moment (from when it starts to
 * open) that the earlier outcomes steer into the creation itself; then the pool must open (be
 * created, or found) all the same. */
static void creation_kill(const it_shape* shape, const char* capacity, uint64_t* rng, totals* t,
                          long epoch) {
  static const char* const state_names[4] = {"nothing", "an empty file",
                                             "a file without a superblock", "a pool"};
  char dir[4096], path[4200], desc[256];
  int fds[2];
  if (th_mkdtemp(dir, sizeof dir) != 0 || pipe(fds) != 0) {
    fail_once(t, "mkdtemp/pipe: %s", strerror(errno));
    return;
  }
  it_pool_path(path, sizeof path, dir);
  th_kv_spec spec = it_random_spec(shape, NUM_BLOCKS, rng);
  const char* const* extra = backend_opts(rng);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    th_kv* kv = NULL;
    tutti_runtime* rt = NULL;
    close(fds[0]);
    if (th_kv_create(&kv, &spec) != 0) _exit(10);
    char go = 1;
    if (write(fds[1], &go, 1) != 1) _exit(11);
    int rc = th_open(&rt, dir, capacity, shape->chunk_tokens, extra, kv);
    tutti_runtime_close(rt);
    _exit(rc == 0 ? 0 : 12);
  }
  close(fds[1]);
  char go;
  ssize_t got = read(fds[0], &go, 1);
  close(fds[0]);
  long delay = (long)(t->creation_window_us * (0.6 + 0.4 * (double)th_rand_below(rng, 1000) / 1000));
  struct timespec ts = {delay / 1000000, (delay % 1000000) * 1000L};
  if (got == 1) nanosleep(&ts, NULL);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    fail_once(t, "pool %ld: a child creating a pool failed on its own (exit code %d)", epoch,
              WEXITSTATUS(status));
  int state = creation_state(path);
  /* too late (a pool): aim earlier; too early (nothing yet): aim later */
  if (state == 3) t->creation_window_us *= 0.85;
  if (state <= 1) t->creation_window_us *= 1.15;
  t->creation_kills++;
  t->creation_states[state]++;
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  spec = it_random_spec(shape, NUM_BLOCKS, rng);
  int rc = th_kv_create(&kv, &spec);
  if (rc == 0) rc = it_open(&rt, dir, capacity, shape->chunk_tokens, backend_opts(rng), kv, 10000, NULL);
  if (rc != 0)
    fail_once(t,
              "pool %ld: a kill %ld us into pool creation left %s, and opening it then fails: "
              "%d (%s): %s [%s]",
              epoch, delay, state_names[state], rc, tutti_strerror(rc), tutti_last_error(),
              it_spec_describe(&spec, desc, sizeof desc));
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  th_rmtree(dir);
}

static int new_pool(pool_ctx* pc, long epoch, uint64_t base_seed, uint64_t* rng, totals* t) {
  char desc[256];
  if (th_mkdtemp(pc->dir, sizeof pc->dir) != 0) {
    fail_once(t, "mkdtemp: %s", strerror(errno));
    return -1;
  }
  pc->seed = th_mix64(base_seed ^ th_mix64(0x7A000000ull + (uint64_t)epoch));
  pc->shape = it_shape_get((size_t)(base_seed + (uint64_t)epoch));
  it_capacity(pc->capacity, sizeof pc->capacity, &pc->shape, SLOTS);
  it_universe_init(&pc->u, pc->seed, UNIVERSE, pc->shape.chunk_tokens, MAX_CHUNKS);
  if (g_verbose)
    fprintf(stderr, "# pool %ld: %s, %u slots, %s\n", epoch,
            it_shape_describe(&pc->shape, desc, sizeof desc), SLOTS, pc->dir);
  /* the pool the kills of this epoch work on exists before the first child; how long its
   * creation took is where the first creation kill aims */
  th_kv_spec spec = it_random_spec(&pc->shape, NUM_BLOCKS, rng);
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  struct timespec c0, c1;
  int rc = th_kv_create(&kv, &spec);
  clock_gettime(CLOCK_MONOTONIC, &c0);
  if (rc == 0) rc = th_open(&rt, pc->dir, pc->capacity, pc->shape.chunk_tokens, NULL, kv);
  clock_gettime(CLOCK_MONOTONIC, &c1);
  if (rc != 0) fail_once(t, "pool %ld: creation -> %d (%s): %s", epoch, rc, tutti_strerror(rc), tutti_last_error());
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  double took_us = (double)(c1.tv_sec - c0.tv_sec) * 1e6 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e3;
  if (t->creation_window_us <= 0) t->creation_window_us = took_us;
  for (int i = 0; i < CREATION_KILLS; i++) creation_kill(&pc->shape, pc->capacity, rng, t, epoch);
  return rc ? -1 : 0;
}

static void free_pool(pool_ctx* pc) {
  it_universe_free(&pc->u);
  th_rmtree(pc->dir);
}

/* When to kill: a quarter of the kills 0-10 ms after the fork (during start-up, open and
 * recovery); the others 0-60 ms after the child's first open, however long that took on a
 * loaded machine, so that most kills land in the middle of stores and loads. */
static void wait_for_kill(const child_report* rep, uint64_t* rng, long* delay_us) {
  int after_open = th_rand_below(rng, 4) != 0;
  if (after_open) {
    struct timespec poll = {0, 200000L};
    for (int i = 0; i < 25000 && rep->opens == 0 && !rep->failed; i++) nanosleep(&poll, NULL);
  }
  *delay_us = (long)th_rand_below(rng, after_open ? 60000 : 10000);
  struct timespec ts = {*delay_us / 1000000, (*delay_us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}

static void test_torture(void** state) {
  (void)state;
  const uint64_t seed = th_base_seed();
  uint64_t rng = th_mix64(seed ^ 0x70127u);
  totals t;
  memset(&t, 0, sizeof t);
  child_report* rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
  assert_true(rep != MAP_FAILED);
  pool_ctx pc;
  memset(&pc, 0, sizeof pc);
  long epoch = -1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);

  for (long round = 0; round < g_kills; round++) {
    if (round / g_kills_per_pool != epoch) {
      if (epoch >= 0) free_pool(&pc);
      epoch = round / g_kills_per_pool;
      if (new_pool(&pc, epoch, seed, &rng, &t) != 0) break;
    }
    memset((void*)rep, 0, sizeof *rep);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) child_main(&pc, th_mix64(seed ^ th_mix64((uint64_t)round)), rep);

    long delay = 0;
    wait_for_kill(rep, &rng, &delay);
    kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    t.kills++;
    if (rep->phase >= 0 && rep->phase < PHASE_COUNT) t.killed_in[rep->phase]++;
    t.child_stores += rep->stores;
    t.child_loads += rep->loads;
    t.child_chunks_verified += rep->chunks_verified;
    t.wrong_bytes += rep->wrong_bytes;
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      fail_once(&t, "kill %ld (pool %ld): the child died of signal %d (%s)", round, epoch,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WIFEXITED(status))
      fail_once(&t, "kill %ld (pool %ld): the child exited with %d: %s", round, epoch,
                WEXITSTATUS(status), rep->failed ? rep->msg : "(no message)");
    if (g_verbose)
      fprintf(stderr, "# kill %ld after %ld us: %llu opens, %llu stores, %llu loads\n", round,
              delay, (unsigned long long)rep->opens, (unsigned long long)rep->stores,
              (unsigned long long)rep->loads);
    verify_pool(&pc, round, &rng, &t);
  }
  if (epoch >= 0) free_pool(&pc);
  munmap(rep, sizeof *rep);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("torture: seed %llu, kills %ld, reopens %ld, chunks verified %llu after reopen + %llu "
         "by the children (%llu stores, %llu loads), wrong bytes %llu, failures %ld, longest "
         "EBUSY wait %d ms, %.1f s\n",
         (unsigned long long)seed, t.kills, t.reopens, (unsigned long long)t.chunks_verified,
         (unsigned long long)t.child_chunks_verified, (unsigned long long)t.child_stores,
         (unsigned long long)t.child_loads, (unsigned long long)t.wrong_bytes, t.failures,
         t.max_busy_ms, secs);
  printf("torture: %ld kills during pool creation left nothing %ld, an empty file %ld, a file "
         "without a superblock %ld, a pool %ld\n",
         t.creation_kills, t.creation_states[0], t.creation_states[1], t.creation_states[2],
         t.creation_states[3]);
  printf("torture: killed while");
  for (int ph = 0; ph < PHASE_COUNT; ph++)
    printf("%s %s %ld", ph ? "," : "", phase_names[ph], t.killed_in[ph]);
  printf("\n");
  fflush(stdout);
  if (t.failures || t.wrong_bytes)
    fail_msg("%ld failures, %llu wrong bytes (seed %llu; rerun: TUTTI_TEST_SEED=%llu "
             "integrity_torture --kills %ld)",
             t.failures, (unsigned long long)t.wrong_bytes, (unsigned long long)seed,
             (unsigned long long)seed, g_kills);
  if (t.reopens != t.kills) fail_msg("%ld kills but %ld reopens", t.kills, t.reopens);
}

static void usage(const char* argv0) {
  fprintf(stderr, "usage: %s [--kills N] [--kills-per-pool M] [--verbose]\n", argv0);
  exit(2);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--kills") == 0 && i + 1 < argc)
      g_kills = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--kills-per-pool") == 0 && i + 1 < argc)
      g_kills_per_pool = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--verbose") == 0)
      g_verbose = 1;
    else
      usage(argv[0]);
  }
  if (g_kills < 1 || g_kills_per_pool < 1) usage(argv[0]);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_torture)};
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("torture", tests, NULL, NULL);
}
