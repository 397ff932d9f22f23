/* SPDX-License-Identifier: Apache-2.0 */
/* integrity.h — what the integrity tests share on top of tests/capi/helpers.h: pool shapes and
 * random KV layouts of one shape, a universe of prompts with shared prefixes that any process
 * can recompute from a seed, block tables, and batches whose loaded bytes are counted against
 * the pattern. No cmocka calls: usable in forked children. */
#ifndef TUTTI_INTEGRITY_H
#define TUTTI_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

/* ---- Pool shapes and KV layouts -------------------------------------------------------- */

/* The pool fingerprint: what stays fixed while the engine's block layout changes. */
typedef struct it_shape {
  uint32_t layers, heads, head_dim, elem_bytes, chunk_tokens;
} it_shape;

/* A few tiny shapes: staged (extent not aligned to the blocks) and direct-capable ones. */
size_t it_shape_count(void);
it_shape it_shape_get(size_t i);
const char* it_shape_describe(const it_shape* s, char* buf, size_t cap);

/* Bytes of one chunk-layer extent and of one slot on disk (docs/format.md). */
uint64_t it_layer_bytes(const it_shape* s);
uint64_t it_slot_bytes(const it_shape* s);
/* A capacity string for a one-file pool of exactly `slots` slots (slots < 255: the records fit
 * below the data, which starts at 1 MiB). */
void it_capacity(char* out, size_t cap, const it_shape* s, unsigned slots);

/* A random engine layout for the shape: NHD or HND, separate or fused K/V, a block size that
 * divides the chunk, sometimes hand-made strides with padding, sometimes misaligned bases. */
th_kv_spec it_random_spec(const it_shape* s, uint32_t num_blocks, uint64_t* rng);
const char* it_spec_describe(const th_kv_spec* s, char* buf, size_t cap);

/* ---- Prompts --------------------------------------------------------------------------- */

/* A universe of `count` prompts, up to max_chunks chunks (plus a partial one) each, grouped in
 * families that share prefixes (whole chunks and partial ones). Prompt i depends only on
 * (seed, i, chunk_tokens, max_chunks), so a parent can recompute what a child stored. */
typedef struct it_universe {
  th_prompt* p;
  size_t count;
  uint32_t chunk_tokens, max_chunks;
} it_universe;

void it_universe_init(it_universe* u, uint64_t seed, size_t count, uint32_t chunk_tokens,
                      uint32_t max_chunks);
void it_universe_free(it_universe* u);
size_t it_whole_chunks(const th_prompt* p, uint32_t chunk_tokens);

/* ---- Block tables ---------------------------------------------------------------------- */

typedef struct it_tables {
  int32_t* perm;
  size_t num_blocks, next;
} it_tables;

void it_tables_init(it_tables* t, uint32_t num_blocks, uint64_t* rng);
void it_tables_free(it_tables* t);
/* `count` distinct block ids, or NULL when the cache has too few left (then reset). */
int32_t* it_tables_take(it_tables* t, size_t count);
void it_tables_reset(it_tables* t, uint64_t* rng);

/* ---- Batches with counted bytes -------------------------------------------------------- */

typedef struct it_req {
  const th_prompt* p;
  int32_t* table;
  size_t ntable;
  size_t begin, end; /* whole chunks; begin < end */
} it_req;

/* The outcome of one batch. */
typedef struct it_outcome {
  int rc;                /* th_batch_run's code */
  tutti_result res[8];   /* per request */
  size_t wrong_bytes;    /* loads: bytes of the cache that differ from what must be there */
  char msg[512];         /* the first wrong byte, or tutti_last_error() of a failure */
} it_outcome;

/* Fills the pattern of every request's range into its blocks and stores them (n <= 8). */
void it_store(tutti_runtime* rt, th_kv* kv, const it_req* reqs, size_t n, it_outcome* out);

/* Poisons the requests' blocks, loads, then counts the bytes of the whole cache that differ from
 * what must be there: the pattern for the tokens the result says were loaded, poison in every
 * byte a load may not touch (padding, other blocks); the rows of chunks that failed are not
 * specified (n <= 8). */
void it_load(tutti_runtime* rt, th_kv* kv, const it_req* reqs, size_t n, it_outcome* out);

/* A result that contradicts itself or the batch's code (0 but a request short of its range). */
int it_inconsistent(const it_req* reqs, size_t n, const it_outcome* out, uint32_t chunk_tokens);

/* ---- Runtime --------------------------------------------------------------------------- */

/* th_open, retrying TUTTI_EBUSY for up to `busy_ms` (a SIGKILLed owner's io_uring teardown
 * may keep the lock a little). *waited_ms gets the time spent retrying (may be NULL). */
int it_open(tutti_runtime** rt, const char* dir, const char* capacity, unsigned chunk_tokens,
            const char* const* extra, const th_kv* kv, int busy_ms, int* waited_ms);

/* The file of a single-file pool opened by th_options: "<dir>/pool.tutti". */
void it_pool_path(char* out, size_t cap, const char* dir);

/* ---- Child processes under the fault shim ---------------------------------------------- */

/* A child's failure: prints "FAIL: " and the message to stderr and exits with `code`. */
void it_child_fail(int code, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* In a child about to exec: preload the fault shim (tests/integrity/faultshim.c) on the calls to
 * `pool` with `plan`; under AddressSanitizer the shim comes before ASan's runtime. */
void it_preload_faultshim(const char* shim, const char* pool, const char* plan);
/* Runs "/proc/self/exe --child DIR ARGS..." (args: NULL-terminated) in a child process and a
 * fresh directory DIR, removed afterwards. With a `plan`, the child runs under the fault shim on
 * DIR's pool (it_pool_path), each stalled read sleeping `stall_ms`. Returns the child's exit
 * code, or -1 when it could not run or did not exit. */
int it_run_child(const char* shim, const char* plan, const char* stall_ms, const char* const* args);

#endif /* TUTTI_INTEGRITY_H */
