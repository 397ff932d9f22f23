// SPDX-License-Identifier: Apache-2.0
/* faults: injected I/O errors, short/lost writes and bit flips end as clean errors or misses. */
/*
 * Usage: integrity_faults [--all] [--per-site K] [--only PLAN --variant V]
 *   Default (CI): for every fault kind and call site, K (default 4) of the site's calls, spread
 *   from the first to the last. --all: every call of every site. --only: one case, with its
 *   child's log. Seed: TUTTI_TEST_SEED (prompts, layouts and the flipped bytes).
 *
 * A case runs a fixed workload in a child process that loads tests/integrity/faultshim.c with
 * LD_PRELOAD; the shim injects one fault plan (see there) into the calls on the pool file. The
 * workload uses backend=posix with one I/O thread, so the nth call of a site is the same call
 * in every run. Three sessions: open (creating the pool), stores of prompts that share
 * prefixes into a pool of 8 slots (evictions, tombstones), lookups and loads of everything, a
 * clean close; reopen, more of the same; reopen and check. Every load is compared byte for
 * byte with the pattern. Then, without faults, a post-mortem process reopens the pool with
 * default options and loads every chunk a lookup reports.
 *
 * Clean means: an open fails with EIO, ENOSPC, ECORRUPT or EACCES; a store with EIO or ENOSPC;
 * a load with EIO, ENOENT or (after a lost write or bit flip) ECORRUPT; never EINTERNAL,
 * ENOMEM, a signal or a wrong byte. After honest faults (errors, short transfers: the storage
 * did what it said) the post-mortem must load every chunk it finds: anything committed is
 * intact. After lost writes and bit flips it may report ECORRUPT, never wrong bytes.
 *
 * Two variants of the workload: 0, a layout staged through bounce buffers (HND, fused K/V,
 * 2 KiB chunk-layers padded to 4 KiB); 1, NHD blocks read and written directly (vectored I/O).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integrity.h"

#ifndef TUTTI_FAULTSHIM_PATH
#define TUTTI_FAULTSHIM_PATH ""
#endif

#define UNIVERSE 12
#define MAX_CHUNKS 3
#define SLOTS 8
#define NUM_BLOCKS 48
#define NVARIANTS 2

/* Exit codes of a case's processes. */
enum { XC_OK = 0, XC_WRONG = 3, XC_UNCLEAN = 4, XC_INCONSISTENT = 5, XC_SETUP = 6 };

/* ---- The workload ---------------------------------------------------------------------- */

typedef struct wl {
  const char* dir;
  int variant;
  int honest;      /* the plan holds only errors and short transfers */
  int post_mortem; /* no faults: the reopen after the case */
  it_shape shape;
  th_kv_spec spec;
  th_kv* kv;
  it_universe u;
  char capacity[64];
  tutti_runtime* rt;
  uint64_t rng;
  size_t verified;
} wl;

static void wl_setup(wl* w, const char* dir, int variant, int honest, int post_mortem) {
  memset(w, 0, sizeof *w);
  w->dir = dir;
  w->variant = variant;
  w->honest = honest;
  w->post_mortem = post_mortem;
  w->rng = th_mix64(th_base_seed() ^ (0xFA17ull + (uint64_t)variant));
  w->shape = it_shape_get(variant == 0 ? 0 : 2);
  th_kv_spec s;
  memset(&s, 0, sizeof s);
  s.num_layers = w->shape.layers;
  s.num_kv_heads = w->shape.heads;
  s.head_dim = w->shape.head_dim;
  s.elem_bytes = w->shape.elem_bytes;
  s.num_blocks = NUM_BLOCKS;
  if (variant == 0) {
    s.block_tokens = 8;
    s.hnd = 1;
    s.fused = 1;
  } else {
    s.block_tokens = 16; /* 16 x 2 heads x 128 B: 4 KiB blocks, read straight into them */
  }
  w->spec = s;
  if (th_kv_create(&w->kv, &w->spec) != 0) it_child_fail(XC_SETUP, "cannot allocate the KV cache");
  it_capacity(w->capacity, sizeof w->capacity, &w->shape, SLOTS);
  it_universe_init(&w->u, th_mix64(th_base_seed() ^ 0xF0F0), UNIVERSE, w->shape.chunk_tokens,
                   MAX_CHUNKS);
}

static int one_of(int rc, const int* ok, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (rc == ok[i]) return 1;
  return 0;
}

/* Opens the pool; 0, or a clean failure code (the session is skipped). */
static int wl_open(wl* w) {
  static const char* faulted[] = {"backend", "posix", "threads", "1", "staging", "512K", NULL};
  static const char* defaults[] = {"staging", "512K", NULL};
  int rc = th_open(&w->rt, w->dir, w->capacity, w->shape.chunk_tokens,
                   w->post_mortem ? defaults : faulted, w->kv);
  static const int ok[] = {0, TUTTI_EIO, TUTTI_ENOSPC, TUTTI_ECORRUPT, TUTTI_EACCES};
  static const int ok_post[] = {0, TUTTI_ECORRUPT};
  if (w->post_mortem ? !one_of(rc, ok_post, 2) : !one_of(rc, ok, 5))
    it_child_fail(XC_UNCLEAN, "%sopen -> %d (%s): %s", w->post_mortem ? "post-mortem " : "", rc,
            tutti_strerror(rc), tutti_last_error());
  if (rc) fprintf(stderr, "# open -> %s: %s\n", tutti_strerror(rc), tutti_last_error());
  return rc;
}

static void wl_close(wl* w) {
  tutti_runtime_close(w->rt);
  w->rt = NULL;
}

/* Stores the whole chunks of the prompts listed (up to 3). */
static void wl_store(wl* w, const int* idx, size_t n) {
  it_tables tabs;
  it_req reqs[3];
  it_outcome out;
  const uint32_t ct = w->shape.chunk_tokens;
  it_tables_init(&tabs, w->spec.num_blocks, &w->rng);
  for (size_t i = 0; i < n; i++) {
    const th_prompt* p = &w->u.p[idx[i]];
    size_t end = it_whole_chunks(p, ct) * ct;
    size_t nb = end / w->spec.block_tokens;
    reqs[i] = (it_req){p, it_tables_take(&tabs, nb), nb, 0, end};
  }
  it_store(w->rt, w->kv, reqs, n, &out);
  it_tables_free(&tabs);
  static const int ok[] = {0, TUTTI_EIO, TUTTI_ENOSPC};
  if (!one_of(out.rc, ok, 3))
    it_child_fail(XC_UNCLEAN, "store -> %d (%s): %s", out.rc, tutti_strerror(out.rc), out.msg);
  if (it_inconsistent(reqs, n, &out, ct))
    it_child_fail(XC_INCONSISTENT, "store -> %d but a result says otherwise (status %d, %zu tokens)",
            out.rc, out.res[0].status, out.res[0].tokens);
  if (out.rc) fprintf(stderr, "# store -> %s: %s\n", tutti_strerror(out.rc), out.msg);
}

/* Looks up every prompt and loads what each lookup reports, three prompts a batch. */
static void wl_check_all(wl* w) {
  const uint32_t ct = w->shape.chunk_tokens;
  size_t hits[UNIVERSE];
  for (size_t i = 0; i < w->u.count; i++) {
    const th_prompt* p = &w->u.p[i];
    int rc = tutti_lookup(w->rt, p->tokens, p->n, NULL, 0, &hits[i]);
    if (rc != 0 || hits[i] % ct || hits[i] > p->n)
      it_child_fail(XC_UNCLEAN, "lookup of prompt %zu -> %d (%s), %zu tokens: %s", i, rc,
              tutti_strerror(rc), hits[i], tutti_last_error());
  }
  it_tables tabs;
  it_tables_init(&tabs, w->spec.num_blocks, &w->rng);
  for (size_t i = 0; i < w->u.count;) {
    it_req reqs[3];
    size_t n = 0;
    it_tables_reset(&tabs, &w->rng);
    for (; i < w->u.count && n < 3; i++) {
      if (!hits[i]) continue;
      size_t nb = hits[i] / w->spec.block_tokens;
      reqs[n++] = (it_req){&w->u.p[i], it_tables_take(&tabs, nb), nb, 0, hits[i]};
    }
    if (!n) break;
    it_outcome out;
    it_load(w->rt, w->kv, reqs, n, &out);
    if (out.wrong_bytes)
      it_child_fail(XC_WRONG, "%sload of %zu prompts -> %d (%s): %zu wrong bytes; first: %s",
              w->post_mortem ? "post-mortem " : "", n, out.rc, tutti_strerror(out.rc),
              out.wrong_bytes, out.msg);
    static const int ok_honest[] = {0, TUTTI_EIO, TUTTI_ENOENT};
    static const int ok_dishonest[] = {0, TUTTI_EIO, TUTTI_ENOENT, TUTTI_ECORRUPT};
    static const int ok_post_honest[] = {0};
    static const int ok_post_dishonest[] = {0, TUTTI_ECORRUPT};
    int clean = w->post_mortem ? (w->honest ? one_of(out.rc, ok_post_honest, 1)
                                            : one_of(out.rc, ok_post_dishonest, 2))
                               : (w->honest ? one_of(out.rc, ok_honest, 3)
                                            : one_of(out.rc, ok_dishonest, 4));
    if (!clean)
      it_child_fail(XC_UNCLEAN, "%sload of %zu prompts that lookups reported -> %d (%s)%s: %s",
              w->post_mortem ? "post-mortem " : "", n, out.rc, tutti_strerror(out.rc),
              w->honest ? " after honest faults only" : "", out.msg);
    if (it_inconsistent(reqs, n, &out, ct))
      it_child_fail(XC_INCONSISTENT, "load -> %d but a result says otherwise", out.rc);
    if (out.rc) fprintf(stderr, "# load -> %s: %s\n", tutti_strerror(out.rc), out.msg);
    for (size_t k = 0; k < n; k++) w->verified += out.res[k].chunks_ok;
  }
  it_tables_free(&tabs);
}

static void wl_free(wl* w) {
  it_universe_free(&w->u);
  th_kv_destroy(w->kv);
}

/* The faulted child: three sessions; a session whose open fails cleanly is skipped. */
static int child_main(const char* dir, int variant, const char* plan) {
  wl w;
  int honest = strstr(plan, ":lost:") == NULL && strstr(plan, ":flip:") == NULL;
  wl_setup(&w, dir, variant, honest, 0);
  static const int s1[] = {0, 1, 2}, s2[] = {3, 4}, s3[] = {5, 6, 7}, s4[] = {8, 9},
                   s5[] = {10, 11, 0};
  fprintf(stderr, "# session 1\n");
  if (wl_open(&w) == 0) {
    wl_store(&w, s1, 3);
    wl_check_all(&w);
    wl_store(&w, s2, 2);
    wl_store(&w, s3, 3);
    wl_check_all(&w);
    wl_close(&w);
  }
  fprintf(stderr, "# session 2\n");
  if (wl_open(&w) == 0) {
    wl_check_all(&w);
    wl_store(&w, s4, 2);
    wl_store(&w, s5, 3);
    wl_check_all(&w);
    wl_close(&w);
  }
  fprintf(stderr, "# session 3\n");
  if (wl_open(&w) == 0) {
    wl_check_all(&w);
    wl_close(&w);
  }
  fprintf(stderr, "# chunks verified: %zu\n", w.verified);
  wl_free(&w);
  return XC_OK;
}

/* After the case, without faults: default options, everything a lookup reports loads. */
static int post_mortem_main(const char* dir, int variant, int honest) {
  wl w;
  wl_setup(&w, dir, variant, honest, 1);
  if (wl_open(&w) == 0) {
    wl_check_all(&w);
    wl_close(&w);
  }
  fprintf(stderr, "# post-mortem chunks verified: %zu\n", w.verified);
  wl_free(&w);
  return XC_OK;
}

/* ---- The driver ------------------------------------------------------------------------ */

static char g_self[4096];
static char g_shim[4096];
static int g_all;
static int g_per_site = 4;

typedef struct site {
  char call[16], region[8];
  unsigned long calls;
} site;

static void read_file(const char* path, char* out, size_t cap) {
  out[0] = '\0';
  FILE* f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  fclose(f);
}

static const char* status_text(int status, char* buf, size_t cap) {
  if (WIFSIGNALED(status))
    snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else if (WEXITSTATUS(status) == XC_WRONG)
    snprintf(buf, cap, "WRONG BYTES");
  else if (WEXITSTATUS(status) == XC_UNCLEAN)
    snprintf(buf, cap, "an unclean error");
  else if (WEXITSTATUS(status) == XC_INCONSISTENT)
    snprintf(buf, cap, "an inconsistent result");
  else
    snprintf(buf, cap, "exit code %d", WEXITSTATUS(status));
  return buf;
}

/* Runs the faulted child (exec with the shim) then the post-mortem (fork). Returns 0 when both
 * are clean; else fills `why` and `details` (the faults injected and the failure from the log).
 * `fired` counts the faults injected; show_log prints the whole log. */
static int run_case(const char* plan, int variant, int show_log, site* sites, size_t* nsites,
                    unsigned* fired, char* why, size_t cap, char* details, size_t dcap) {
  char dir[4096], pool[4200], log[4200], counts[4200], text[16384], buf[128];
  why[0] = '\0';
  *fired = 0;
  if (th_mkdtemp(dir, sizeof dir) != 0) {
    snprintf(why, cap, "mkdtemp: %s", strerror(errno));
    return -1;
  }
  it_pool_path(pool, sizeof pool, dir);
  snprintf(log, sizeof log, "%s/log", dir);
  snprintf(counts, sizeof counts, "%s/counts", dir);
  int honest = strstr(plan, ":lost:") == NULL && strstr(plan, ":flip:") == NULL;
  int result = 0;

  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, cap, "fork: %s", strerror(errno));
    th_rmtree(dir);
    return -1;
  }
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    char var[16], seed[32];
    snprintf(var, sizeof var, "%d", variant);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)th_base_seed());
    it_preload_faultshim(g_shim, pool, plan);
    setenv("TUTTI_FAULT_SEED", seed, 1);
    setenv("TUTTI_FAULT_COUNTS", counts, 1);
    setenv("TUTTI_TEST_SEED", seed, 1);
    char* args[] = {g_self, "--child", dir, var, (char*)plan, NULL};
    execv(g_self, args);
    fprintf(stderr, "exec %s: %s\n", g_self, strerror(errno));
    _exit(XC_SETUP);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  /* what the shim counted and injected */
  read_file(counts, text, sizeof text);
  for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    site s;
    char kind[16];
    unsigned long n;
    if (sites && sscanf(line, "site %15s %7s %lu", s.call, s.region, &s.calls) == 3 &&
        *nsites < 64)
      sites[(*nsites)++] = s;
    else if (sscanf(line, "fired %15s %7s %15s %lu", s.call, s.region, kind, &n) == 4)
      (*fired)++;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != XC_OK) {
    snprintf(why, cap, "the faulted run ended with %s", status_text(status, buf, sizeof buf));
    result = 1;
  } else {
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
      int fd = open(log, O_WRONLY | O_APPEND | O_CLOEXEC);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      fprintf(stderr, "# post-mortem\n");
      _exit(post_mortem_main(dir, variant, honest));
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != XC_OK) {
      snprintf(why, cap, "the post-mortem reopen ended with %s",
               status_text(status, buf, sizeof buf));
      result = 1;
    }
  }
  if (show_log) {
    read_file(log, text, sizeof text);
    fputs(text, stderr);
  } else if (result && details) {
    /* the first faults injected, then the failure */
    size_t at = 0, shown = 0, more = 0;
    details[0] = '\0';
    read_file(log, text, sizeof text);
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      int is_fault = strncmp(line, "# faultshim", 11) == 0;
      if (is_fault && shown == 3) {
        more++;
        continue;
      }
      if (!is_fault && strncmp(line, "FAIL: ", 6) != 0 && strncmp(line, "# session", 9) != 0 &&
          strncmp(line, "# post-mortem", 13) != 0)
        continue;
      if (more) {
        at += (size_t)snprintf(details + at, at < dcap ? dcap - at : 0,
                               "    # ... %zu more faults\n", more);
        more = 0;
      }
      shown += is_fault;
      if (at < dcap) at += (size_t)snprintf(details + at, dcap - at, "    %s\n", line);
    }
    if (more && at < dcap) snprintf(details + at, dcap - at, "    # ... %zu more faults\n", more);
  }
  th_rmtree(dir);
  return result;
}

typedef struct kind_set {
  const char* kind;
  int persistent; /* also every call from the nth on */
} kind_set;

/* The kinds that make sense for a call. */
static size_t kinds_for(const char* call, kind_set* out) {
  size_t n = 0;
  int is_read = strcmp(call, "pread") == 0 || strcmp(call, "preadv") == 0;
  int is_write = strcmp(call, "pwrite") == 0 || strcmp(call, "pwritev") == 0;
  if (is_read || is_write) {
    out[n++] = (kind_set){"eio", 1};
    out[n++] = (kind_set){"eintr", 0};
    out[n++] = (kind_set){"short", 1};
    out[n++] = (kind_set){"flip", 0};
  }
  if (is_write) {
    out[n++] = (kind_set){"enospc", 1};
    out[n++] = (kind_set){"lost", 1};
  }
  if (strcmp(call, "fsync") == 0 || strcmp(call, "fdatasync") == 0) {
    out[n++] = (kind_set){"eio", 1};
    out[n++] = (kind_set){"enospc", 0};
  }
  if (strcmp(call, "fallocate") == 0) {
    out[n++] = (kind_set){"enospc", 0};
    out[n++] = (kind_set){"eio", 0};
  }
  if (strcmp(call, "ftruncate") == 0) out[n++] = (kind_set){"eio", 0};
  if (strcmp(call, "open") == 0) {
    out[n++] = (kind_set){"eio", 1};
    out[n++] = (kind_set){"eacces", 0};
  }
  return n;
}

typedef struct totals {
  long cases, fired, failures;
} totals;

static void one(const char* plan, int variant, totals* t) {
  char why[512], details[4096];
  unsigned fired = 0;
  int r = run_case(plan, variant, 0, NULL, NULL, &fired, why, sizeof why, details, sizeof details);
  t->cases++;
  t->fired += fired > 0;
  if (r) {
    t->failures++;
    fprintf(stderr,
            "FAIL case %ld: variant %d, plan %s: %s\n  reproduce: TUTTI_TEST_SEED=%llu "
            "integrity_faults --only '%s' --variant %d\n%s",
            t->cases, variant, plan, why, (unsigned long long)th_base_seed(), plan, variant,
            details);
  }
}

static void test_faults(void** state) {
  (void)state;
  totals t = {0, 0, 0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int v = 0; v < NVARIANTS; v++) {
    site sites[64];
    size_t nsites = 0;
    unsigned fired;
    char why[512];
    /* the dry run: no fault, every site counted */
    char details[4096];
    if (run_case("", v, 0, sites, &nsites, &fired, why, sizeof why, details, sizeof details) != 0) {
      t.failures++;
      fprintf(stderr, "FAIL variant %d without faults: %s\n%s", v, why, details);
      continue;
    }
    t.cases++;
    for (size_t s = 0; s < nsites; s++) {
      kind_set kinds[8];
      size_t nk = kinds_for(sites[s].call, kinds);
      unsigned long calls = sites[s].calls;
      fprintf(stderr, "# variant %d: %s %s: %lu calls\n", v, sites[s].call, sites[s].region,
              calls);
      for (size_t k = 0; k < nk; k++) {
        for (int persistent = 0; persistent <= kinds[k].persistent; persistent++) {
          /* which calls: all, or per_site of them from the first to the last */
          unsigned long picks = g_all || calls <= (unsigned long)g_per_site ? calls
                                                                            : (unsigned long)g_per_site;
          unsigned long last = 0;
          for (unsigned long i = 0; i < picks; i++) {
            unsigned long nth = picks == calls ? i + 1 : 1 + i * (calls - 1) / (picks - 1);
            if (nth == last) continue;
            last = nth;
            char plan[4096];
            snprintf(plan, sizeof plan, "%s:%s:%s:%lu:%d", sites[s].call, sites[s].region,
                     kinds[k].kind, nth, persistent ? 0 : 1);
            one(plan, v, &t);
          }
        }
      }
    }
    /* a dying disk: every call of every site fails from a point of the workload on */
    for (int quarter = 1; quarter <= 3; quarter++) {
      char plan[4096];
      size_t at = 0;
      plan[0] = '\0';
      for (size_t s = 0; s < nsites && at < sizeof plan - 64; s++) {
        if (strcmp(sites[s].call, "open") == 0 || strcmp(sites[s].call, "fallocate") == 0)
          continue;
        unsigned long nth = 1 + sites[s].calls * (unsigned long)quarter / 4;
        at += (size_t)snprintf(plan + at, sizeof plan - at, "%s%s:%s:eio:%lu:0", at ? ";" : "",
                               sites[s].call, sites[s].region, nth);
      }
      one(plan, v, &t);
    }
    /* a failed creation whose clean-up fails too */
    one("fallocate:-:enospc:1:1;ftruncate:-:eio:1:1", v, &t);
    one("fallocate:-:eio:1:1;ftruncate:-:eio:1:1", v, &t);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("faults: seed %llu, cases %ld (a fault fired in %ld), failures %ld, %.1f s\n",
         (unsigned long long)th_base_seed(), t.cases, t.fired, t.failures, secs);
  fflush(stdout);
  if (t.failures)
    fail_msg("%ld of %ld fault cases failed (seed %llu)", t.failures, t.cases,
             (unsigned long long)th_base_seed());
}

static void usage(const char* argv0) {
  fprintf(stderr, "usage: %s [--all] [--per-site K] [--only PLAN [--variant V]]\n", argv0);
  exit(2);
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "--child") == 0)
    return child_main(argv[2], atoi(argv[3]), argv[4]);
  const char* only = NULL;
  int variant = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--all") == 0)
      g_all = 1;
    else if (strcmp(argv[i], "--per-site") == 0 && i + 1 < argc)
      g_per_site = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc)
      variant = atoi(argv[++i]);
    else
      usage(argv[0]);
  }
  if (g_per_site < 2) g_per_site = 2;
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0) {
    fprintf(stderr, "# SKIP: cannot find this program (/proc/self/exe)\n");
    return TH_SKIP;
  }
  g_self[n] = '\0';
  const char* shim = getenv("TUTTI_FAULTSHIM");
  snprintf(g_shim, sizeof g_shim, "%s", shim && *shim ? shim : TUTTI_FAULTSHIM_PATH);
  if (!g_shim[0] || access(g_shim, R_OK) != 0) {
    fprintf(stderr, "# SKIP: no fault shim at '%s' (set TUTTI_FAULTSHIM)\n", g_shim);
    return TH_SKIP;
  }
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  if (only) {
    char why[512];
    unsigned fired = 0;
    int r = run_case(only, variant, 1, NULL, NULL, &fired, why, sizeof why, NULL, 0);
    printf("faults: plan %s, variant %d: %u faults injected, %s\n", only, variant, fired,
           r ? why : "clean");
    return r ? 1 : 0;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_faults)};
  return cmocka_run_group_tests_name("faults", tests, NULL, NULL);
}
