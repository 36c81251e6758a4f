/* test_nt_copy.c: weft__nt_copy (mem/nt_copy.c), the non-temporal copy large
 * received messages take, against memcpy: every source and destination misalignment within a
 * cache line, sizes around the 64-byte loop's edges, and bytes around the destination left
 * untouched. The collectives over it are covered by tests/nt_copy_collectives.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "mem/nt_copy.h"
#include "mem/space.h"

enum { GUARD = 64, MAXN = 4096 + 200 };

static void copies_like_memcpy_at_every_alignment(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 15, 63, 64, 65, 127, 128, 191, 1000, 4096, 4096 + 129};
  unsigned char *src = malloc(MAXN + 2 * GUARD), *dst = malloc(MAXN + 2 * GUARD);
  assert_non_null(src);
  assert_non_null(dst);
  for (size_t i = 0; i < MAXN + 2 * GUARD; i++) src[i] = (unsigned char)(i * 131 + 7);
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
    for (int so = 0; so < 64; so += 7)
      for (int d0 = 0; d0 < 64; d0 += 5) {
        size_t n = sizes[si];
        memset(dst, 0xa5, MAXN + 2 * GUARD);
        weft__nt_copy(dst + GUARD + d0, src + GUARD + so, n);
        assert_memory_equal(dst + GUARD + d0, src + GUARD + so, n);
        for (int g = 0; g < GUARD + d0; g++) assert_int_equal(dst[g], 0xa5);
        for (size_t g = GUARD + d0 + n; g < MAXN + 2 * GUARD; g++) assert_int_equal(dst[g], 0xa5);
      }
  free(src);
  free(dst);
}

static void threshold_is_positive(void **state) {
  (void)state;
  assert_true(weft__mem_nt_threshold() > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(copies_like_memcpy_at_every_alignment),
      cmocka_unit_test(threshold_is_positive),
  };
  return cmocka_run_group_tests_name("test_nt_copy", tests, NULL, NULL);
}
