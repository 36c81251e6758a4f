/* test_shm_payload.c: a FIFO's payload pages are made ready by the first message of each
 * size, in every slot at once, and no further (transports/shm/shm_conn.h,
 * weft__shm_payload_ready): small messages commit none of them; after one 64 KiB message
 * the first 64 KiB of every slot of the receiver's inbound FIFO is resident, not only the
 * 16 pages that message used (a first use of each page in later calls cost ~9 us there,
 * ~20 ms inside a benchmark's timed calls), and nothing beyond (memory, with many ranks).
 * mincore(2) on the receiver's mapping of its own segment tells which pages exist.
 * Here, inside transports/shm/, because it reads the transport's state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "tests/harness.h"
#include "transports/shm/shm_state.h"

/* How many pages of rank's inbound payload slots from peer index 0 are resident; *total
 * of them in all, *want after one 64 KiB message. */
static size_t resident_payload_pages(harness_rank *r, size_t *total, size_t *want) {
  weft__shm_state *st = weft__shm_state_of((struct weft_comm *)r->comm);
  if (st == NULL || st->npeers != 1) {
    harness_fail(r, "no shm state with one peer");
    return 0;
  }
  const weft__shm_fifo *f = &st->conns[0].in;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = f->nslots * f->slot_bytes;
  *total = bytes / page;
  *want = f->nslots * ((f->slot_bytes < 65536 ? f->slot_bytes : 65536) / page);
  unsigned char *vec = calloc(*total, 1);
  size_t n = 0;
  if (vec == NULL || mincore(f->payload, bytes, vec) != 0) {
    harness_fail(r, "mincore of the inbound payload failed");
  } else {
    for (size_t i = 0; i < *total; i++) n += vec[i] & 1;
  }
  free(vec);
  return n;
}

static int payload_body(harness_rank *r) {
  float small[8] = {0};
  for (int i = 0; i < 4; i++)
    harness_expect_status(r, weft_all_reduce(small, small, 8, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL),
                          WEFT_SUCCESS, "all_reduce of 8 float32");
  size_t total = 0, want = 0, before = resident_payload_pages(r, &total, &want);
  if (before != 0) harness_fail(r, "small messages only: %zu of %zu payload pages resident (want 0)", before, total);
  /* rank 0 sends only once rank 1 has looked */
  harness_expect_status(r, weft_all_reduce(small, small, 8, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL),
                        WEFT_SUCCESS, "all_reduce of 8 float32 after the first look");
  enum { COUNT = 16384 }; /* 64 KiB of float32: one payload slot, 16 pages of it */
  float *buf = calloc(COUNT, sizeof(float));
  if (buf == NULL) return harness_fail(r, "out of memory");
  for (int i = 0; i < COUNT; i++) buf[i] = (float)i;
  if (r->rank == 0) {
    harness_expect_status(r, weft_send(buf, COUNT, WEFT_FLOAT32, 1, r->comm, NULL), WEFT_SUCCESS,
                          "send of 64 KiB to rank 1");
  } else {
    memset(buf, 0, COUNT * sizeof(float));
    harness_expect_status(r, weft_recv(buf, COUNT, WEFT_FLOAT32, 0, r->comm, NULL), WEFT_SUCCESS,
                          "recv of 64 KiB from rank 0");
    int wrong = 0;
    for (int i = 0; i < COUNT; i++) wrong += buf[i] != (float)i;
    if (wrong) harness_fail(r, "%d wrong elements received", wrong);
    size_t after = resident_payload_pages(r, &total, &want);
    if (after != want)
      harness_fail(r, "after one 64 KiB message: %zu of %zu payload pages resident (want %zu: 64 KiB of each slot)",
                   after, total, want);
    harness_note(r, "payload pages resident: %zu before, %zu of %zu after one 64 KiB message", before, after, total);
  }
  free(buf);
  return r->failures;
}

static void the_first_message_of_a_size_readies_that_much_of_every_slot(void **state) {
  (void)state;
  harness_run_simple(2, "shm", payload_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_first_message_of_a_size_readies_that_much_of_every_slot),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
