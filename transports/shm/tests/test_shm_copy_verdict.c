/* test_shm_copy_verdict.c: the copy probe's verdict from its times
 * (transports/shm/shm_copy_probe.h, weft__shm_copy_verdict): one copy only when the read
 * beats the two copies by the margin, so that a measurement within the noise keeps two
 * copies (a wrong one-copy verdict ran a 16 MiB all-gather 1.8x slower on the AMD VM). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lib/req.h"
#include "transports/shm/shm_copy_probe.h"

static void a_read_just_under_the_two_copies_keeps_two_copies(void **unused) {
  (void)unused;
  /* the launch that went wrong: read 19.5 us, copy-in plus copy-out a little more */
  unsigned v = weft__shm_copy_verdict(9000, 10700, 19487);
  assert_int_equal(v, WEFT__SINGLE_COPY_MEASURED);
  /* one-way: the read just under the slower copy */
  v = weft__shm_copy_verdict(9000, 10000, 9500);
  assert_int_equal(v & WEFT__SINGLE_COPY_ONE_WAY, 0);
  assert_int_not_equal(v & WEFT__SINGLE_COPY_TWO_WAY, 0);
}

static void a_clear_win_chooses_one_copy(void **unused) {
  (void)unused;
  unsigned v = weft__shm_copy_verdict(9000, 10000, 7000);
  assert_int_equal(v, WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY | WEFT__SINGLE_COPY_ONE_WAY);
  /* the margin's edge: read 20% faster than the two copies is not enough, a little more is */
  assert_int_equal(weft__shm_copy_verdict(10000, 14000, 20000) & WEFT__SINGLE_COPY_TWO_WAY, 0);
  assert_int_not_equal(weft__shm_copy_verdict(10000, 14000, 19990) & WEFT__SINGLE_COPY_TWO_WAY, 0);
}

static void a_slow_read_keeps_two_copies(void **unused) {
  (void)unused;
  assert_int_equal(weft__shm_copy_verdict(6000, 7000, 27000), WEFT__SINGLE_COPY_MEASURED);
  /* no overflow at the clamp (uint32 ns): a read as slow as each copy beats their sum, not
   * the slower one */
  assert_int_equal(weft__shm_copy_verdict(UINT32_MAX, UINT32_MAX, UINT32_MAX),
                   WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_read_just_under_the_two_copies_keeps_two_copies),
      cmocka_unit_test(a_clear_win_chooses_one_copy),
      cmocka_unit_test(a_slow_read_keeps_two_copies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
