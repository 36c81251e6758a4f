/* test_shm_ll_credit.c: an LL receiver returns credit (the FIFO's ll_done line) once per
 * WEFT__SHM_LL_CREDIT_BATCH chunks, not after each (transports/shm/shm_ll.h says why), and
 * every message still arrives whole. Rank 0 broadcasts 8-byte messages (one LL chunk each)
 * to rank 1, which after each one reads its inbound FIFO: ll_done must be the last multiple
 * of the batch among the chunks it consumed. The broadcasts run past two batches, so the
 * root, which may run K = WEFT__SHM_LL_BUFS chunks ahead, also waits for batched credit.
 * Here, inside transports/shm/, because it reads the transport's state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "tests/harness.h"
#include "transports/shm/shm_ll.h"
#include "transports/shm/shm_state.h"

enum { CALLS = 3 * WEFT__SHM_LL_BUFS + 5 };

static int credit_body(harness_rank *r) {
  weft__shm_state *st = weft__shm_state_of((struct weft_comm *)r->comm);
  if (st == NULL || st->npeers != 1) return harness_fail(r, "no shm state with one peer");
  const weft__shm_conn *sc = &st->conns[0];
  uint64_t first = sc->ll_recv_seq; /* chunks already consumed: first - 1 */
  for (int i = 0; i < CALLS; i++) {
    uint64_t v = r->rank == 0 ? 0x5eed0000u + (uint64_t)i : 0;
    char what[64];
    snprintf(what, sizeof what, "broadcast %d of 8 bytes", i);
    if (!harness_expect_status(r, weft_broadcast(&v, &v, 1, WEFT_UINT64, 0, r->comm, NULL), WEFT_SUCCESS, what))
      return r->failures;
    if (v != 0x5eed0000u + (uint64_t)i)
      return harness_fail(r, "%s: got %#llx, expected %#llx", what, (unsigned long long)v,
                          (unsigned long long)(0x5eed0000u + (uint64_t)i));
    if (r->rank == 0) continue;
    uint64_t consumed = sc->ll_recv_seq - 1;
    uint64_t done = atomic_load_explicit(&sc->in.ctrl->ll_done, memory_order_relaxed);
    uint64_t want = consumed - consumed % WEFT__SHM_LL_CREDIT_BATCH;
    if (consumed != first + (uint64_t)i)
      return harness_fail(r, "%s: %llu LL chunks consumed, expected %llu (one per message)", what,
                          (unsigned long long)consumed, (unsigned long long)(first + (uint64_t)i));
    if (done != want)
      return harness_fail(r, "%s: ll_done is %llu after %llu chunks, expected %llu (credit once per %d)",
                          what, (unsigned long long)done, (unsigned long long)consumed,
                          (unsigned long long)want, WEFT__SHM_LL_CREDIT_BATCH);
  }
  return r->failures;
}

static void ll_credit_returns_once_per_batch_of_chunks(void **state) {
  (void)state;
  harness_run_simple(2, "shm", credit_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ll_credit_returns_once_per_batch_of_chunks),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
