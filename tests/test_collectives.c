/* test_collectives.c: every collective on host memory, over shm and socket, 1 to 8 ranks
 * (more than the 2 cores, so a waiting rank must yield), with the tuner's choice of
 * algorithm, plus four runs with 4 KiB pipeline chunks, where "larger than one chunk" is
 * cheap even per ring block, and eight whose buffers are registered (the direct
 * algorithms): in windows, two of them of plain malloc'd memory, and in two each rank's
 * own registration (weft_comm_register), and three with the transports' optional capabilities hidden from the core
 * (WEFT_TRANSPORT_CAPS=0). What each run checks: tests/sweep.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/harness.h"
#include "tests/sweep.h"

#define MIB1 ((size_t)1 << 20)
#define SWEEP(n, tr)                                                                   \
  {"all_collectives_match_reference_on_" #n "_ranks_over_" #tr, sweep_run, NULL, NULL, \
   &(sweep_params){n, #tr, 0, MIB1, 0, 0, NULL, NULL, 0, NULL}}
#define SWEEP_CHUNKED(n, tr)                                                           \
  {"all_collectives_match_reference_with_4096_byte_chunks_on_" #n "_ranks_over_" #tr,  \
   sweep_run, NULL, NULL, &(sweep_params){n, #tr, 4096, (size_t)256 << 10, 0, 0, NULL, NULL, 0, NULL}}

#define SWEEP_WINDOWS(n, tr, mode)                                                      \
  {"all_collectives_match_reference_" #mode "_on_" #n "_ranks_over_" #tr, sweep_run, NULL, \
   NULL, &(sweep_params){n, #tr, 0, MIB1, mode + 1, 0, NULL, NULL, 0, NULL}}
/* The sweep's windows modes (tests/sweep.h) less one. */
enum { in_windows, in_windows_with_fallbacks, in_plain_windows, in_local_registrations, in_host_memory };

/* WEFT_TRANSPORT_CAPS=0: the transports' optional capabilities hidden from the core, which
 * must then do without them: reductions on arrival staged by the core (lib/req.c), no
 * sleep hook (naps), no liveness check, no placement probe, and windows unusable (the
 * direct algorithms need PEER_MEMORY: none may run). */
#define SWEEP_NO_CAPS(n, tr, mode)                                                               \
  {"all_collectives_match_reference_without_optional_transport_capabilities_" #mode "_on_" #n   \
   "_ranks_over_" #tr, sweep_run, NULL, NULL,                                                      \
   &(sweep_params){n, #tr, 4096, (size_t)256 << 10, mode == in_windows ? 1 : 0, 0, NULL, NULL, 1, "0"}}

int main(void) {
  const struct CMUnitTest tests[] = {
      SWEEP_WINDOWS(2, shm, in_windows), SWEEP_WINDOWS(3, shm, in_windows_with_fallbacks),
      SWEEP_WINDOWS(4, shm, in_windows), SWEEP_WINDOWS(2, socket, in_windows),
      SWEEP_WINDOWS(2, shm, in_plain_windows), SWEEP_WINDOWS(4, shm, in_plain_windows),
      SWEEP_WINDOWS(3, shm, in_local_registrations), SWEEP_WINDOWS(2, socket, in_local_registrations),
      SWEEP(1, shm), SWEEP(2, shm), SWEEP(3, shm), SWEEP(4, shm), SWEEP(5, shm),
      SWEEP(7, shm), SWEEP(8, shm),
      SWEEP(1, socket), SWEEP(2, socket), SWEEP(3, socket), SWEEP(4, socket),
      SWEEP(5, socket), SWEEP(7, socket), SWEEP(8, socket),
      SWEEP_CHUNKED(3, shm), SWEEP_CHUNKED(4, socket), SWEEP_CHUNKED(8, shm),
      SWEEP_CHUNKED(5, socket),
      SWEEP_NO_CAPS(3, shm, in_host_memory), SWEEP_NO_CAPS(4, socket, in_host_memory),
      SWEEP_NO_CAPS(2, shm, in_windows),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
