/* test_shm_probe_schedule.c: when the shm placement probe runs (transports/shm/shm_placement.h,
 * weft__shm_probe_due). Calls of 16 MiB and more keep the old schedule (the first large call
 * and every 16th after it); smaller large calls probe once per WEFT__SHM_PROBE_EVERY_BYTES
 * moved, not every 16th call: a probe costs ~100 us, and every 16th 256 KiB broadcast of a
 * 2-rank bench paid it (~6 us added to each 11-13 us call). Smaller calls probe again every
 * WEFT__SHM_PROBE_EVERY_SMALL of them, counted from the last probe of any size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transports/shm/shm_placement.h"

typedef struct {
  uint64_t probes, large, since_calls, since_bytes, since_small;
} schedule;

/* Runs n calls of `bytes` each; returns how many probed and stores the index of the first
 * two that did after call 0 in at[0], at[1] (or -1). */
static int run(schedule *s, size_t bytes, int n, long at[2]) {
  int count = 0;
  at[0] = at[1] = -1;
  for (int i = 0; i < n; i++) {
    if (!weft__shm_probe_due(s->probes, &s->large, &s->since_calls, &s->since_bytes, &s->since_small, bytes))
      continue;
    s->probes++;
    count++;
    if (i > 0 && at[0] < 0) at[0] = i;
    else if (i > 0 && at[1] < 0) at[1] = i;
  }
  return count;
}

static void calls_of_16_mib_probe_first_and_every_16th(void **unused) {
  (void)unused;
  schedule s = {0};
  long at[2];
  assert_int_equal(run(&s, 16u << 20, 64, at), 4); /* calls 0, 16, 32, 48 */
  assert_int_equal(at[0], 16);
  assert_int_equal(at[1], 32);
  schedule big = {0};
  assert_int_equal(run(&big, 256u << 20, 64, at), 4); /* the 16-call bound holds above 16 MiB */
  assert_int_equal(at[0], 16);
}

static void calls_of_256_kib_probe_once_per_256_mib(void **unused) {
  (void)unused;
  schedule s = {0};
  long at[2];
  assert_int_equal(run(&s, 256u << 10, 2049, at), 3); /* calls 0, 1024, 2048: not every 16th */
  assert_int_equal(at[0], 1024);
  assert_int_equal(at[1], 2048);
}

static void the_first_collective_probes_and_the_first_large_one_at_once(void **unused) {
  (void)unused;
  schedule s = {0};
  long at[2];
  assert_int_equal(run(&s, 8u << 10, 1000, at), 1); /* the first only */
  /* the first large call after them probes at once, whatever came before */
  assert_int_equal(weft__shm_probe_due(s.probes, &s.large, &s.since_calls, &s.since_bytes, &s.since_small, 1u << 20),
                   1);
}

static void small_calls_probe_again_every_65536th(void **unused) {
  (void)unused;
  schedule s = {0};
  long at[2];
  assert_int_equal(WEFT__SHM_PROBE_EVERY_SMALL, 65536);
  assert_int_equal(run(&s, 2u << 10, 2 * 65536 + 1, at), 3); /* calls 0, 65536, 131072 */
  assert_int_equal(at[0], 65536);
  assert_int_equal(at[1], 2 * 65536);
  schedule mid = {0};
  assert_int_equal(run(&mid, (256u << 10) - 4, 65536, at), 1); /* just below the large calls' floor */
  assert_int_equal(run(&mid, (256u << 10) - 4, 1, at), 1);
}

static void a_large_probe_restarts_the_small_calls_count(void **unused) {
  (void)unused;
  schedule s = {0};
  long at[2];
  assert_int_equal(run(&s, 4u << 10, 60000, at), 1);
  assert_int_equal(run(&s, 1u << 20, 1, at), 1); /* the first large call */
  /* 65536 small calls after it, not 5536: the large call's probe counts */
  assert_int_equal(run(&s, 4u << 10, 65536, at), 1);
  assert_int_equal(at[0], 65535);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(calls_of_16_mib_probe_first_and_every_16th),
      cmocka_unit_test(calls_of_256_kib_probe_once_per_256_mib),
      cmocka_unit_test(the_first_collective_probes_and_the_first_large_one_at_once),
      cmocka_unit_test(small_calls_probe_again_every_65536th),
      cmocka_unit_test(a_large_probe_restarts_the_small_calls_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
