// SPDX-License-Identifier: Apache-2.0
/* slack: with option store_slack a store goes while a load is in flight when the load's
 * engine is behind its reads, and with store_slack=0 (the default) it waits for the load to
 * land; every byte either moved is checked.
 */
/*
 * Usage: integrity_slack
 *
 * Each case runs in a child process with tests/integrity/faultshim.c preloaded, making every
 * read of the pool's data sleep 1.5 s first (writes are not touched). The child stores prompt
 * P (8 layers, one chunk), poisons the KV cache, writes prompt Q into other blocks, and loads P
 * with 4 I/O threads and lookahead 4: layers 0-3 land after one stalled read, 4-7 after a
 * second. The engine waits for layer 0 and stays there (layers 1-3 in place beyond it: the
 * slack store_slack=2 asks for), and stores Q meanwhile. With store_slack=2 the store is done
 * while layers 4-7 are still being read (tutti_batch_poll: fewer than 8 layers in place); with
 * store_slack=0 it is written only after every layer of the load is in place. Then P's blocks must hold P and
 * Q's blocks Q, and a load of Q (into poisoned blocks) must give back Q.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "integrity.h"

#ifndef TUTTI_FAULTSHIM_PATH
#define TUTTI_FAULTSHIM_PATH ""
#endif

enum { TOKENS = 64, LAYERS = 8 };
enum { XC_OK = 0, XC_WRONG = 3, XC_SETUP = 6 };

static tutti_batch* submit(tutti_runtime* rt, tutti_op op, const tutti_request* req, const char* what) {
  tutti_batch* b = NULL;
  if (tutti_batch_create(rt, op, &b) != 0 || tutti_batch_add(b, req, 1) != 0 || tutti_batch_submit(b) != 0)
    it_child_fail(XC_SETUP, "%s: %s", what, tutti_last_error());
  return b;
}

static int child(const char* dir, const char* slack) {
  th_kv_spec spec = th_spec_default();
  spec.num_layers = LAYERS;
  th_kv* kv = NULL;
  if (th_kv_create(&kv, &spec) != 0) it_child_fail(XC_SETUP, "cannot allocate the KV cache");
  const char* extra[] = {"backend", "posix", "threads", "4", "lookahead", "4", "store_slack", slack, NULL};
  tutti_runtime* rt = NULL;
  int rc = th_open(&rt, dir, "4M", TOKENS, extra, kv);
  if (rc != 0) it_child_fail(XC_SETUP, "open: %d %s", rc, tutti_last_error());

  uint64_t rng = th_mix64(th_base_seed() ^ 0x51ACCull);
  th_prompt p, q;
  th_prompt_random(&p, &rng, TOKENS);
  th_prompt_random(&q, &rng, TOKENS);
  const size_t nblocks = th_nblocks(TOKENS, spec.block_tokens);
  int32_t table_p[16], table_q[16];
  for (size_t i = 0; i < nblocks; i++) table_p[i] = (int32_t)(2 * i + 1), table_q[i] = (int32_t)(2 * i + 2);
  tutti_request req_p = th_request(&p, table_p, nblocks, 0, TOKENS);
  tutti_request req_q = th_request(&q, table_q, nblocks, 0, TOKENS);
  th_kv_fill(kv, &p, table_p, 0, TOKENS);
  if (th_batch_run(rt, TUTTI_OP_STORE, &req_p, 1, NULL, 0, 0) != 0) it_child_fail(XC_SETUP, "store P: %s", th_batch_error());

  th_kv_poison(kv);
  th_kv_fill(kv, &q, table_q, 0, TOKENS);
  tutti_batch* load = submit(rt, TUTTI_OP_LOAD, &req_p, "load P");
  if (tutti_batch_wait_layer(load, 0) != 0) it_child_fail(XC_WRONG, "wait for layer 0 of P: %s", tutti_last_error());
  tutti_batch* store = submit(rt, TUTTI_OP_STORE, &req_q, "store Q");
  if (tutti_batch_wait(store) != 0) it_child_fail(XC_WRONG, "store Q during the load: %s", tutti_last_error());
  uint32_t layers_done = 0;
  int load_done = 0;
  tutti_batch_poll(load, &layers_done, &load_done);
  tutti_batch_destroy(store);
  const int fitted = strcmp(slack, "0") != 0;
  if (fitted && (load_done || layers_done == LAYERS))
    it_child_fail(XC_WRONG, "store_slack=%s: the store waited for the load to land (the engine was at layer 0 of %d)",
                  slack, LAYERS);
  if (!fitted && layers_done != LAYERS)
    it_child_fail(XC_WRONG, "store_slack=0: the store was written while the load was in flight (%u of %d layers in place)",
                  layers_done, LAYERS);
  tutti_result res;
  if (tutti_batch_wait(load) != 0 || tutti_batch_result(load, 0, &res) != 0 || res.tokens != TOKENS)
    it_child_fail(XC_WRONG, "load P: %s", tutti_last_error());
  tutti_batch_destroy(load);
  char msg[512];
  th_kv_expect(kv, &p, table_p, 0, TOKENS);
  size_t bad = th_kv_verify_all(kv, msg, sizeof msg);
  if (bad) it_child_fail(XC_WRONG, "%zu bytes differ after P's load beside Q's store; first: %s", bad, msg);

  th_kv_poison_blocks(kv, table_q, nblocks);
  tutti_result got;
  memset(&got, 0, sizeof got);
  if (th_batch_run(rt, TUTTI_OP_LOAD, &req_q, 1, &got, 0, 0) != 0 || got.tokens != TOKENS)
    it_child_fail(XC_WRONG, "load Q (stored during P's load): %s, %zu tokens", th_batch_error(), (size_t)got.tokens);
  th_kv_expect(kv, &q, table_q, 0, TOKENS);
  bad = th_kv_verify_all(kv, msg, sizeof msg);
  if (bad) it_child_fail(XC_WRONG, "%zu bytes differ in Q, stored in a load's slack, loaded back; first: %s", bad, msg);
  printf("store_slack=%s: the store ended with %u of %d layers of the load in place\n", slack, layers_done, LAYERS);
  th_prompt_free(&p);
  th_prompt_free(&q);
  tutti_runtime_close(rt);
  th_kv_destroy(kv);
  return XC_OK;
}

static int run_case(const char* slack) {
  const char* args[] = {slack, NULL};
  const int code = it_run_child(TUTTI_FAULTSHIM_PATH, "pread:data:stall:1:0;preadv:data:stall:1:0", "1500", args);
  printf("store_slack=%s: %s\n", slack, code == 0 ? "ok" : "FAILED");
  return code != 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  if (argc > 1) {
    fprintf(stderr, "usage: %s  (runs its cases; see the comment at the top of slack.c)\n", argv[0]);
    return 2;
  }
  if (th_require_pool() != 0) return 77;
  if (access(TUTTI_FAULTSHIM_PATH, R_OK) != 0) {
    printf("SKIP: the fault shim %s is not built\n", TUTTI_FAULTSHIM_PATH);
    return 77;
  }
  return run_case("2") + run_case("0") ? 1 : 0;
}
