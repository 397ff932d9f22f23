// SPDX-License-Identifier: Apache-2.0
/* faultshim.c — LD_PRELOAD shim that injects I/O faults into the calls tutti makes on pool files.
 *
 * Only descriptors opened from a path under $TUTTI_FAULT_PREFIX are touched; everything else
 * goes straight to libc. Calls are counted per site, a site being the call (open, pread,
 * pwrite, preadv, pwritev, fsync, fdatasync, fallocate, ftruncate) and the region its offset
 * falls in: "sb" (the superblock, below 4 KiB), "rec" (commit records, below
 * $TUTTI_FAULT_DATA_OFFSET, 1 MiB by default) or "data"; calls without an offset are region "-".
 *
 * $TUTTI_FAULT_PLAN lists faults separated by ';', each "call:region:kind:nth[:count]": the
 * nth call (from 1) of that site and the count-1 after it get the fault (count 0: every call
 * from the nth on). region "*" matches any region. Kinds:
 *   eio, enospc, eacces, eintr  the call fails with that errno (posix_fallocate returns it)
 *   short                       a read or write moves only part of the bytes (whole 4 KiB
 *                               blocks, so O_DIRECT stays aligned; not applied when the call
 *                               moves 4 KiB or less)
 *   lost                        a write reports success and writes nothing
 *   flip                        a read returns one byte flipped; a write stores one byte
 *                               flipped (the caller's buffer is not touched)
 *   stall                       a read sleeps $TUTTI_FAULT_STALL_MS (default 1000) first,
 *                               then reads (a device that answers late)
 * $TUTTI_FAULT_SEED picks the flipped bytes. $TUTTI_FAULT_COUNTS names a file that receives a
 * line "fired CALL REGION KIND N" per injected fault as it happens and, at exit, a line
 * "site CALL REGION CALLS" per site; each injected fault is also reported on stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { C_OPEN, C_PREAD, C_PWRITE, C_PREADV, C_PWRITEV, C_FSYNC, C_FDATASYNC, C_FALLOCATE,
       C_FTRUNCATE, C_COUNT };
static const char* const call_names[C_COUNT] = {"open",    "pread",  "pwrite",
                                                 "preadv",  "pwritev", "fsync",
                                                 "fdatasync", "fallocate", "ftruncate"};
enum { R_SB, R_REC, R_DATA, R_NONE, R_COUNT };
static const char* const region_names[R_COUNT] = {"sb", "rec", "data", "-"};
enum { K_EIO, K_ENOSPC, K_EACCES, K_EINTR, K_SHORT, K_LOST, K_FLIP, K_STALL, K_COUNT };
static const char* const kind_names[K_COUNT] = {"eio",   "enospc", "eacces", "eintr",
                                                 "short", "lost",   "flip",   "stall"};

#define MAX_FAULTS 16
#define MAX_FDS 65536

typedef struct fault {
  int call, region; /* region -1: any */
  int kind;
  uint64_t nth, count;
} fault;

static struct {
  pthread_once_t once;
  char prefix[4096];
  size_t prefix_len;
  uint64_t data_offset;
  uint64_t seed;
  fault faults[MAX_FAULTS];
  int nfaults;
  char counts_path[4096];
  uint64_t calls[C_COUNT][R_COUNT];
  unsigned char tracked[MAX_FDS];
  pthread_mutex_t mu;
} S = {PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* The real functions. */
static int (*real_open)(const char*, int, ...);
static int (*real_open64)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static int (*real_openat64)(int, const char*, int, ...);
static int (*real_close)(int);
static ssize_t (*real_pread)(int, void*, size_t, off_t);
static ssize_t (*real_pread64)(int, void*, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void*, size_t, off_t);
static ssize_t (*real_preadv)(int, const struct iovec*, int, off_t);
static ssize_t (*real_preadv64)(int, const struct iovec*, int, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec*, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec*, int, off_t);
static ssize_t (*real_preadv2)(int, const struct iovec*, int, off_t, int);
static ssize_t (*real_pwritev2)(int, const struct iovec*, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);

static int find_name(const char* s, size_t len, const char* const* names, int n) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
  return -1;
}

static void bad_plan(const char* plan) {
  fprintf(stderr, "faultshim: cannot parse TUTTI_FAULT_PLAN entry '%s'\n", plan);
  abort();
}

/* "call:region:kind:nth[:count]" */
static void parse_fault(const char* s, size_t len) {
  char buf[256];
  if (len == 0) return;
  if (len >= sizeof buf || S.nfaults == MAX_FAULTS) bad_plan(s);
  memcpy(buf, s, len);
  buf[len] = '\0';
  char* fields[5] = {0};
  int nf = 0;
  char* save = NULL;
  for (char* t = strtok_r(buf, ":", &save); t && nf < 5; t = strtok_r(NULL, ":", &save))
    fields[nf++] = t;
  if (nf < 4) bad_plan(buf);
  fault f;
  f.call = find_name(fields[0], strlen(fields[0]), call_names, C_COUNT);
  f.region = strcmp(fields[1], "*") == 0
                 ? -1
                 : find_name(fields[1], strlen(fields[1]), region_names, R_COUNT);
  f.kind = find_name(fields[2], strlen(fields[2]), kind_names, K_COUNT);
  f.nth = strtoull(fields[3], NULL, 10);
  f.count = nf > 4 ? strtoull(fields[4], NULL, 10) : 1;
  if (f.call < 0 || (f.region < 0 && strcmp(fields[1], "*") != 0) || f.kind < 0 || f.nth == 0)
    bad_plan(s);
  S.faults[S.nfaults++] = f;
}

#define RESOLVE(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)

static void init(void) {
  RESOLVE(open);
  RESOLVE(open64);
  RESOLVE(openat);
  RESOLVE(openat64);
  RESOLVE(close);
  RESOLVE(pread);
  RESOLVE(pread64);
  RESOLVE(pwrite);
  RESOLVE(pwrite64);
  RESOLVE(preadv);
  RESOLVE(preadv64);
  RESOLVE(pwritev);
  RESOLVE(pwritev64);
  RESOLVE(preadv2);
  RESOLVE(pwritev2);
  RESOLVE(fsync);
  RESOLVE(fdatasync);
  RESOLVE(posix_fallocate);
  RESOLVE(posix_fallocate64);
  RESOLVE(fallocate);
  RESOLVE(fallocate64);
  RESOLVE(ftruncate);
  RESOLVE(ftruncate64);
  const char* p = getenv("TUTTI_FAULT_PREFIX");
  if (p && *p && strlen(p) < sizeof S.prefix) {
    strcpy(S.prefix, p);
    S.prefix_len = strlen(p);
  }
  const char* d = getenv("TUTTI_FAULT_DATA_OFFSET");
  S.data_offset = d && *d ? strtoull(d, NULL, 0) : (1u << 20);
  const char* seed = getenv("TUTTI_FAULT_SEED");
  S.seed = seed && *seed ? strtoull(seed, NULL, 0) : 1;
  const char* c = getenv("TUTTI_FAULT_COUNTS");
  if (c && strlen(c) < sizeof S.counts_path) strcpy(S.counts_path, c);
  const char* plan = getenv("TUTTI_FAULT_PLAN");
  while (plan && *plan) {
    const char* end = strchr(plan, ';');
    size_t len = end ? (size_t)(end - plan) : strlen(plan);
    parse_fault(plan, len);
    plan = end ? end + 1 : NULL;
  }
}

static void ensure_init(void) { pthread_once(&S.once, init); }

__attribute__((constructor)) static void shim_start(void) { ensure_init(); }

/* Appends a line to $TUTTI_FAULT_COUNTS: a child that fails may leave with _exit. */
static void append_count_line(const char* line) {
  if (!S.counts_path[0]) return;
  int fd = real_open(S.counts_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, strlen(line));
  (void)w;
  real_close(fd);
}

__attribute__((destructor)) static void shim_stop(void) {
  char line[128];
  for (int c = 0; c < C_COUNT; c++)
    for (int r = 0; r < R_COUNT; r++)
      if (S.calls[c][r]) {
        snprintf(line, sizeof line, "site %s %s %llu\n", call_names[c], region_names[r],
                 (unsigned long long)S.calls[c][r]);
        append_count_line(line);
      }
}

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static int is_tracked(int fd) {
  return fd >= 0 && fd < MAX_FDS && __atomic_load_n(&S.tracked[fd], __ATOMIC_ACQUIRE);
}

static void track(int fd, const char* path) {
  if (fd < 0 || fd >= MAX_FDS) return;
  int ours = S.prefix_len && path && strncmp(path, S.prefix, S.prefix_len) == 0;
  __atomic_store_n(&S.tracked[fd], (unsigned char)ours, __ATOMIC_RELEASE);
}

static int region_of(off_t off) {
  if (off < 0) return R_NONE;
  if ((uint64_t)off < 4096) return R_SB;
  if ((uint64_t)off < S.data_offset) return R_REC;
  return R_DATA;
}

/* Counts the call and returns the fault kind to inject, or -1. *n gets the call's number. */
static int decide(int call, int region, uint64_t* n) {
  uint64_t k = __atomic_add_fetch(&S.calls[call][region], 1, __ATOMIC_SEQ_CST);
  *n = k;
  for (int i = 0; i < S.nfaults; i++) {
    const fault* f = &S.faults[i];
    if (f->call != call || (f->region >= 0 && f->region != region)) continue;
    if (k >= f->nth && (f->count == 0 || k < f->nth + f->count)) return f->kind;
  }
  return -1;
}

static void report(int call, int region, int kind, uint64_t n) {
  char line[128];
  snprintf(line, sizeof line, "fired %s %s %s %llu\n", call_names[call], region_names[region],
           kind_names[kind], (unsigned long long)n);
  pthread_mutex_lock(&S.mu);
  append_count_line(line);
  pthread_mutex_unlock(&S.mu);
  fprintf(stderr, "# faultshim: %s %s call %llu: %s\n", call_names[call], region_names[region],
          (unsigned long long)n, kind_names[kind]);
}

static int errno_of(int kind) {
  switch (kind) {
    case K_EIO: return EIO;
    case K_ENOSPC: return ENOSPC;
    case K_EACCES: return EACCES;
    case K_EINTR: return EINTR;
    default: return 0;
  }
}

/* The stall kind's sleep. */
static void stall(void) {
  const char* ms = getenv("TUTTI_FAULT_STALL_MS");
  long n = ms ? atol(ms) : 1000;
  struct timespec t = {n / 1000, (n % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* A shorter length in whole 4 KiB blocks, or 0 when the call is too small to be cut. */
static size_t short_len(size_t len) {
  if (len <= 4096) return 0;
  size_t half = (len / 2) & ~(size_t)4095;
  return half ? half : 4096;
}

static size_t iov_total(const struct iovec* iov, int cnt) {
  size_t t = 0;
  for (int i = 0; i < cnt; i++) t += iov[i].iov_len;
  return t;
}

/* ---- open / close ---------------------------------------------------------------------- */

static int open_fault(const char* path) {
  if (!S.prefix_len || !path || strncmp(path, S.prefix, S.prefix_len) != 0) return 0;
  uint64_t n;
  int kind = decide(C_OPEN, R_NONE, &n);
  if (kind < 0 || !errno_of(kind)) return 0;
  report(C_OPEN, R_NONE, kind, n);
  errno = errno_of(kind);
  return -1;
}

#define OPEN_MODE(flags, mode)                                         \
  mode_t mode = 0;                                                     \
  if ((flags) & (O_CREAT | __O_TMPFILE)) {                             \
    va_list ap;                                                        \
    va_start(ap, flags);                                               \
    mode = (mode_t)va_arg(ap, int);                                    \
    va_end(ap);                                                        \
  }

int open(const char* path, int flags, ...) {
  ensure_init();
  OPEN_MODE(flags, mode);
  if (open_fault(path)) return -1;
  int fd = real_open(path, flags, mode);
  track(fd, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  ensure_init();
  OPEN_MODE(flags, mode);
  if (open_fault(path)) return -1;
  int fd = real_open64(path, flags, mode);
  track(fd, path);
  return fd;
}

int openat(int dirfd, const char* path, int flags, ...) {
  ensure_init();
  OPEN_MODE(flags, mode);
  if (path[0] == '/' && open_fault(path)) return -1;
  int fd = real_openat(dirfd, path, flags, mode);
  track(fd, path[0] == '/' ? path : NULL);
  return fd;
}

int openat64(int dirfd, const char* path, int flags, ...) {
  ensure_init();
  OPEN_MODE(flags, mode);
  if (path[0] == '/' && open_fault(path)) return -1;
  int fd = real_openat64(dirfd, path, flags, mode);
  track(fd, path[0] == '/' ? path : NULL);
  return fd;
}

int close(int fd) {
  ensure_init();
  if (fd >= 0 && fd < MAX_FDS) __atomic_store_n(&S.tracked[fd], 0, __ATOMIC_RELEASE);
  return real_close(fd);
}

/* ---- reads ----------------------------------------------------------------------------- */

/* Flips one byte of the first `got` bytes of the iovecs. */
static void flip_iov(const struct iovec* iov, int cnt, size_t got, uint64_t n, int call) {
  if (got == 0) return;
  uint64_t h = mix64(S.seed ^ mix64(((uint64_t)call << 40) ^ n));
  size_t at = (size_t)(h % got);
  unsigned char bit = (unsigned char)(1u << ((h >> 32) & 7));
  for (int i = 0; i < cnt; i++) {
    if (at < iov[i].iov_len) {
      ((unsigned char*)iov[i].iov_base)[at] ^= bit;
      return;
    }
    at -= iov[i].iov_len;
  }
}

/* Cuts an iovec list to `len` bytes into `out` (at most IOV_MAX entries). */
static int cut_iov(const struct iovec* iov, int cnt, size_t len, struct iovec* out) {
  int k = 0;
  for (int i = 0; i < cnt && len; i++) {
    out[k] = iov[i];
    if (out[k].iov_len > len) out[k].iov_len = len;
    len -= out[k].iov_len;
    k++;
  }
  return k;
}

typedef ssize_t (*readv_fn)(int, const struct iovec*, int, off_t);

static ssize_t do_readv(int call, int fd, const struct iovec* iov, int cnt, off_t off,
                        ssize_t (*rv)(int, const struct iovec*, int, off_t, int), readv_fn plain,
                        int flags) {
#define REAL_RV(i_, c_) (rv ? rv(fd, (i_), (c_), off, flags) : plain(fd, (i_), (c_), off))
  if (!is_tracked(fd)) return REAL_RV(iov, cnt);
  uint64_t n;
  int region = region_of(off);
  int kind = decide(call, region, &n);
  if (kind < 0) return REAL_RV(iov, cnt);
  if (errno_of(kind)) {
    report(call, region, kind, n);
    errno = errno_of(kind);
    return -1;
  }
  if (kind == K_SHORT) {
    size_t want = short_len(iov_total(iov, cnt));
    if (!want || cnt > 1024) return REAL_RV(iov, cnt);
    struct iovec cut[1024];
    int k = cut_iov(iov, cnt, want, cut);
    report(call, region, kind, n);
    return REAL_RV(cut, k);
  }
  if (kind == K_STALL) {
    report(call, region, kind, n);
    stall();
    return REAL_RV(iov, cnt);
  }
  if (kind == K_FLIP) {
    ssize_t got = REAL_RV(iov, cnt);
    if (got > 0) {
      flip_iov(iov, cnt, (size_t)got, n, call);
      report(call, region, kind, n);
    }
    return got;
  }
  return REAL_RV(iov, cnt); /* lost: a read cannot lose anything */
#undef REAL_RV
}

static ssize_t do_pread(int call, int fd, void* buf, size_t len, off_t off,
                        ssize_t (*real)(int, void*, size_t, off_t)) {
  if (!is_tracked(fd)) return real(fd, buf, len, off);
  uint64_t n;
  int region = region_of(off);
  int kind = decide(call, region, &n);
  if (kind < 0) return real(fd, buf, len, off);
  if (errno_of(kind)) {
    report(call, region, kind, n);
    errno = errno_of(kind);
    return -1;
  }
  if (kind == K_STALL) {
    report(call, region, kind, n);
    stall();
    return real(fd, buf, len, off);
  }
  if (kind == K_SHORT) {
    size_t want = short_len(len);
    if (!want) return real(fd, buf, len, off);
    report(call, region, kind, n);
    return real(fd, buf, want, off);
  }
  if (kind == K_FLIP) {
    ssize_t got = real(fd, buf, len, off);
    if (got > 0) {
      struct iovec one = {buf, (size_t)got};
      flip_iov(&one, 1, (size_t)got, n, call);
      report(call, region, kind, n);
    }
    return got;
  }
  return real(fd, buf, len, off);
}

ssize_t pread(int fd, void* buf, size_t len, off_t off) {
  ensure_init();
  return do_pread(C_PREAD, fd, buf, len, off, real_pread);
}
ssize_t pread64(int fd, void* buf, size_t len, off_t off) {
  ensure_init();
  return do_pread(C_PREAD, fd, buf, len, off, real_pread64);
}
ssize_t preadv(int fd, const struct iovec* iov, int cnt, off_t off) {
  ensure_init();
  return do_readv(C_PREADV, fd, iov, cnt, off, NULL, real_preadv, 0);
}
ssize_t preadv64(int fd, const struct iovec* iov, int cnt, off_t off) {
  ensure_init();
  return do_readv(C_PREADV, fd, iov, cnt, off, NULL, real_preadv64, 0);
}
ssize_t preadv2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  ensure_init();
  return do_readv(C_PREADV, fd, iov, cnt, off, real_preadv2, NULL, flags);
}

/* ---- writes ---------------------------------------------------------------------------- */

/* Writes the bytes of the iovecs with one byte flipped, from an aligned copy. */
static ssize_t write_flipped(int fd, const struct iovec* iov, int cnt, off_t off, uint64_t n,
                             int call) {
  size_t total = iov_total(iov, cnt);
  void* copy = NULL;
  if (posix_memalign(&copy, 4096, total ? total : 1) != 0) {
    errno = ENOMEM;
    return -1;
  }
  size_t at = 0;
  for (int i = 0; i < cnt; i++) {
    memcpy((char*)copy + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  struct iovec one = {copy, total};
  flip_iov(&one, 1, total, n, call);
  ssize_t r = real_pwrite64(fd, copy, total, off);
  int saved = errno;
  free(copy);
  errno = saved;
  return r;
}

static ssize_t do_writev(int call, int fd, const struct iovec* iov, int cnt, off_t off,
                         ssize_t (*wv)(int, const struct iovec*, int, off_t, int),
                         readv_fn plain, int flags) {
#define REAL_WV(i_, c_) (wv ? wv(fd, (i_), (c_), off, flags) : plain(fd, (i_), (c_), off))
  if (!is_tracked(fd)) return REAL_WV(iov, cnt);
  uint64_t n;
  int region = region_of(off);
  int kind = decide(call, region, &n);
  if (kind < 0) return REAL_WV(iov, cnt);
  if (errno_of(kind)) {
    report(call, region, kind, n);
    errno = errno_of(kind);
    return -1;
  }
  if (kind == K_SHORT) {
    size_t want = short_len(iov_total(iov, cnt));
    if (!want || cnt > 1024) return REAL_WV(iov, cnt);
    struct iovec cut[1024];
    int k = cut_iov(iov, cnt, want, cut);
    report(call, region, kind, n);
    return REAL_WV(cut, k);
  }
  if (kind == K_LOST) {
    report(call, region, kind, n);
    return (ssize_t)iov_total(iov, cnt);
  }
  if (kind == K_FLIP) {
    report(call, region, kind, n);
    return write_flipped(fd, iov, cnt, off, n, call);
  }
  return REAL_WV(iov, cnt);
#undef REAL_WV
}

static ssize_t do_pwrite(int call, int fd, const void* buf, size_t len, off_t off,
                         ssize_t (*real)(int, const void*, size_t, off_t)) {
  if (!is_tracked(fd)) return real(fd, buf, len, off);
  uint64_t n;
  int region = region_of(off);
  int kind = decide(call, region, &n);
  if (kind < 0) return real(fd, buf, len, off);
  if (errno_of(kind)) {
    report(call, region, kind, n);
    errno = errno_of(kind);
    return -1;
  }
  if (kind == K_SHORT) {
    size_t want = short_len(len);
    if (!want) return real(fd, buf, len, off);
    report(call, region, kind, n);
    return real(fd, buf, want, off);
  }
  if (kind == K_LOST) {
    report(call, region, kind, n);
    return (ssize_t)len;
  }
  if (kind == K_FLIP) {
    struct iovec one = {(void*)buf, len};
    report(call, region, kind, n);
    return write_flipped(fd, &one, 1, off, n, call);
  }
  return real(fd, buf, len, off);
}

ssize_t pwrite(int fd, const void* buf, size_t len, off_t off) {
  ensure_init();
  return do_pwrite(C_PWRITE, fd, buf, len, off, real_pwrite);
}
ssize_t pwrite64(int fd, const void* buf, size_t len, off_t off) {
  ensure_init();
  return do_pwrite(C_PWRITE, fd, buf, len, off, real_pwrite64);
}
ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  ensure_init();
  return do_writev(C_PWRITEV, fd, iov, cnt, off, NULL, real_pwritev, 0);
}
ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) {
  ensure_init();
  return do_writev(C_PWRITEV, fd, iov, cnt, off, NULL, real_pwritev64, 0);
}
ssize_t pwritev2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  ensure_init();
  return do_writev(C_PWRITEV, fd, iov, cnt, off, real_pwritev2, NULL, flags);
}

/* ---- sync, allocation, truncation ------------------------------------------------------ */

/* 0: go ahead; else the errno to fail with. */
static int plain_fault(int call, int fd, int region) {
  if (!is_tracked(fd)) return 0;
  uint64_t n;
  int kind = decide(call, region, &n);
  if (kind < 0 || !errno_of(kind)) return 0;
  report(call, region, kind, n);
  return errno_of(kind);
}

int fsync(int fd) {
  ensure_init();
  int e = plain_fault(C_FSYNC, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_fsync(fd);
}

int fdatasync(int fd) {
  ensure_init();
  int e = plain_fault(C_FDATASYNC, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_fdatasync(fd);
}

int posix_fallocate(int fd, off_t off, off_t len) {
  ensure_init();
  int e = plain_fault(C_FALLOCATE, fd, R_NONE);
  return e ? e : real_posix_fallocate(fd, off, len);
}

int posix_fallocate64(int fd, off_t off, off_t len) {
  ensure_init();
  int e = plain_fault(C_FALLOCATE, fd, R_NONE);
  return e ? e : real_posix_fallocate64(fd, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
  ensure_init();
  int e = plain_fault(C_FALLOCATE, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len) {
  ensure_init();
  int e = plain_fault(C_FALLOCATE, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_fallocate64(fd, mode, off, len);
}

int ftruncate(int fd, off_t len) {
  ensure_init();
  int e = plain_fault(C_FTRUNCATE, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len) {
  ensure_init();
  int e = plain_fault(C_FTRUNCATE, fd, R_NONE);
  if (e) {
    errno = e;
    return -1;
  }
  return real_ftruncate64(fd, len);
}
