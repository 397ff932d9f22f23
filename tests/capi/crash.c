// SPDX-License-Identifier: Apache-2.0
/* crash: a writer SIGKILLed mid-store loses nothing it committed and never leaves torn chunks. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define CT 32u
#define ROUNDS 4
#define MAX_PER_ROUND 400
#define PROMPT_TOKENS (3 * CT + 5)

static th_kv_spec crash_spec(void) {
  th_kv_spec s = th_spec_default();
  s.num_layers = 3;
  s.num_blocks = 32;
  return s;
}

static void prompt_for(th_prompt* p, int round, int i) {
  uint64_t rng = th_base_seed() ^ th_mix64(((uint64_t)round << 20) | (uint64_t)i);
  th_prompt_random(p, &rng, PROMPT_TOKENS);
}

static const char* const* round_options(int round) {
  static const char* posix[] = {"backend", "posix", NULL};
  return (round & 1) ? posix : NULL;
}

/* The child: store prompts one batch at a time, report each committed index. Never returns. */
static void child_main(const char* dir, int round, int fd) {
  th_kv_spec spec = crash_spec();
  th_kv* kv = NULL;
  tutti_runtime* rt = NULL;
  int32_t tab[16];
  size_t nb = th_nblocks(PROMPT_TOKENS, spec.block_tokens);
  if (th_kv_create(&kv, &spec) != 0) _exit(10);
  for (size_t i = 0; i < nb; i++) tab[i] = (int32_t)(spec.num_blocks - 1 - 2 * i);
  int rc = th_open(&rt, dir, "128M", CT, round_options(round), kv);
  if (rc != 0) {
    fprintf(stderr, "child: open: %d %s\n", rc, tutti_last_error());
    _exit(11);
  }
  for (int i = 0; i < MAX_PER_ROUND; i++) {
    th_prompt p;
    tutti_result res;
    prompt_for(&p, round, i);
    th_kv_fill(kv, &p, tab, 0, p.n);
    tutti_request r = th_request(&p, tab, nb, 0, TUTTI_TOKENS_ALL);
    rc = th_batch_run(rt, TUTTI_OP_STORE, &r, 1, &res, i & 1, spec.num_layers);
    th_prompt_free(&p);
    if (rc != 0 || res.status != 0 || res.chunks_ok != PROMPT_TOKENS / CT) {
      fprintf(stderr, "child: store %d: %d %s\n", i, rc, tutti_last_error());
      _exit(12);
    }
    if (write(fd, &i, sizeof i) != (ssize_t)sizeof i) _exit(13);
  }
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  _exit(0);
}

static int read_index(int fd, int* out) {
  for (;;) {
    ssize_t n = read(fd, out, sizeof *out);
    if (n == (ssize_t)sizeof *out) return 1;
    if (n < 0 && errno == EINTR) continue;
    if (n != 0) fail_msg("short read from the child pipe: %zd", n);
    return 0;
  }
}

static void test_crash(void** state) {
  th_env* env = *state;
  uint64_t rng = th_base_seed() ^ 0xF1;
  th_kv_spec spec = crash_spec();
  th_kv* kv = NULL;
  TH_OK(th_kv_create(&kv, &spec));
  int32_t tab[16];
  size_t nb = th_nblocks(PROMPT_TOKENS, spec.block_tokens);
  th_blocks alloc;
  th_blocks_init(&alloc, spec.num_blocks, &rng);
  th_blocks_take(&alloc, tab, nb);
  int reported_max[ROUNDS];
  static const unsigned delays_us[ROUNDS] = {0, 1500, 4000, 12000};

  for (int round = 0; round < ROUNDS; round++) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      child_main(env->dir, round, fds[1]);
    }
    close(fds[1]);

    /* read a few indexes, wait a random short while, kill */
    int wanted = 1 + (int)th_rand_below(&rng, 4), got = 0, idx = -1, last = -1;
    while (got < wanted && read_index(fds[0], &idx)) {
      TH_EQ(idx, last + 1);
      last = idx;
      got++;
    }
    unsigned delay = delays_us[round] + (unsigned)th_rand_below(&rng, 1000);
    struct timespec ts = {0, (long)delay * 1000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    while (read_index(fds[0], &idx)) {
      TH_EQ(idx, last + 1);
      last = idx;
    }
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
      fail_msg("round %d: the child failed with exit code %d", round, WEXITSTATUS(status));
    if (last < 0) fail_msg("round %d: the child committed nothing before it died", round);
    reported_max[round] = last;
    print_message("round %d: killed after %u us, %d prompts reported committed\n", round,
                  delay, last + 1);

    /* reopen: everything reported hits fully and loads byte-identical; the prompt in flight
     * may or may not be there, but if it hits it is intact; later ones were never stored */
    tutti_runtime* rt = NULL;
    int rc = th_open(&rt, env->dir, "128M", CT, NULL, kv);
    /* The kernel tears a killed process's io_uring rings down asynchronously, finishing its
     * I/O first; until then the pool may still be locked (tutti itself waits a second). Give
     * a loaded machine a few more. */
    int waited_ms = 0;
    for (; rc == TUTTI_EBUSY && waited_ms < 10000; waited_ms += 10) {
      struct timespec ten = {0, 10000000L};
      nanosleep(&ten, NULL);
      rc = th_open(&rt, env->dir, "128M", CT, NULL, kv);
    }
    if (waited_ms) print_message("round %d: the pool was busy %d ms more\n", round, waited_ms);
    TH_OK(rc);
    for (int r = 0; r <= round; r++) {
      int top = r == round ? reported_max[r] + 3 : reported_max[r];
      for (int i = 0; i <= top && i < MAX_PER_ROUND; i++) {
        th_prompt p;
        prompt_for(&p, r, i);
        size_t hit = th_lookup(rt, &p);
        if (i <= reported_max[r]) {
          if (hit != PROMPT_TOKENS / CT * CT)
            fail_msg("round %d prompt %d was committed but hits %zu tokens", r, i, hit);
        } else if (i > reported_max[r] + 1 && hit != 0) {
          fail_msg("round %d prompt %d was never stored but hits %zu tokens", r, i, hit);
        } else if (hit) {
          print_message("round %d: the prompt in flight (%d) hits %zu tokens\n", r, i, hit);
        }
        if (hit) th_load_and_check(rt, kv, &p, tab, nb, hit);
        th_prompt_free(&p);
      }
    }
    tutti_runtime_close(rt);
  }
  th_blocks_free(&alloc);
  th_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_crash, th_setup_dir, th_teardown_dir),
  };
  if (th_require_pool() == TH_SKIP) return TH_SKIP;
  return cmocka_run_group_tests_name("crash", tests, NULL, NULL);
}
