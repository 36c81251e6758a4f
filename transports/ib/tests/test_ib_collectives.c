/* test_ib_collectives.c: the collective sweep of tests/sweep.c (every collective, datatype,
 * op and root, in place and out of place, against a reference, results bitwise equal on
 * every rank) over the ib transport on the verbs emulator (tests/verbs_emu/): forced
 * between every pair (WEFT_TRANSPORT=ib, as the shm and socket sweeps force theirs) on 1-4
 * ranks with large counts of 4 MiB (8 slices of 512 KiB, so the slice pipeline wraps its
 * slots) and with 64 KiB slices, with the transport's optional capabilities hidden from
 * the core (WEFT_TRANSPORT_CAPS=0, 4 KiB pipeline chunks), and chosen by the core on two
 * emulated hosts (WEFT_HOSTID: ib across, shm within). Skips (TAP "# SKIP") only when the emulator is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests/harness.h"
#include "tests/sweep.h"
#include "transports/ib/tests/verbs_emu_pair.h"

#define MIB4 ((size_t)4 << 20)
#define SWEEP_IB(n, big, quick)                                                             \
  {"all_collectives_match_reference_on_" #n "_ranks_over_ib_large_" #big, sweep_run, NULL, NULL, \
   &(sweep_params){n, "ib", 0, big, 0, 0, NULL, NULL, quick, NULL}}

static int setup_small_slices(void **state) {
  (void)state;
  return setenv("WEFT_IB_SLICE_BYTES", "65536", 1);
}
static int teardown_small_slices(void **state) {
  (void)state;
  return unsetenv("WEFT_IB_SLICE_BYTES");
}

int main(void) {
  harness_filter_from_env();
  int rc;
  if (!emu_test_begin(&rc)) return rc;
  setenv("WEFT_IB_TIMEOUT", "14", 1); /* 67 ms per try: a dead peer is noticed in about 0.5 s */
  const struct CMUnitTest tests[] = {
      SWEEP_IB(1, MIB4, 1),
      SWEEP_IB(2, MIB4, 0),
      SWEEP_IB(3, MIB4, 1),
      SWEEP_IB(4, MIB4, 1),
      {"all_collectives_match_reference_on_3_ranks_over_ib_with_64k_slices", sweep_run, setup_small_slices,
       teardown_small_slices, &(sweep_params){3, "ib", 0, (size_t)1 << 20, 0, 0, NULL, NULL, 1, NULL}},
      /* Buffers in registered windows (slices straight from and into them), and the last
       * rank's every third buffer outside (staged): the direct algorithms never run (ib
       * has no peer memory), the transport's zero-copy path does. */
      {"all_collectives_match_reference_in_windows_on_2_ranks_over_ib", sweep_run, NULL, NULL,
       &(sweep_params){2, "ib", 0, (size_t)1 << 20, 1, 0, NULL, NULL, 1, NULL}},
      {"all_collectives_match_reference_in_windows_with_fallbacks_on_3_ranks_over_ib", sweep_run, NULL, NULL,
       &(sweep_params){3, "ib", 0, (size_t)1 << 20, 2, 0, NULL, NULL, 1, NULL}},
      /* RECV_REDUCE hidden (WEFT_TRANSPORT_CAPS=0): the core stages reductions itself. */
      {"all_collectives_match_reference_on_3_ranks_over_ib_without_optional_capabilities", sweep_run, NULL, NULL,
       &(sweep_params){3, "ib", 4096, (size_t)256 << 10, 0, 0, NULL, NULL, 1, "0"}},
      {"all_collectives_match_reference_on_2_emulated_hosts_ib_across_shm_within", sweep_run, NULL, NULL,
       &(sweep_params){4, "ib", 0, (size_t)1 << 20, 0, 0, NULL, "aabb", 1, NULL}},
  };
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  emu_test_teardown();
  return rc;
}
