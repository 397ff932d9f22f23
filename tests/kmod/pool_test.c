// SPDX-License-Identifier: Apache-2.0
/* Runs inside the QEMU guest: a tutti pool on the mounted ext4 of the emulated NVMe namespace.
 * A prompt's KV is stored through the filesystem (backend uring), then loaded back layer by
 * layer into other blocks, every byte compared, with each NVMe route: backend passthru (NVMe
 * Read commands through io_uring on /dev/ng0n1) and backend nvme (commands on tutti_kmod's
 * queue pairs of the subsystem's second controller; SGLs straight into the blocks, PRPs, and
 * through staging), and auto, which must pick nvme. Extents are found with FIEMAP.
 *   pool_test DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"

enum { LAYERS = 4, BLOCKS = 64, BT = 16, HEADS = 8, DIM = 128, TOKENS = 512 };

static int fail(const char* what, int rc) {
  printf("FAIL %s: %s (%s)\n", what, tutti_strerror(rc), tutti_last_error());
  return 1;
}

static int open_rt(const char* pool, const char* backend, const char* key, const char* value, void** bases,
                   tutti_runtime** rt) {
  tutti_options* o = NULL;
  tutti_options_create(&o);
  tutti_options_set(o, "pool", pool);
  if (key) tutti_options_set(o, key, value);
  tutti_options_set(o, "capacity", "96M");
  tutti_options_set(o, "backend", backend);
  tutti_options_set(o, "rings", "2");
  tutti_options_set(o, "threads", "2");
  tutti_options_set(o, "staging", "16M");
  int rc = tutti_runtime_open(o, rt);
  tutti_options_destroy(o);
  if (rc) return rc;
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, LAYERS, BLOCKS, BT, HEADS, DIM, 2, 0);
  l.k_base = bases;
  l.v_offset = (uint64_t)BLOCKS * l.block_stride;
  return tutti_runtime_register_kv(*rt, &l);
}

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

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char pool[256];
  snprintf(pool, sizeof pool, "%s/kv.pool", argv[1]);
  const size_t layer_bytes = 2ull * BLOCKS * BT * HEADS * DIM * 2, block = (size_t)BT * HEADS * DIM * 2;
  unsigned char* kv = aligned_alloc(4096, LAYERS * layer_bytes);
  void* bases[LAYERS];
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < LAYERS * layer_bytes; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, kv[i] = (unsigned char)x;
  for (int l = 0; l < LAYERS; l++) bases[l] = kv + l * layer_bytes;
  int32_t tokens[TOKENS], stored_in[TOKENS / BT], loaded_into[TOKENS / BT];
  for (int i = 0; i < TOKENS; i++) tokens[i] = 7 * i + 3;
  for (int i = 0; i < TOKENS / BT; i++) stored_in[i] = i, loaded_into[i] = TOKENS / BT + i;
  tutti_request r;
  memset(&r, 0, sizeof r);
  r.tokens = tokens, r.num_tokens = TOKENS, r.block_table = stored_in, r.num_block_ids = TOKENS / BT;
  r.token_end = TUTTI_TOKENS_ALL;

  tutti_runtime* rt = NULL;
  int rc = open_rt(pool, "uring", NULL, NULL, bases, &rt);
  if (rc) return fail("open with uring", rc);
  if ((rc = run(rt, TUTTI_OP_STORE, &r))) return fail("store", rc);
  tutti_runtime_close(rt);
  printf("ok   stored %d tokens x %d layers through ext4 (uring)\n", TOKENS, LAYERS);

  static const struct {
    const char *backend, *key, *value, *expect, *what;
  } loads[] = {
      {"passthru", NULL, NULL, "passthru", "io_uring passthrough into staging"},
      {"nvme", NULL, NULL, "nvme", "tutti_kmod queues, SGLs straight into the blocks"},
      {"nvme", "nvme_data_pointer", "prp", "nvme", "tutti_kmod queues, PRPs straight into the blocks"},
      {"nvme", "direct_to_blocks", "off", "nvme", "tutti_kmod queues, into staging"},
      {"auto", NULL, NULL, "nvme", "auto"},
  };
  int failed = 0;
  r.block_table = loaded_into;
  for (size_t k = 0; k < sizeof loads / sizeof loads[0]; k++) {
    for (int l = 0; l < LAYERS; l++)  /* the target blocks start empty */
      for (int side = 0; side < 2; side++)
        memset(kv + l * layer_bytes + side * (layer_bytes / 2) + (size_t)loaded_into[0] * block, 0,
               (size_t)(TOKENS / BT) * block);
    rc = open_rt(pool, loads[k].backend, loads[k].key, loads[k].value, bases, &rt);
    if (rc) {
      failed += fail(loads[k].what, rc);
      continue;
    }
    size_t hit = 0;
    tutti_lookup(rt, tokens, TOKENS, NULL, 0, &hit);
    const char* used = tutti_runtime_backend(rt);
    if ((rc = run(rt, TUTTI_OP_LOAD, &r))) {
      failed += fail(loads[k].what, rc);
      tutti_runtime_close(rt);
      continue;
    }
    tutti_stats st = {.struct_size = sizeof st};
    tutti_runtime_stats(rt, &st);
    tutti_runtime_close(rt);
    size_t bad = 0;
    for (int l = 0; l < LAYERS; l++)
      for (int side = 0; side < 2; side++)
        for (int i = 0; i < TOKENS / BT; i++) {
          unsigned char* base = kv + l * layer_bytes + side * (layer_bytes / 2);
          bad += memcmp(base + (size_t)loaded_into[i] * block, base + (size_t)stored_in[i] * block, block) != 0;
        }
    const int ok = !bad && hit == TOKENS && !strcmp(used, loads[k].expect);
    printf("%s %s: backend %s loaded %zu cached tokens in %llu I/Os: %s\n", ok ? "ok  " : "FAIL", loads[k].what, used,
           hit, (unsigned long long)st.ios, bad ? "BYTES DIFFER" : "every block equals the stored one");
    failed += !ok;
  }
  free(kv);
  return failed ? 1 : 0;
}
