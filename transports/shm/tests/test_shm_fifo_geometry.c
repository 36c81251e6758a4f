/* test_shm_fifo_geometry.c: the shm FIFO's geometry (transports/shm/shm_state.h,
 * weft__shm_default_geometry): 64 slots of 32 KiB per direction in pieces of up to 8 slots
 * with a core per rank, 8 of 128 KiB (a piece a slot) with more ranks on the host than
 * cores, WEFT_SHM_NSLOTS / WEFT_SHM_SLOT_BYTES over either. Read from the transport's state
 * on real ranks, on every connection both ways, and checked to carry an exact all-reduce and
 * all-to-all of several pieces per message, pieces cut where the slots end among them; and
 * the piece arithmetic itself (shm_fifo.h).
 * Here, inside transports/shm/, because it reads the transport's state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "tests/harness.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_state.h"

typedef struct {
  size_t nslots, slot_bytes, piece_slots;
} geometry;

/* Every connection of this rank, both ways, has the geometry; then bytes cross it exactly. */
static int geometry_body(harness_rank *r) {
  const geometry *want = r->arg;
  weft__shm_state *st = weft__shm_state_of((struct weft_comm *)r->comm);
  if (st == NULL || st->npeers != r->nranks - 1)
    return harness_fail(r, "no shm state with %d peers", r->nranks - 1);
  if (st->nslots != want->nslots || st->slot_bytes != want->slot_bytes)
    harness_fail(r, "FIFO geometry %zu slots of %zu bytes, want %zu of %zu (%d ranks, %ld cores)", st->nslots,
                 st->slot_bytes, want->nslots, want->slot_bytes, r->nranks, sysconf(_SC_NPROCESSORS_ONLN));
  for (int i = 0; i < st->npeers; i++) {
    const weft__shm_fifo *out = &st->conns[i].out, *in = &st->conns[i].in;
    if (out->nslots != want->nslots || out->slot_bytes != want->slot_bytes || in->nslots != want->nslots ||
        in->slot_bytes != want->slot_bytes || out->piece_slots != want->piece_slots ||
        in->piece_slots != want->piece_slots)
      harness_fail(r, "connection to peer index %d: out %llu x %llu (pieces of %llu), in %llu x %llu (pieces of %llu) "
                   "bytes, want %zu x %zu (pieces of %zu)", i, (unsigned long long)out->nslots,
                   (unsigned long long)out->slot_bytes, (unsigned long long)out->piece_slots,
                   (unsigned long long)in->nslots, (unsigned long long)in->slot_bytes,
                   (unsigned long long)in->piece_slots, want->nslots, want->slot_bytes, want->piece_slots);
  }
  /* 12 slots and a part per message at 32 KiB slots, 97 and a part at 4 KiB: pieces cut
   * where the slots end, messages wrapping around the FIFO. */
  enum { COUNT = 100000 };
  int32_t *a = malloc((size_t)COUNT * r->nranks * sizeof(*a)), *b = malloc((size_t)COUNT * r->nranks * sizeof(*b));
  if (a == NULL || b == NULL) {
    free(a), free(b);
    return harness_fail(r, "out of memory");
  }
  for (int i = 0; i < COUNT; i++) a[i] = (r->rank + 1) * (i % 1000);
  if (harness_expect_status(r, weft_all_reduce(a, b, COUNT, WEFT_INT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                            "all_reduce of 100000 int32"))
    for (int i = 0; i < COUNT; i++)
      if (b[i] != r->nranks * (r->nranks + 1) / 2 * (i % 1000)) {
        harness_fail(r, "all_reduce element %d: %d, want %d", i, b[i], r->nranks * (r->nranks + 1) / 2 * (i % 1000));
        break;
      }
  for (int p = 0; p < r->nranks; p++)
    for (int i = 0; i < COUNT; i++) a[(size_t)p * COUNT + i] = r->rank * 1000003 + p * 7 + i;
  if (harness_expect_status(r, weft_all_to_all(a, b, COUNT, WEFT_INT32, r->comm, NULL), WEFT_SUCCESS,
                            "all_to_all of 100000 int32 per peer"))
    for (int p = 0; p < r->nranks; p++)
      for (int i = 0; i < COUNT; i++)
        if (b[(size_t)p * COUNT + i] != p * 1000003 + r->rank * 7 + i) {
          harness_fail(r, "all_to_all block from rank %d, element %d: %d, want %d", p, i, b[(size_t)p * COUNT + i],
                       p * 1000003 + r->rank * 7 + i);
          p = r->nranks;
          break;
        }
  free(a), free(b);
  return r->failures;
}

static void run_geometry(int nranks, const geometry *want) {
  harness_opts o = {0};
  o.nranks = nranks;
  o.transport = "shm";
  harness_run(&o, geometry_body, (void *)want);
}

/* One more rank than this machine has cores, or 0 (skip) when the harness cannot run so many. */
static int oversubscribed_ranks(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 && cores + 1 <= HARNESS_MAX_RANKS ? (int)cores + 1 : 0;
}

static void a_core_per_rank_gets_64_slots_of_32k_in_pieces_of_8(void **unused) {
  (void)unused;
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) skip(); /* 2 ranks would be more than the cores */
  static const geometry want = {64, 32 << 10, 8};
  run_geometry(2, &want);
}

static void more_ranks_than_cores_keep_8_slots_of_128k(void **unused) {
  (void)unused;
  int n = oversubscribed_ranks();
  if (n == 0) skip();
  static const geometry want = {8, 128 << 10, 1};
  run_geometry(n, &want);
}

static void run_with_geometry_from_env(int nranks, const char *nslots, const char *slot_bytes, const geometry *want) {
  setenv("WEFT_SHM_NSLOTS", nslots, 1); /* the ranks are forked: they inherit it */
  setenv("WEFT_SHM_SLOT_BYTES", slot_bytes, 1);
  run_geometry(nranks, want);
  unsetenv("WEFT_SHM_NSLOTS");
  unsetenv("WEFT_SHM_SLOT_BYTES");
}

static void the_environment_overrides_the_oversubscribed_default(void **unused) {
  (void)unused;
  int n = oversubscribed_ranks();
  if (n == 0) skip();
  static const geometry want = {3, 64 << 10, 1};
  run_with_geometry_from_env(n, "3", "65536", &want);
}

/* 29 slots in pieces of 3: every lap ends in a piece cut to 2 slots. */
static void pieces_are_cut_where_the_slots_end(void **unused) {
  (void)unused;
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) skip();
  static const geometry want = {29, 4 << 10, 3};
  run_with_geometry_from_env(2, "29", "4096", &want);
}

/* The arithmetic of pieces (shm_fifo.h), on a FIFO of no memory. */
static void a_piece_spans_at_most_an_eighth_of_the_fifo_and_never_wraps(void **unused) {
  (void)unused;
  weft__shm_fifo f = {.nslots = 29, .slot_bytes = 4096, .piece_slots = weft__shm_fifo_piece_slots(29, 4096)};
  assert_int_equal(f.piece_slots, 3);
  assert_int_equal(weft__shm_piece_max(&f, 0), 3 * 4096);
  assert_int_equal(weft__shm_piece_max(&f, 26), 3 * 4096);
  assert_int_equal(weft__shm_piece_max(&f, 27), 2 * 4096); /* slots 27 and 28, then the end */
  assert_int_equal(weft__shm_piece_max(&f, 28), 4096);
  assert_int_equal(weft__shm_piece_max(&f, 29), 3 * 4096); /* slot 0 again */
  assert_int_equal(weft__shm_piece_slots(&f, 0), 1);
  assert_int_equal(weft__shm_piece_slots(&f, 4096), 1);
  assert_int_equal(weft__shm_piece_slots(&f, 4097), 2);
  assert_int_equal(weft__shm_piece_slots(&f, 3 * 4096), 3);
  assert_int_equal(weft__shm_fifo_piece_slots(64, 32 << 10), 8);   /* the default: pieces of 256 KiB */
  assert_int_equal(weft__shm_fifo_piece_slots(8, 256 << 10), 1);   /* the old geometry: a piece a slot */
  assert_int_equal(weft__shm_fifo_piece_slots(4096, 1ull << 30), 1); /* 512 slots would overflow bytes */
  assert_int_equal(weft__shm_fifo_piece_slots(4096, 1u << 20), 512); /* 512 MiB, under the cap */
  assert_int_equal(weft__shm_fifo_piece_slots(4096, 4u << 20), 256); /* 2 GiB, cut to 1 */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_core_per_rank_gets_64_slots_of_32k_in_pieces_of_8),
      cmocka_unit_test(more_ranks_than_cores_keep_8_slots_of_128k),
      cmocka_unit_test(the_environment_overrides_the_oversubscribed_default),
      cmocka_unit_test(pieces_are_cut_where_the_slots_end),
      cmocka_unit_test(a_piece_spans_at_most_an_eighth_of_the_fifo_and_never_wraps),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
