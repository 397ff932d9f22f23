/* SPDX-License-Identifier: Apache-2.0 */
/* helpers.h — shared fixtures of the C API tests: temp dirs, KV caches with a recomputable byte
 * pattern (the one of tests/fixture/, seeded by each prompt's chain), a shadow copy of the bytes
 * expected everywhere, prompts, block tables, runtime and batch shortcuts. */
#ifndef TUTTI_CAPI_HELPERS_H
#define TUTTI_CAPI_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tutti.h"

#define TH_SKIP 77 /* exit code of a skipped test program */

/* ---- Assertions (cmocka; only on the thread that runs the test) ------------------------ */

/* The call must return 0; on failure print the code, its name and tutti_last_error(). */
#define TH_OK(call)                                                                      \
  do {                                                                                   \
    int th_rc_ = (call);                                                                 \
    if (th_rc_ != 0)                                                                     \
      fail_msg("%s -> %d (%s): %s", #call, th_rc_, tutti_strerror(th_rc_),               \
               tutti_last_error());                                                      \
  } while (0)

/* The call must return exactly `code` and leave a non-empty tutti_last_error(). */
#define TH_ERR(code, call)                                                               \
  do {                                                                                   \
    int th_rc_ = (call);                                                                 \
    if (th_rc_ != (code))                                                                \
      fail_msg("%s -> %d (%s), expected %d (%s); last error: %s", #call, th_rc_,         \
               tutti_strerror(th_rc_), (int)(code), tutti_strerror(code),                \
               tutti_last_error());                                                      \
    if (tutti_last_error() == NULL || tutti_last_error()[0] == '\0')                     \
      fail_msg("%s -> %d but tutti_last_error() is empty", #call, th_rc_);               \
  } while (0)

#define TH_EQ(a, b)                                                                      \
  do {                                                                                   \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                            \
    if (th_a_ != th_b_)                                                                  \
      fail_msg("%s == %lld, expected %s == %lld", #a, th_a_, #b, th_b_);                 \
  } while (0)

/* ---- Random numbers (deterministic; TUTTI_TEST_SEED overrides the base seed) ---------- */

uint64_t th_mix64(uint64_t x);
uint64_t th_rand(uint64_t* state);
uint64_t th_rand_below(uint64_t* state, uint64_t n);
uint64_t th_base_seed(void); /* printed once per program */

/* ---- Temporary directories ------------------------------------------------------------ */

typedef struct th_env {
  char dir[1024]; /* a fresh directory under $TMPDIR or /tmp */
  void* param;    /* the cmocka prestate of the test, if any */
} th_env;

/* cmocka setup/teardown: *state becomes a th_env with its own temp dir, removed afterwards. */
int th_setup_dir(void** state);
int th_teardown_dir(void** state);
int th_mkdtemp(char* out, size_t cap);
/* A fresh directory under /dev/shm (tmpfs, where the dram backend keeps its pools) in `out`
 * (64 bytes hold it); skips the test where there is none. Remove it with th_rmtree. */
void th_shm_dir(char* out, size_t cap);
void th_rmtree(const char* path);

/* ---- Prompts ------------------------------------------------------------------------- */

typedef struct th_prompt {
  int32_t* tokens;
  size_t n;
  uint64_t* chain;       /* chain[i] depends on tokens[0..i] and the salt: the pattern seed */
  unsigned char salt[32];
  size_t salt_len;
} th_prompt;

/* Random token ids in [1, 50000). */
void th_prompt_random(th_prompt* p, uint64_t* rng, size_t n);
/* A copy of `tokens` (salt may be NULL when salt_len is 0). */
void th_prompt_init(th_prompt* p, const int32_t* tokens, size_t n, const void* salt,
                    size_t salt_len);
/* `base`'s first `shared` tokens, then random tokens up to n. */
void th_prompt_extend(th_prompt* p, const th_prompt* base, size_t shared, uint64_t* rng,
                      size_t n);
void th_prompt_free(th_prompt* p);

/* ---- The engine's KV cache, with a shadow copy of the bytes expected in it ------------- */

typedef struct th_kv_spec {
  uint32_t num_layers, num_blocks, block_tokens, num_kv_heads, head_dim, elem_bytes;
  int hnd;            /* 0 NHD, 1 HND */
  int fused;          /* one tensor per layer: v_base NULL, v_offset */
  uint32_t token_pad; /* hand-made strides: bytes after each token (NHD) / row (HND) */
  uint32_t block_pad; /* hand-made strides: bytes after each block */
  uint32_t misalign;  /* bytes added to every base address (0: 4096-aligned) */
} th_kv_spec;

typedef struct th_kv {
  th_kv_spec spec;
  tutti_kv_layout layout;
  size_t row;             /* head_dim * elem_bytes */
  size_t tensor_bytes;    /* one K (or V) tensor: num_blocks * block_stride */
  size_t n_alloc;
  unsigned char* alloc[64]; /* raw allocations (4096-aligned) */
  unsigned char* shadow[64];
  size_t alloc_bytes[64];
  void* k[32];
  void* v[32];
  unsigned char* k_shadow[32];
  unsigned char* v_shadow[32];
} th_kv;

/* Small default shape: 2 layers, 2 heads, head_dim 64, elem 2, 16-token blocks, 64 blocks. */
th_kv_spec th_spec_default(void);
/* Allocates and describes the cache; layout is ready for tutti_runtime_register_kv. With
 * token_pad/block_pad 0 the strides come from tutti_kv_layout_init. Returns 0 or a tutti code. */
int th_kv_create(th_kv** out, const th_kv_spec* spec);
void th_kv_destroy(th_kv* kv);

/* Writes the pattern of prompt tokens [begin, end) (end clipped to p->n) into the blocks of
 * `table` for every layer, K and V; the shadow follows. */
void th_kv_fill(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin, size_t end);
/* Sets every byte (blocks and padding) to the poison value, in memory and shadow. */
void th_kv_poison(th_kv* kv);
/* Poisons whole blocks (block_stride bytes each) of every layer, K and V. */
void th_kv_poison_blocks(th_kv* kv, const int32_t* table, size_t nblocks);
/* The same for one layer only. */
void th_kv_poison_layer(th_kv* kv, uint32_t layer, const int32_t* table, size_t nblocks);
/* Writes the expected pattern into the shadow only (what a load must produce). */
void th_kv_expect(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                  size_t end);
/* Copies memory to shadow for these tokens' rows: their content is not specified. */
void th_kv_dontcare(th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                    size_t end);
/* Compares the rows of tokens [begin, end) of the layers [layer_lo, layer_hi) with the pattern.
 * Returns the number of mismatching rows; describes the first in msg. No cmocka calls. */
size_t th_kv_check(const th_kv* kv, const th_prompt* p, const int32_t* table, size_t begin,
                   size_t end, uint32_t layer_lo, uint32_t layer_hi, char* msg, size_t cap);
/* Compares every byte of the cache (rows and padding) with the shadow. 0 if equal. */
size_t th_kv_verify_all(const th_kv* kv, char* msg, size_t cap);

/* cmocka wrappers of the two checks. */
#define TH_CHECK(kv, p, table, begin, end)                                             \
  do {                                                                                 \
    char th_msg_[512];                                                                 \
    size_t th_bad_ = th_kv_check((kv), (p), (table), (begin), (end), 0,                \
                                 (kv)->spec.num_layers, th_msg_, sizeof th_msg_);      \
    if (th_bad_) fail_msg("%zu rows differ from the stored bytes; first: %s", th_bad_, \
                          th_msg_);                                                    \
  } while (0)
#define TH_VERIFY_ALL(kv)                                                              \
  do {                                                                                 \
    char th_msg_[512];                                                                 \
    size_t th_bad_ = th_kv_verify_all((kv), th_msg_, sizeof th_msg_);                  \
    if (th_bad_) fail_msg("%zu bytes of the KV cache differ from the expected bytes; " \
                          "first: %s", th_bad_, th_msg_);                              \
  } while (0)

/* ---- Block tables --------------------------------------------------------------------- */

/* Hands out distinct block ids of [0, num_blocks) in a shuffled order. */
typedef struct th_blocks {
  int32_t* perm;
  size_t num_blocks, next;
} th_blocks;

void th_blocks_init(th_blocks* a, uint32_t num_blocks, uint64_t* rng);
/* Takes `count` ids into out; fails the test when the cache has too few left. */
void th_blocks_take(th_blocks* a, int32_t* out, size_t count);
void th_blocks_reset(th_blocks* a, uint64_t* rng); /* reshuffles; every id is free again */
void th_blocks_free(th_blocks* a);

/* Blocks covering n tokens. */
size_t th_nblocks(size_t n, uint32_t block_tokens);

/* A request over [begin, end) of the prompt (end TUTTI_TOKENS_ALL: the whole prompt). */
tutti_request th_request(const th_prompt* p, const int32_t* table, size_t ntable, size_t begin,
                         size_t end);

/* ---- Runtime and batch shortcuts ------------------------------------------------------ */

/* Options for a pool "<dir>/pool.tutti" with a small footprint (staging, rings, threads), the
 * given capacity and chunk size, then the NULL-terminated key/value pairs of `extra` (may be
 * NULL). A "pool" key in `extra` replaces the default pool. Returns 0 or the first failing code. */
int th_options(tutti_options** out, const char* dir, const char* capacity,
               unsigned chunk_tokens, const char* const* extra);
/* th_options + tutti_runtime_open + tutti_runtime_register_kv. Returns 0 or the first failing
 * code; *out is NULL on failure. */
int th_open(tutti_runtime** out, const char* dir, const char* capacity, unsigned chunk_tokens,
            const char* const* extra, const th_kv* kv);

/* create, add, submit, (wait_layer 0..num_layers-1 in order if wait_layers), wait, results,
 * destroy. Returns the first failing code of create/add/submit/wait_layer, else wait's code.
 * results (n entries) may be NULL. No cmocka calls: usable from any thread. */
int th_batch_run(tutti_runtime* rt, tutti_op op, const tutti_request* reqs, size_t n,
                 tutti_result* results, int wait_layers, uint32_t num_layers);

/* The tutti_last_error() of th_batch_run's failing call on this thread (the later destroy may
 * reset tutti_last_error()). */
const char* th_batch_error(void);

/* Store the whole prompt from `table` (pattern filled first) and assert it committed. */
void th_store_prompt(tutti_runtime* rt, th_kv* kv, const th_prompt* p, const int32_t* table,
                     size_t ntable);
/* Stores `count` random prompts of `tokens` tokens (at most 64 blocks each) from blocks of a
 * fresh shuffle of `alloc`, their pattern filled first; results are not checked (a pool they
 * overfill evicts). */
void th_store_random_prompts(tutti_runtime* rt, th_kv* kv, th_blocks* alloc, uint64_t* rng, uint64_t count,
                             size_t tokens);
/* Lookup shortcut: returns cached tokens, fails the test on error. */
size_t th_lookup(tutti_runtime* rt, const th_prompt* p);
/* Poison `table`'s blocks, load [0, tokens) into them, assert success and compare bytes. */
void th_load_and_check(tutti_runtime* rt, th_kv* kv, const th_prompt* p, const int32_t* table,
                       size_t ntable, size_t tokens);

/* For main(): a pool can be created in a temp dir here. Returns 0, or TH_SKIP (printing why)
 * when tutti says the machine cannot host one (TUTTI_EUNSUPPORTED); other failures are left
 * for the tests to report. */
int th_require_pool(void);

/* Stats shortcut (fails the test on error). */
tutti_stats th_stats(const tutti_runtime* rt);

#endif /* TUTTI_CAPI_HELPERS_H */
