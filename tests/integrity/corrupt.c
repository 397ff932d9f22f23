// SPDX-License-Identifier: Apache-2.0
/* corrupt: a damaged, stale or rolled-back pool file never loads wrong bytes with default options. */
/*
 * Usage: integrity_corrupt [--trials N]   (default 600, what CI runs)
 *   Seed: TUTTI_TEST_SEED. A failure names its trial; rerun with the same seed and at least as
 *   many trials.
 *
 * Each pool (one per shape; slots reused by evictions) is filled in three sessions with default
 * options: prompts 0-7, then 8-15, then 16-23 (prefixes shared); the whole file is saved after
 * the first two (older states) and after the third (the final state). A trial writes the final
 * state back, applies one to three corruptions (below), reopens with default options and a
 * random engine layout in a child process, looks up every prompt and loads every chunk a
 * lookup reports. A refused open, TUTTI_ECORRUPT and misses are fine; a wrong byte, another
 * error code or a signal is not. Offsets come from docs/format.md: superblock at 0, the
 * record of slot s at 4 KiB + s x 4 KiB, data from 1 MiB, slot s at 1 MiB + s x slot bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integrity.h"

#define UNIVERSE 24
#define MAX_CHUNKS 3
#define SLOTS 16
#define NUM_BLOCKS 64
#define DATA_OFFSET (1u << 20)
#define BLOCK 4096u

static long g_trials = 600;

enum {
  C_FLIP_DATA, C_FLIP_RECORD, C_FLIP_SB, C_ZERO_DATA, C_ZERO_RECORD, C_ZERO_SB, C_SWAP_DATA,
  C_SWAP_RECORDS, C_STALE_RECORD, C_MISPLACED_RECORD, C_ROLLBACK_RECORDS, C_ROLLBACK_DATA,
  C_ROLLBACK_SLOT, C_ROLLBACK_FILE, C_COUNT
};
static const char* const corruption_names[C_COUNT] = {
    "flip data bytes",     "flip record bytes",     "flip superblock bytes",
    "zero a data block",   "zero a record",         "zero the superblock",
    "swap data blocks",    "swap records",          "stale record (older one of its slot)",
    "misplaced record (another slot's)", "roll back every record", "roll back the data",
    "roll back one slot's data", "roll back the whole file"};

/* Per-kind counts, in a shared mapping the trial processes write to. */
typedef struct stats {
  uint64_t trials, opens_refused, loads_corrupt, loads_missing, chunks_verified, wrong_bytes;
  uint64_t failures;
  uint64_t applied[C_COUNT], with_wrong_bytes[C_COUNT]; /* trials with this corruption */
  uint64_t alone[C_COUNT], alone_wrong[C_COUNT];       /* trials with only this one */
} stats;

typedef struct pool_state {
  char dir[4096], path[4200];
  it_shape shape;
  char capacity[64];
  it_universe u;
  uint64_t slot_bytes;
  size_t file_bytes;
  unsigned char* snap[3]; /* after sessions 1, 2, 3 */
} pool_state;

static const char* const* options(void) {
  static const char* o[] = {"staging", "512K", NULL}; /* everything else as it ships */
  return o;
}

static int read_whole(const char* path, unsigned char* buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t got = pread(fd, buf, n, 0);
  close(fd);
  return got == (ssize_t)n ? 0 : -1;
}

/* With O_DIRECT where the file system has it (buf is 4 KiB aligned): dirty page cache under
 * the pool would make the reopen's O_DIRECT reads wait for its writeback. */
static int write_whole(const char* path, const unsigned char* buf, size_t n) {
  int fd = open(path, O_WRONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t put = pwrite(fd, buf, n, 0);
  close(fd);
  return put == (ssize_t)n ? 0 : -1;
}

/* Fills a pool in three sessions and saves the file after each. */
static void make_pool(pool_state* ps, size_t shape_index, uint64_t seed) {
  uint64_t rng = th_mix64(seed ^ 0xC0EEull);
  memset(ps, 0, sizeof *ps);
  if (th_mkdtemp(ps->dir, sizeof ps->dir) != 0) fail_msg("mkdtemp: %s", strerror(errno));
  it_pool_path(ps->path, sizeof ps->path, ps->dir);
  ps->shape = it_shape_get(shape_index);
  it_capacity(ps->capacity, sizeof ps->capacity, &ps->shape, SLOTS);
  ps->slot_bytes = it_slot_bytes(&ps->shape);
  ps->file_bytes = DATA_OFFSET + SLOTS * ps->slot_bytes;
  it_universe_init(&ps->u, th_mix64(seed ^ (0xC0DE0000ull + shape_index)), UNIVERSE,
                   ps->shape.chunk_tokens, MAX_CHUNKS);
  const uint32_t ct = ps->shape.chunk_tokens;
  for (int session = 0; session < 3; session++) {
    th_kv_spec spec = it_random_spec(&ps->shape, NUM_BLOCKS, &rng);
    th_kv* kv = NULL;
    tutti_runtime* rt = NULL;
    TH_OK(th_kv_create(&kv, &spec));
    TH_OK(th_open(&rt, ps->dir, ps->capacity, ct, options(), kv));
    it_tables tabs;
    it_tables_init(&tabs, spec.num_blocks, &rng);
    for (int i = session * 8; i < session * 8 + 8; i += 2) {
      it_req reqs[2];
      it_outcome out;
      it_tables_reset(&tabs, &rng);
      for (int k = 0; k < 2; k++) {
        const th_prompt* p = &ps->u.p[i + k];
        size_t end = it_whole_chunks(p, ct) * ct;
        size_t nb = end / spec.block_tokens;
        reqs[k] = (it_req){p, it_tables_take(&tabs, nb), nb, 0, end};
      }
      it_store(rt, kv, reqs, 2, &out);
      if (out.rc) fail_msg("setup store -> %d (%s): %s", out.rc, tutti_strerror(out.rc), out.msg);
    }
    it_tables_free(&tabs);
    tutti_runtime_close(rt);
    th_kv_destroy(kv);
    ps->snap[session] = malloc(ps->file_bytes);
    assert_non_null(ps->snap[session]);
    if (read_whole(ps->path, ps->snap[session], ps->file_bytes) != 0)
      fail_msg("cannot read %s back (%zu bytes expected)", ps->path, ps->file_bytes);
  }
}

static void free_pool(pool_state* ps) {
  for (int i = 0; i < 3; i++) free(ps->snap[i]);
  it_universe_free(&ps->u);
  th_rmtree(ps->dir);
}

/* ---- Corruptions ----------------------------------------------------------------------- */

static size_t record_at(uint64_t slot) { return BLOCK + (size_t)slot * BLOCK; }
static size_t slot_at(const pool_state* ps, uint64_t slot) {
  return DATA_OFFSET + (size_t)(slot * ps->slot_bytes);
}
static int is_record(const unsigned char* r) { return memcmp(r, "TUTTICR", 8) == 0; }

/* A slot with a record in `img`, or a random slot when none has one. */
static uint64_t committed_slot(const unsigned char* img, uint64_t* rng) {
  uint64_t start = th_rand_below(rng, SLOTS);
  for (uint64_t i = 0; i < SLOTS; i++) {
    uint64_t s = (start + i) % SLOTS;
    if (is_record(img + record_at(s))) return s;
  }
  return start;
}

static void flip_bytes(unsigned char* at, size_t len, uint64_t* rng) {
  unsigned n = 1 + (unsigned)th_rand_below(rng, 8);
  for (unsigned i = 0; i < n; i++) at[th_rand_below(rng, len)] ^= (unsigned char)(1u << th_rand_below(rng, 8));
}

static void swap_blocks(unsigned char* a, unsigned char* b, size_t len) {
  unsigned char tmp[BLOCK];
  for (size_t off = 0; off < len; off += BLOCK) {
    size_t k = len - off < BLOCK ? len - off : BLOCK;
    memcpy(tmp, a + off, k);
    memcpy(a + off, b + off, k);
    memcpy(b + off, tmp, k);
  }
}

/* Applies corruption `kind` to the image; returns 0 when it changed nothing (try another). */
static int corrupt(const pool_state* ps, unsigned char* img, int kind, uint64_t* rng) {
  const unsigned char* old = ps->snap[th_rand_below(rng, 2)]; /* an older state */
  const size_t blocks_per_slot = ps->slot_bytes / BLOCK;
  switch (kind) {
    case C_FLIP_DATA: {
      uint64_t s = committed_slot(img, rng);
      flip_bytes(img + slot_at(ps, s), ps->slot_bytes, rng);
      return 1;
    }
    case C_FLIP_RECORD:
      flip_bytes(img + record_at(committed_slot(img, rng)), BLOCK, rng);
      return 1;
    case C_FLIP_SB:
      flip_bytes(img, BLOCK, rng);
      return 1;
    case C_ZERO_DATA: {
      uint64_t s = committed_slot(img, rng);
      memset(img + slot_at(ps, s) + th_rand_below(rng, blocks_per_slot) * BLOCK, 0, BLOCK);
      return 1;
    }
    case C_ZERO_RECORD:
      memset(img + record_at(committed_slot(img, rng)), 0, BLOCK);
      return 1;
    case C_ZERO_SB:
      memset(img, 0, BLOCK);
      return 1;
    case C_SWAP_DATA: {
      uint64_t a = committed_slot(img, rng), b = committed_slot(img, rng);
      size_t ba = th_rand_below(rng, blocks_per_slot), bb = th_rand_below(rng, blocks_per_slot);
      if (a == b && ba == bb) return 0;
      swap_blocks(img + slot_at(ps, a) + ba * BLOCK, img + slot_at(ps, b) + bb * BLOCK, BLOCK);
      return 1;
    }
    case C_SWAP_RECORDS: {
      uint64_t a = committed_slot(img, rng), b = committed_slot(img, rng);
      if (a == b) return 0;
      swap_blocks(img + record_at(a), img + record_at(b), BLOCK);
      return 1;
    }
    case C_STALE_RECORD: {
      /* a slot whose older record (another key, same slot) differs from the current one */
      uint64_t start = th_rand_below(rng, SLOTS);
      for (uint64_t i = 0; i < SLOTS; i++) {
        uint64_t s = (start + i) % SLOTS;
        const unsigned char* r = old + record_at(s);
        if (is_record(r) && memcmp(r, img + record_at(s), BLOCK) != 0) {
          memcpy(img + record_at(s), r, BLOCK);
          return 1;
        }
      }
      return 0;
    }
    case C_MISPLACED_RECORD: {
      uint64_t a = committed_slot(img, rng), b = th_rand_below(rng, SLOTS);
      if (a == b) return 0;
      memcpy(img + record_at(b), img + record_at(a), BLOCK);
      return 1;
    }
    case C_ROLLBACK_RECORDS:
      memcpy(img + BLOCK, old + BLOCK, SLOTS * BLOCK);
      return 1;
    case C_ROLLBACK_DATA:
      memcpy(img + DATA_OFFSET, old + DATA_OFFSET, ps->file_bytes - DATA_OFFSET);
      return 1;
    case C_ROLLBACK_SLOT: {
      uint64_t s = committed_slot(img, rng);
      if (memcmp(img + slot_at(ps, s), old + slot_at(ps, s), ps->slot_bytes) == 0) return 0;
      memcpy(img + slot_at(ps, s), old + slot_at(ps, s), ps->slot_bytes);
      return 1;
    }
    case C_ROLLBACK_FILE:
      memcpy(img, old, ps->file_bytes);
      return 1;
  }
  return 0;
}

/* ---- A trial --------------------------------------------------------------------------- */

/* In a child: reopen with default options, load every chunk a lookup reports. Exit code 0, or
 * 1 after printing what went wrong; wrong bytes are added to st. */
static int check_pool(const pool_state* ps, uint64_t seed, stats* st, long trial) {
  uint64_t rng = th_mix64(seed ^ 0x7E57ull);
  const uint32_t ct = ps->shape.chunk_tokens;
  char desc[256];
  th_kv_spec spec = it_random_spec(&ps->shape, NUM_BLOCKS, &rng);
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  int failed = 0;
  if (th_kv_create(&kv, &spec) != 0) return 1;
  int rc = th_open(&rt, ps->dir, ps->capacity, ct, options(), kv);
  if (rc == TUTTI_ECORRUPT) {
    __atomic_add_fetch(&st->opens_refused, 1, __ATOMIC_RELAXED);
    th_kv_destroy(kv);
    return 0;
  }
  if (rc != 0) {
    fprintf(stderr, "FAIL trial %ld: reopen (%s) -> %d (%s): %s\n", trial,
            it_spec_describe(&spec, desc, sizeof desc), rc, tutti_strerror(rc), tutti_last_error());
    th_kv_destroy(kv);
    return 1;
  }
  size_t hits[UNIVERSE];
  for (size_t i = 0; i < ps->u.count; i++) {
    const th_prompt* p = &ps->u.p[i];
    rc = tutti_lookup(rt, p->tokens, p->n, NULL, 0, &hits[i]);
    if (rc != 0 || hits[i] % ct || hits[i] > p->n) {
      fprintf(stderr, "FAIL trial %ld: lookup of prompt %zu -> %d, %zu tokens: %s\n", trial, i,
              rc, hits[i], tutti_last_error());
      failed = 1;
      hits[i] = 0;
    }
  }
  it_tables tabs;
  it_tables_init(&tabs, spec.num_blocks, &rng);
  for (size_t i = 0; i < ps->u.count;) {
    it_req reqs[3];
    size_t n = 0;
    it_tables_reset(&tabs, &rng);
    for (; i < ps->u.count && n < 3; i++) {
      if (!hits[i]) continue;
      size_t nb = hits[i] / spec.block_tokens;
      reqs[n++] = (it_req){&ps->u.p[i], it_tables_take(&tabs, nb), nb, 0, hits[i]};
    }
    if (!n) break;
    it_outcome out;
    it_load(rt, kv, reqs, n, &out);
    if (out.wrong_bytes) {
      __atomic_add_fetch(&st->wrong_bytes, out.wrong_bytes, __ATOMIC_RELAXED);
      fprintf(stderr, "FAIL trial %ld: load (%s) -> %d (%s): %zu wrong bytes; first: %s\n", trial,
              it_spec_describe(&spec, desc, sizeof desc), out.rc, tutti_strerror(out.rc),
              out.wrong_bytes, out.msg);
      failed = 1;
    }
    if (out.rc == TUTTI_ECORRUPT)
      __atomic_add_fetch(&st->loads_corrupt, 1, __ATOMIC_RELAXED);
    else if (out.rc == TUTTI_ENOENT)
      __atomic_add_fetch(&st->loads_missing, 1, __ATOMIC_RELAXED);
    else if (out.rc != 0) {
      fprintf(stderr, "FAIL trial %ld: load -> %d (%s): %s\n", trial, out.rc,
              tutti_strerror(out.rc), out.msg);
      failed = 1;
    }
    if (it_inconsistent(reqs, n, &out, ct)) {
      fprintf(stderr, "FAIL trial %ld: load -> %d but a result says otherwise\n", trial, out.rc);
      failed = 1;
    }
    uint64_t ok = 0;
    for (size_t k = 0; k < n; k++) ok += out.res[k].chunks_ok;
    __atomic_add_fetch(&st->chunks_verified, ok, __ATOMIC_RELAXED);
  }
  it_tables_free(&tabs);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  return failed;
}

static void test_corrupt(void** state) {
  (void)state;
  const uint64_t seed = th_base_seed();
  uint64_t rng = th_mix64(seed ^ 0xC022u);
  stats* st = mmap(NULL, sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(st != MAP_FAILED);
  memset(st, 0, sizeof *st);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const size_t shapes = it_shape_count();
  const long per_pool = (g_trials + (long)shapes - 1) / (long)shapes;
  long trial = 0;
  for (size_t si = 0; si < shapes && trial < g_trials; si++) {
    pool_state ps;
    char desc[256];
    make_pool(&ps, si, seed);
    fprintf(stderr, "# pool %zu: %s, %u slots\n", si,
            it_shape_describe(&ps.shape, desc, sizeof desc), SLOTS);
    unsigned char* img = NULL;
    assert_int_equal(posix_memalign((void**)&img, BLOCK, ps.file_bytes), 0);
    for (long k = 0; k < per_pool && trial < g_trials; k++, trial++) {
      int kinds[3], nk = 0;
      int want = th_rand_below(&rng, 10) < 6 ? 1 : 2 + (int)th_rand_below(&rng, 2);
      memcpy(img, ps.snap[2], ps.file_bytes);
      for (int tries = 0; nk < want && tries < 20; tries++) {
        int kind = (int)th_rand_below(&rng, C_COUNT);
        if (corrupt(&ps, img, kind, &rng)) kinds[nk++] = kind;
      }
      if (write_whole(ps.path, img, ps.file_bytes) != 0)
        fail_msg("cannot write %s: %s", ps.path, strerror(errno));
      uint64_t wrong_before = st->wrong_bytes;
      fflush(NULL);
      pid_t pid = fork();
      assert_true(pid >= 0);
      if (pid == 0) _exit(check_pool(&ps, th_mix64(seed ^ (uint64_t)trial), st, trial));
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      st->trials++;
      int wrong = st->wrong_bytes != wrong_before;
      for (int i = 0; i < nk; i++) {
        st->applied[kinds[i]]++;
        st->with_wrong_bytes[kinds[i]] += (uint64_t)wrong;
      }
      if (nk == 1) {
        st->alone[kinds[0]]++;
        st->alone_wrong[kinds[0]] += (uint64_t)wrong;
      }
      int bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (WIFSIGNALED(status))
        fprintf(stderr, "FAIL trial %ld: the reopen died of signal %d (%s)\n", trial,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
      if (bad) {
        st->failures++;
        fprintf(stderr, "  trial %ld (pool %zu) applied:", trial, si);
        for (int i = 0; i < nk; i++) fprintf(stderr, "%s %s", i ? "," : "", corruption_names[kinds[i]]);
        fprintf(stderr, "\n");
      }
    }
    free(img);
    free_pool(&ps);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "# %-36s %21s %21s\n", "corruption", "trials (wrong bytes)",
          "alone (wrong bytes)");
  for (int k = 0; k < C_COUNT; k++)
    fprintf(stderr, "# %-36s %14llu (%4llu) %14llu (%4llu)\n", corruption_names[k],
            (unsigned long long)st->applied[k], (unsigned long long)st->with_wrong_bytes[k],
            (unsigned long long)st->alone[k], (unsigned long long)st->alone_wrong[k]);
  printf("corrupt: seed %llu, trials %llu, opens refused %llu, loads refused as corrupt %llu, "
         "loads missing %llu, chunks verified %llu, wrong bytes %llu, failed trials %llu, %.1f s\n",
         (unsigned long long)seed, (unsigned long long)st->trials,
         (unsigned long long)st->opens_refused, (unsigned long long)st->loads_corrupt,
         (unsigned long long)st->loads_missing, (unsigned long long)st->chunks_verified,
         (unsigned long long)st->wrong_bytes, (unsigned long long)st->failures, secs);
  fflush(stdout);
  uint64_t failures = st->failures, wrong = st->wrong_bytes;
  munmap(st, sizeof *st);
  if (failures)
    fail_msg("%llu of %ld trials failed, %llu wrong bytes loaded (seed %llu; rerun: "
             "TUTTI_TEST_SEED=%llu integrity_corrupt --trials %ld)",
             (unsigned long long)failures, g_trials, (unsigned long long)wrong,
             (unsigned long long)seed, (unsigned long long)seed, g_trials);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      g_trials = strtol(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: %s [--trials N]\n", argv[0]);
      return 2;
    }
  }
  if (g_trials < 1) g_trials = 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_corrupt)};
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("corrupt", tests, NULL, NULL);
}
