// SPDX-License-Identifier: Apache-2.0
/* Sample: keep a prompt's KV cache in a tutti pool and stream it back layer by layer (C).
 * Opens a pool in a temporary directory, registers a small paged KV cache in host memory,
 * stores one prompt's KV, looks the prompt up, loads it into other blocks layer by layer and
 * checks every byte. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tutti.h"

enum { LAYERS = 4, BLOCKS = 128, BT = 16, HEADS = 8, DIM = 128, TOKENS = 1024 };

static int check(int rc, const char* what) {
  if (rc != 0) fprintf(stderr, "%s: %s (%s)\n", what, tutti_strerror(rc), tutti_last_error());
  return rc;
}

/* Runs one batch of one request, waiting layer by layer. */
static int run(tutti_runtime* rt, tutti_op op, const tutti_request* r) {
  tutti_batch* b = NULL;
  int rc = tutti_batch_create(rt, op, &b);
  if (!rc) rc = tutti_batch_add(b, r, 1);
  if (!rc) rc = tutti_batch_submit(b);
  for (uint32_t l = 0; l < LAYERS && !rc; l++) rc = tutti_batch_wait_layer(b, l);
  if (!rc) rc = tutti_batch_wait(b);
  tutti_batch_destroy(b);
  return rc;
}

int main(void) {
  char dir[] = "/tmp/tutti-sample-XXXXXX", pool[64];
  if (!mkdtemp(dir)) return 1;
  snprintf(pool, sizeof pool, "%s/kv.pool", dir);

  /* vLLM-style: per layer one [2, blocks, bt, heads, dim] fp16 tensor */
  const size_t layer_bytes = 2ull * BLOCKS * BT * HEADS * DIM * 2;
  unsigned char* kv = malloc(LAYERS * layer_bytes);
  void* bases[LAYERS];
  for (size_t i = 0; i < LAYERS * layer_bytes; i++) kv[i] = (unsigned char)(i * 2654435761u >> 13);
  for (int l = 0; l < LAYERS; l++) bases[l] = kv + l * layer_bytes;
  int32_t tokens[TOKENS], stored_in[TOKENS / BT], loaded_into[TOKENS / BT];
  for (int i = 0; i < TOKENS; i++) tokens[i] = 1000 + 7 * i;
  for (int i = 0; i < TOKENS / BT; i++) stored_in[i] = i, loaded_into[i] = TOKENS / BT + i;

  tutti_options* o = NULL;
  tutti_runtime* rt = NULL;
  tutti_options_create(&o);
  tutti_options_set(o, "pool", pool);
  tutti_options_set(o, "capacity", "1G");
  int rc = check(tutti_runtime_open(o, &rt), "open");
  tutti_options_destroy(o);
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, LAYERS, BLOCKS, BT, HEADS, DIM, 2, 0);
  l.k_base = bases;
  l.v_offset = (uint64_t)BLOCKS * l.block_stride;
  if (!rc) rc = check(tutti_runtime_register_kv(rt, &l), "register");

  tutti_request r;
  memset(&r, 0, sizeof r);
  r.tokens = tokens, r.num_tokens = TOKENS, r.block_table = stored_in, r.num_block_ids = TOKENS / BT;
  r.token_end = TUTTI_TOKENS_ALL; /* every whole chunk */
  if (!rc) rc = check(run(rt, TUTTI_OP_STORE, &r), "store");
  size_t hit = 0;
  if (!rc) rc = check(tutti_lookup(rt, tokens, TOKENS, NULL, 0, &hit), "lookup");
  if (!rc) printf("stored %d tokens with backend %s; lookup finds %zu cached tokens\n", TOKENS, tutti_runtime_backend(rt), hit);
  r.block_table = loaded_into;
  if (!rc) rc = check(run(rt, TUTTI_OP_LOAD, &r), "load");
  size_t bad = 0, block = (size_t)BT * HEADS * DIM * 2;
  for (int layer = 0; layer < LAYERS && !rc; layer++)
    for (int side = 0; side < 2; side++)
      for (int i = 0; i < TOKENS / BT; i++) {
        unsigned char* base = kv + layer * layer_bytes + side * (layer_bytes / 2);
        bad += memcmp(base + (size_t)loaded_into[i] * block, base + (size_t)stored_in[i] * block, block) != 0;
      }
  if (!rc) printf("loaded back into other blocks: %s\n", bad ? "BYTES DIFFER" : "every byte matches");
  tutti_runtime_close(rt);
  free(kv);
  unlink(pool);
  rmdir(dir);
  return rc || bad ? 1 : 0;
}
