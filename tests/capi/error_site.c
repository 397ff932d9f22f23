// SPDX-License-Identifier: Apache-2.0
/* error_site: with TUTTI_DEBUG=1 a failed call's message ends with " [lib/<file>:<line>]", the
 * place in tutti's source that failed; without it, or with TUTTI_DEBUG=0, it is the plain one. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* Length of the plain message before a trailing " [lib/<path>.<cpp|hpp|cu>:<line>]", or 0 when
 * `msg` has no such tail. `file` (may be NULL) receives the path. */
static size_t site_at(const char* msg, char* file, size_t cap) {
  size_t n = strlen(msg);
  if (n < 2 || msg[n - 1] != ']') return 0;
  const char* open = strrchr(msg, '[');
  if (!open || open == msg || open[-1] != ' ' || strncmp(open + 1, "lib/", 4) != 0) return 0;
  const char* colon = strrchr(open, ':');
  if (!colon || colon + 1 == msg + n - 1) return 0;
  for (const char* d = colon + 1; d < msg + n - 1; ++d)
    if (!isdigit((unsigned char)*d)) return 0;
  const char* dot = colon;
  while (dot > open && *dot != '.') --dot;
  size_t ext = (size_t)(colon - dot);
  if (!((ext == 4 && (!strncmp(dot, ".cpp", 4) || !strncmp(dot, ".hpp", 4))) ||
        (ext == 3 && !strncmp(dot, ".cu", 3))))
    return 0;
  if (file) snprintf(file, cap, "%.*s", (int)(colon - open - 1), open + 1);
  return (size_t)(open - 1 - msg);
}

/* Runs `call` with TUTTI_DEBUG unset, 1 and 0; each must fail with `code`. With 1 the message is
 * the plain one and a site, whose file lands in `file` (an array); with 0 it is the plain one. */
#define SITE_OF(code, call, file)                                                          \
  do {                                                                                     \
    char th_plain_[512], th_debug_[512];                                                   \
    unsetenv("TUTTI_DEBUG");                                                               \
    TH_ERR((code), (call));                                                                \
    snprintf(th_plain_, sizeof th_plain_, "%s", tutti_last_error());                       \
    if (site_at(th_plain_, NULL, 0))                                                       \
      fail_msg("%s without TUTTI_DEBUG: '%s' names a source line", #call, th_plain_);      \
    setenv("TUTTI_DEBUG", "1", 1);                                                         \
    TH_ERR((code), (call));                                                                \
    snprintf(th_debug_, sizeof th_debug_, "%s", tutti_last_error());                       \
    size_t th_len_ = site_at(th_debug_, (file), sizeof(file));                             \
    if (!th_len_)                                                                          \
      fail_msg("%s with TUTTI_DEBUG=1: '%s' ends with no ' [lib/<file>:<line>]'", #call,   \
               th_debug_);                                                                 \
    if (th_len_ != strlen(th_plain_) || strncmp(th_debug_, th_plain_, th_len_) != 0)       \
      fail_msg("%s: with TUTTI_DEBUG=1 '%s', without '%s'", #call, th_debug_, th_plain_);  \
    setenv("TUTTI_DEBUG", "0", 1);                                                         \
    TH_ERR((code), (call));                                                                \
    if (strcmp(tutti_last_error(), th_plain_) != 0)                                        \
      fail_msg("%s with TUTTI_DEBUG=0: '%s', expected '%s'", #call, tutti_last_error(),    \
               th_plain_);                                                                 \
    unsetenv("TUTTI_DEBUG");                                                               \
  } while (0)

/* An option the runtime does not know: the options parser's check. */
static void test_option_site(void** state) {
  (void)state;
  tutti_options* o = NULL;
  TH_OK(tutti_options_create(&o));
  char file[256];
  SITE_OF(TUTTI_EINVAL, tutti_options_set(o, "no_such_key", "1"), file);
  TH_EQ(strcmp(file, "lib/runtime/config.cpp"), 0);
  SITE_OF(TUTTI_EINVAL, tutti_options_set(o, "capacity", "12x"), file);
  tutti_options_destroy(o);
}

/* A NULL argument: the site is the entry point's check, not the helper that throws. */
static void test_null_site(void** state) {
  (void)state;
  char file[256];
  SITE_OF(TUTTI_EINVAL, tutti_options_set(NULL, "pool", "x"), file);
  TH_EQ(strcmp(file, "lib/capi/tutti.cpp"), 0);
}

/* A failure deep in the runtime: a pool whose directory does not exist. */
static void test_open_site(void** state) {
  th_env* env = *state;
  char pool[1200], file[256];
  snprintf(pool, sizeof pool, "%s/missing/dir/pool.tutti", env->dir);
  const char* extra[] = {"pool", pool, "create", "0", NULL};
  th_kv* kv = NULL;
  th_kv_spec spec = th_spec_default();
  TH_OK(th_kv_create(&kv, &spec));
  tutti_runtime* rt = NULL;
  SITE_OF(TUTTI_EACCES, th_open(&rt, env->dir, "64M", 32, extra, kv), file);
  TH_EQ(rt == NULL, 1);
  th_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_option_site),
      cmocka_unit_test(test_null_site),
      cmocka_unit_test_setup_teardown(test_open_site, th_setup_dir, th_teardown_dir),
  };
  return cmocka_run_group_tests_name("error_site", tests, NULL, NULL);
}
