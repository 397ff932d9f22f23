// Compiled with -mavx512f (lib/CMakeLists.txt).
#define TUTTI_PAGE_HASH_NAME page_hash_avx512f
#include "common/page_hash_simd.inc"
