// Compiled with -mavx2 (lib/CMakeLists.txt).
#define TUTTI_PAGE_HASH_NAME page_hash_avx2
#include "common/page_hash_simd.inc"
