// SPDX-License-Identifier: Apache-2.0
/* stall: a load whose reads do not answer gives up at load_timeout_ms, and no byte it read
 * late reaches the blocks. */
/*
 * Usage: integrity_stall
 *
 * Each case runs in a child process. "stall" loads tests/integrity/faultshim.c with LD_PRELOAD
 * and a plan that makes every read of the pool's data sleep 4 s first: the child stores a
 * prompt (writes are not touched), poisons the blocks, loads the prompt with
 * load_timeout_ms=200, and expects tutti_batch_wait_layer(0) to give up (TUTTI_EIO), the result
 * to say at once that every chunk failed, and, once the reads are over (tutti_batch_destroy),
 * every byte of the KV cache still the poison: the reads that came back late were kept out. The
 * same again with tutti_batch_wait in place of the wait for layer 0. "clean" runs without the
 * shim: the same loads under load_timeout_ms land every byte (the reads go through staging).
 * Two layouts: blocks that the loads would otherwise read straight into (NHD, 4 KiB blocks),
 * and blocks that always go through staging (HND, 8-token blocks).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integrity.h"

#ifndef TUTTI_FAULTSHIM_PATH
#define TUTTI_FAULTSHIM_PATH ""
#endif

enum { TOKENS = 128, CHUNK_TOKENS = 64 };
enum { XC_OK = 0, XC_WRONG = 3, XC_SETUP = 6 };

static int child(const char* dir, int variant, int stalled) {
  th_kv_spec spec = th_spec_default();
  if (variant == 1) spec.block_tokens = 8, spec.hnd = 1;
  th_kv* kv = NULL;
  if (th_kv_create(&kv, &spec) != 0) it_child_fail(XC_SETUP, "cannot allocate the KV cache");
  const char* extra[] = {"backend", "posix", "threads", "4", "load_timeout_ms", "200", NULL};
  tutti_runtime* rt = NULL;
  int rc = th_open(&rt, dir, "4M", CHUNK_TOKENS, extra, kv);
  if (rc != 0) it_child_fail(XC_SETUP, "open: %d %s", rc, tutti_last_error());

  uint64_t rng = th_mix64(th_base_seed() ^ 0x57A11ull);
  th_prompt p;
  th_prompt_random(&p, &rng, TOKENS);
  int32_t table[64];
  const size_t nblocks = th_nblocks(TOKENS, spec.block_tokens);
  for (size_t i = 0; i < nblocks; i++) table[i] = (int32_t)(2 * i + 1);
  th_kv_fill(kv, &p, table, 0, TOKENS);
  tutti_request req = th_request(&p, table, nblocks, 0, TOKENS);
  rc = th_batch_run(rt, TUTTI_OP_STORE, &req, 1, NULL, 0, 0);
  if (rc != 0) it_child_fail(XC_SETUP, "store: %d %s", rc, th_batch_error());

  char msg[512];
  /* Twice: waiting for layer 0, then for the whole batch (tutti_batch_wait gives up too). */
  for (int whole = 0; whole < 2; whole++) {
    th_kv_poison(kv); /* memory and shadow: a load given up on must leave it so */
    tutti_batch* b = NULL;
    if (tutti_batch_create(rt, TUTTI_OP_LOAD, &b) != 0 || tutti_batch_add(b, &req, 1) != 0 ||
        tutti_batch_submit(b) != 0)
      it_child_fail(XC_SETUP, "load: %s", tutti_last_error());
    const int waited = whole ? tutti_batch_wait(b) : tutti_batch_wait_layer(b, 0);
    char why[1024];
    snprintf(why, sizeof why, "%s", tutti_last_error());
    const int ended = whole ? waited : tutti_batch_wait(b);
    tutti_result res;
    memset(&res, 0, sizeof res);
    const int got = tutti_batch_result(b, 0, &res); /* at once, after a give-up */
    tutti_batch_destroy(b);                         /* waits for the reads in flight */
    const char* what = whole ? "tutti_batch_wait" : "tutti_batch_wait_layer(0)";
    if (stalled) {
      if (waited != TUTTI_EIO) it_child_fail(XC_WRONG, "%s returned %d, not TUTTI_EIO, under stalled reads", what, waited);
      if (!strstr(why, "load_timeout_ms")) it_child_fail(XC_WRONG, "%s's message does not name load_timeout_ms: %s", what, why);
      if (ended != TUTTI_EIO || got != 0 || res.status != TUTTI_EIO || res.tokens != 0)
        it_child_fail(XC_WRONG, "after %s gave up: wait %d, result %d with status %d and %zu tokens", what, ended, got,
                   res.status, (size_t)res.tokens);
      size_t bad = th_kv_verify_all(kv, msg, sizeof msg);
      if (bad) it_child_fail(XC_WRONG, "%zu bytes of the KV cache changed after %s gave up; first: %s", bad, what, msg);
      printf("%s gave up: %s\n", what, why);
    } else {
      if (waited != 0 || ended != 0 || got != 0 || res.tokens != TOKENS)
        it_child_fail(XC_WRONG, "clean load, %s: %d, wait %d, %zu tokens (%s)", what, waited, ended, (size_t)res.tokens, why);
      th_kv_expect(kv, &p, table, 0, TOKENS);
      size_t bad = th_kv_verify_all(kv, msg, sizeof msg);
      if (bad) it_child_fail(XC_WRONG, "%zu bytes differ after a clean load under load_timeout_ms; first: %s", bad, msg);
    }
  }
  tutti_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (tutti_runtime_stats(rt, &st) != 0 || st.load_timeouts != (stalled ? 2u : 0u))
    it_child_fail(XC_WRONG, "tutti_stats.load_timeouts is %llu, not %d", (unsigned long long)st.load_timeouts, stalled ? 2 : 0);
  th_prompt_free(&p);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  return XC_OK;
}

static int run_case(int variant, int stalled) {
  char var[8];
  snprintf(var, sizeof var, "%d", variant);
  const char* args[] = {var, stalled ? "stall" : "clean", NULL};
  const int code = it_run_child(TUTTI_FAULTSHIM_PATH, stalled ? "pread:data:stall:1:0;preadv:data:stall:1:0" : NULL,
                                "4000", args);
  printf("%s %s layout: %s\n", stalled ? "stalled reads" : "clean reads", variant ? "staged" : "direct",
         code == 0 ? "ok" : "FAILED");
  return code != 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "--child") == 0) return child(argv[2], atoi(argv[3]), strcmp(argv[4], "stall") == 0);
  if (argc > 1) {
    fprintf(stderr, "usage: %s  (runs its cases; see the comment at the top of stall.c)\n", argv[0]);
    return 2;
  }
  if (th_require_pool() != 0) return 77;
  if (access(TUTTI_FAULTSHIM_PATH, R_OK) != 0) {
    printf("SKIP: the fault shim %s is not built\n", TUTTI_FAULTSHIM_PATH);
    return 77;
  }
  int failed = 0;
  for (int variant = 0; variant < 2; variant++)
    for (int stalled = 0; stalled < 2; stalled++) failed += run_case(variant, stalled);
  return failed ? 1 : 0;
}
