// SPDX-License-Identifier: Apache-2.0
/* lookup_client: a process that does not own the pool asks the runtime that does, through the
 * runtime's lookup socket (lookup_socket=PATH, tutti_lookup_client_*): the hits are the
 * runtime's own, a lease taken through the socket pins like a local one and ends with its
 * client, and when the serving runtime closes or dies the client gets TUTTI_EIO (a miss) and
 * finds a runtime restarted at the same path. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define CT 32u /* chunk tokens */

typedef struct fixture {
  th_kv_spec spec;
  th_kv* kv;
  tutti_runtime* rt;
  th_blocks alloc;
  uint64_t rng;
  char sock[1200];
  th_prompt leased; /* 4 chunks, stored first */
  int32_t leased_table[64];
  size_t leased_blocks;
} fixture;

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* A small pool (a few dozen chunks) serving lookups at <dir>/lookup.sock, holding `leased`. */
static void setup(fixture* f, const char* dir, uint64_t seed) {
  f->rng = th_base_seed() ^ seed;
  f->spec = th_spec_default();
  f->spec.num_blocks = 256;
  snprintf(f->sock, sizeof f->sock, "%s/lookup.sock", dir);
  TH_OK(th_kv_create(&f->kv, &f->spec));
  const char* extra[] = {"lookup_socket", f->sock, NULL};
  TH_OK(th_open(&f->rt, dir, "2M", CT, extra, f->kv));
  th_blocks_init(&f->alloc, f->spec.num_blocks, &f->rng);
  th_prompt_random(&f->leased, &f->rng, 4 * CT);
  f->leased_blocks = th_nblocks(f->leased.n, f->spec.block_tokens);
  th_blocks_take(&f->alloc, f->leased_table, f->leased_blocks);
  th_store_prompt(f->rt, f->kv, &f->leased, f->leased_table, f->leased_blocks);
}

/* Stores other prompts of 4 chunks, more than the pool holds. */
static void store_others(fixture* f) {
  th_store_random_prompts(f->rt, f->kv, &f->alloc, &f->rng, th_stats(f->rt).slots_total / 4 + 4, 4 * CT);
}

static void teardown(fixture* f) {
  th_prompt_free(&f->leased);
  th_blocks_free(&f->alloc);
  tutti_runtime_close(f->rt);
  th_kv_destroy(f->kv);
}

static size_t remote(tutti_lookup_client* c, const th_prompt* p) {
  size_t hit = 12345;
  TH_OK(tutti_lookup_client_query(c, p->tokens, p->n, p->salt_len ? p->salt : NULL, p->salt_len, 0, &hit, NULL));
  return hit;
}

static void test_a_client_sees_the_runtimes_hits_and_its_lease_pins(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x10C);
  /* a salted prompt sharing the leased one's tokens, and a longer prompt over the leased one */
  th_prompt salted, longer;
  th_prompt_init(&salted, f.leased.tokens, 3 * CT, "tenant", 6);
  int32_t table[64];
  th_blocks_take(&f.alloc, table, th_nblocks(salted.n, f.spec.block_tokens));
  th_store_prompt(f.rt, f.kv, &salted, table, th_nblocks(salted.n, f.spec.block_tokens));
  th_prompt_extend(&longer, &f.leased, f.leased.n, &f.rng, 6 * CT + 5);

  tutti_lookup_client* c = NULL;
  TH_OK(tutti_lookup_client_open(f.sock, 5000, &c));
  TH_EQ(remote(c, &f.leased), 4 * CT);
  TH_EQ(remote(c, &longer), th_lookup(f.rt, &longer));
  TH_EQ(remote(c, &longer), 4 * CT);
  TH_EQ(remote(c, &salted), 3 * CT);
  size_t hit = 99;
  TH_OK(tutti_lookup_client_query(c, salted.tokens, salted.n, NULL, 0, 0, &hit, NULL));
  TH_EQ(hit, 3 * CT); /* unsalted, its tokens are the leased prompt's: a hit of that one */
  TH_OK(tutti_lookup_client_query(c, salted.tokens, salted.n, "other", 5, 0, &hit, NULL));
  TH_EQ(hit, 0);

  /* A lease taken through the socket pins in the runtime like a local one. */
  uint64_t lease = 0;
  TH_OK(tutti_lookup_client_query(c, f.leased.tokens, f.leased.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  if (lease == 0) fail_msg("a lease through the socket has no id");
  store_others(&f);
  TH_EQ(th_stats(f.rt).evictions > 0, 1);
  TH_EQ(remote(c, &f.leased), 4 * CT);
  int32_t into[64];
  th_blocks_reset(&f.alloc, &f.rng);
  th_blocks_take(&f.alloc, into, f.leased_blocks);
  th_load_and_check(f.rt, f.kv, &f.leased, into, f.leased_blocks, 4 * CT);
  TH_OK(tutti_lookup_client_release(c, lease));
  TH_OK(tutti_lookup_client_release(c, lease)); /* a second time: nothing */
  store_others(&f);
  TH_EQ(remote(c, &f.leased), 0); /* released: evictable like any chunk */
  TH_EQ(th_lookup(f.rt, &f.leased), 0);

  tutti_lookup_client_close(c);
  tutti_lookup_client_close(NULL);
  th_prompt_free(&salted);
  th_prompt_free(&longer);
  teardown(&f);
}

static void test_a_lease_ends_with_its_client_or_its_ttl(void** state) {
  th_env* env = *state;
  fixture f;
  setup(&f, env->dir, 0x2EA5);
  tutti_lookup_client* c = NULL;
  size_t hit = 0;
  uint64_t lease = 0;
  TH_OK(tutti_lookup_client_open(f.sock, 0, &c));
  TH_OK(tutti_lookup_client_query(c, f.leased.tokens, f.leased.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  tutti_lookup_client_close(c); /* the runtime sees the connection end and releases the lease */
  for (int i = 0; i < 200 && th_lookup(f.rt, &f.leased) == 4 * CT; i++) {
    store_others(&f);
    if (th_lookup(f.rt, &f.leased) == 4 * CT) sleep_ms(5); /* the runtime may not have seen it yet */
  }
  TH_EQ(th_lookup(f.rt, &f.leased), 0);

  /* with a ttl: pinned for that long only, while the client stays connected */
  th_blocks_reset(&f.alloc, &f.rng);
  th_blocks_take(&f.alloc, f.leased_table, f.leased_blocks);
  th_store_prompt(f.rt, f.kv, &f.leased, f.leased_table, f.leased_blocks);
  TH_OK(tutti_lookup_client_open(f.sock, 0, &c));
  TH_OK(tutti_lookup_client_query(c, f.leased.tokens, f.leased.n, NULL, 0, 20, &hit, &lease));
  TH_EQ(hit, 4 * CT);
  sleep_ms(60);
  store_others(&f);
  TH_EQ(th_lookup(f.rt, &f.leased), 0);
  TH_OK(tutti_lookup_client_release(c, lease));
  tutti_lookup_client_close(c);
  teardown(&f);
}

/* ---- The serving runtime in another process, killed and started again --------------------- */

/* The child: opens the pool in `dir` with the socket, stores `p` when asked to, says 'r' on
 * `ready`, and waits to be killed. No cmocka here: a failure exits, and the parent reads EOF. */
static void serve_in_child(const char* dir, const char* sock, const th_prompt* p, int store, int ready) {
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  const char* extra[] = {"lookup_socket", sock, NULL};
  if (th_kv_create(&kv, &spec) != 0 || th_open(&rt, dir, "8M", CT, extra, kv) != 0) _exit(2);
  if (store) {
    int32_t table[64];
    for (int i = 0; i < 64; i++) table[i] = i;
    const size_t nb = th_nblocks(p->n, spec.block_tokens);
    th_kv_fill(kv, p, table, 0, p->n);
    tutti_request r = th_request(p, table, nb, 0, TUTTI_TOKENS_ALL);
    tutti_result res;
    if (th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, 0, spec.num_layers) != 0 || res.status != 0) _exit(3);
  }
  if (write(ready, "r", 1) != 1) _exit(4);
  for (;;) pause();
}

static pid_t start_server(const char* dir, const char* sock, const th_prompt* p, int store) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    serve_in_child(dir, sock, p, store, fds[1]);
  }
  close(fds[1]);
  char ok = 0;
  const ssize_t n = read(fds[0], &ok, 1);
  close(fds[0]);
  if (n != 1 || ok != 'r') {
    int status = 0;
    waitpid(pid, &status, 0);
    fail_msg("the serving process did not come up (exit status %d)", WEXITSTATUS(status));
  }
  return pid;
}

static void kill_server(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

static void test_the_owner_dies_and_comes_back(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xDEAD;
  th_prompt p;
  th_prompt_random(&p, &rng, 3 * CT + 7);
  char sock[1200];
  snprintf(sock, sizeof sock, "%s/lookup.sock", env->dir);

  pid_t owner = start_server(env->dir, sock, &p, 1);
  tutti_lookup_client* c = NULL;
  size_t hit = 0;
  uint64_t lease = 0;
  TH_OK(tutti_lookup_client_open(sock, 5000, &c));
  TH_OK(tutti_lookup_client_query(c, p.tokens, p.n, NULL, 0, 0, &hit, &lease));
  TH_EQ(hit, 3 * CT);

  kill_server(owner); /* mid-lease, without closing anything */
  TH_ERR(TUTTI_EIO, tutti_lookup_client_query(c, p.tokens, p.n, NULL, 0, 0, &hit, NULL));
  TH_ERR(TUTTI_EIO, tutti_lookup_client_query(c, p.tokens, p.n, NULL, 0, 0, &hit, NULL)); /* still none */
  TH_OK(tutti_lookup_client_release(c, lease)); /* it ended with the connection */

  /* A runtime restarted on the pool replaces the dead one's socket; the client finds it, and
   * the chunks the first one committed. */
  owner = start_server(env->dir, sock, &p, 0);
  hit = 0;
  TH_OK(tutti_lookup_client_query(c, p.tokens, p.n, NULL, 0, 0, &hit, NULL));
  TH_EQ(hit, 3 * CT);
  kill_server(owner);
  tutti_lookup_client_close(c);
  th_prompt_free(&p);
}

/* ---- Refusals ----------------------------------------------------------------------------- */

/* What the log callback received: warnings, counted, the last one kept. */
static struct {
  pthread_mutex_t mu;
  int warnings;
  char last[512];
} logged = {PTHREAD_MUTEX_INITIALIZER, 0, ""};

static void on_log(int level, const char* message, void* user) {
  (void)user;
  if (level != TUTTI_LOG_WARN) return;
  pthread_mutex_lock(&logged.mu);
  logged.warnings++;
  snprintf(logged.last, sizeof logged.last, "%s", message);
  pthread_mutex_unlock(&logged.mu);
}

static int warnings_logged(char* last, size_t cap) {
  pthread_mutex_lock(&logged.mu);
  int n = logged.warnings;
  snprintf(last, cap, "%s", logged.last);
  pthread_mutex_unlock(&logged.mu);
  return n;
}

static void test_refusals(void** state) {
  th_env* env = *state;
  char sock[1200], file[1200];
  snprintf(sock, sizeof sock, "%s/lookup.sock", env->dir);
  snprintf(file, sizeof file, "%s/not-a-socket", env->dir);
  tutti_lookup_client* c = NULL;
  size_t hit = 0;
  int32_t tokens[4] = {1, 2, 3, 4};

  TH_ERR(TUTTI_EIO, tutti_lookup_client_open(sock, 0, &c)); /* nobody serves there */
  if (c != NULL) fail_msg("a failed open left a client");
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_open(NULL, 0, &c));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_open(sock, 0, NULL));
  char longpath[300];
  memset(longpath, 'x', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = '\0';
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_open(longpath, 0, &c));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_query(NULL, tokens, 4, NULL, 0, 0, &hit, NULL));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_release(NULL, 1));

  /* A runtime serves once its KV cache is registered (its pool is open then), not before. */
  th_kv_spec spec = th_spec_default();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  tutti_options* o = NULL;
  const char* extra[] = {"lookup_socket", sock, NULL};
  TH_OK(th_options(&o, env->dir, "8M", CT, extra));
  tutti_runtime* rt = NULL;
  TH_OK(tutti_runtime_open(o, &rt));
  TH_ERR(TUTTI_EIO, tutti_lookup_client_open(sock, 5000, &c));
  TH_OK(tutti_runtime_register_kv(rt, &kv->layout));
  TH_OK(tutti_lookup_client_open(sock, 5000, &c));
  TH_OK(tutti_lookup_client_query(c, tokens, 4, NULL, 0, 0, &hit, NULL));
  TH_EQ(hit, 0);
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_query(c, NULL, 4, NULL, 0, 0, &hit, NULL));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_query(c, tokens, 4, NULL, 3, 0, &hit, NULL));
  TH_ERR(TUTTI_EINVAL, tutti_lookup_client_query(c, tokens, 4, NULL, 0, 0, NULL, NULL));
  struct stat st;
  TH_EQ(stat(sock, &st), 0);
  TH_EQ(st.st_mode & 0777, 0600); /* owner-only */

  /* A second runtime cannot take a socket a live one serves, nor a path that is no socket. */
  char dir2[1200];
  snprintf(dir2, sizeof dir2, "%s/second", env->dir);
  TH_EQ(mkdir(dir2, 0700), 0);
  tutti_runtime* rt2 = NULL;
  TH_ERR(TUTTI_EBUSY, th_open(&rt2, dir2, "8M", CT, extra, kv));
  FILE* fp = fopen(file, "w");
  assert_non_null(fp);
  fclose(fp);
  const char* extra2[] = {"lookup_socket", file, NULL};
  TH_ERR(TUTTI_EINVAL, th_open(&rt2, dir2, "8M", CT, extra2, kv));

  /* A stranger's bytes get an error and a hang-up, which the log callback hears of; the
   * runtime goes on serving. */
  tutti_set_log_callback(on_log, NULL, TUTTI_LOG_WARN);
  int raw = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  assert_true(strlen(sock) < sizeof addr.sun_path);
  memcpy(addr.sun_path, sock, strlen(sock));
  TH_EQ(connect(raw, (struct sockaddr*)&addr, sizeof addr), 0);
  char junk[64];
  memset(junk, 0xA5, sizeof junk);
  TH_EQ(write(raw, junk, sizeof junk), (long)sizeof junk);
  int32_t status = 0;
  TH_EQ(read(raw, &status, sizeof status), (long)sizeof status);
  TH_EQ(status, TUTTI_EINVAL);
  char rest[2048];
  ssize_t got;
  while ((got = read(raw, rest, sizeof rest)) > 0) {
  }
  if (got < 0 && errno != ECONNRESET) fail_msg("reading the hang-up: %s", strerror(errno));
  /* hung up: EOF, or ECONNRESET for the junk the runtime left unread */
  close(raw);
  char last[512];
  for (int i = 0; i < 500 && warnings_logged(last, sizeof last) == 0; i++) sleep_ms(2);
  TH_EQ(warnings_logged(last, sizeof last), 1);
  if (strstr(last, "hung up") == NULL || strstr(last, "protocol version") == NULL)
    fail_msg("the warning logged: %s", last);
  tutti_set_log_callback(NULL, NULL, 0);
  TH_OK(tutti_lookup_client_query(c, tokens, 4, NULL, 0, 0, &hit, NULL));

  /* Closed: the client's next calls fail as a miss would, and the socket is gone. */
  tutti_runtime_close(rt);
  TH_ERR(TUTTI_EIO, tutti_lookup_client_query(c, tokens, 4, NULL, 0, 0, &hit, NULL));
  TH_OK(tutti_lookup_client_release(c, 7));
  TH_EQ(stat(sock, &st) != 0, 1);
  tutti_lookup_client_close(c);
  tutti_options_destroy(o);
  th_kv_destroy(kv);
}

int main(void) {
  if (th_require_pool()) return TH_SKIP;
  signal(SIGPIPE, SIG_IGN); /* the raw socket test writes to a server that may hang up first */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_a_client_sees_the_runtimes_hits_and_its_lease_pins, th_setup_dir,
                                      th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_a_lease_ends_with_its_client_or_its_ttl, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_the_owner_dies_and_comes_back, th_setup_dir, th_teardown_dir),
      cmocka_unit_test_setup_teardown(test_refusals, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
