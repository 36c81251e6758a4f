/* test_single_copy: which messages the core wants moved by one copy (lib/req.h,
 * weft__req_single_copy_wanted): all-gather and all-to-all(v) do; reductions, one-way calls
 * (broadcast, gather, scatter, a lone send), the barrier and a request outside any call do not;
 * a send of an exchange (a group that also receives into other bytes) does, as all-to-all's;
 * with more ranks than cores, only calls receiving at most 16 MiB per rank; all-gather blocks
 * of 32 MiB and more keep two copies; broadcast
 * messages of at most 1 MiB do when the cores are far apart (a measured round trip >= 100 ns).
 * Below 64 KiB only out-of-place all-gather and all-to-all messages with a core per rank.
 * Where the transport measured both paths (its copy verdict), the measurement decides
 * instead of the guesses, within the same bounds.
 * The figures behind the policy are in lib/req.c; the single-copy path itself is swept by
 * tests/cma_collectives.sh and test_guarded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "algos/p2p/p2p.h"
#include "lib/comm.h"
#include "lib/req.h"
#include "lib/task.h"

static struct weft_comm comm2 = {.nranks = 2}, comm4_on_2 = {.nranks = 4, .oversubscribed = 1};

/* A send of msg_bytes in *call, set to a call of coll over count floats. */
static weft__req send_in_call(weft__fp_call *call, weft__coll_t coll, uint64_t count, size_t msg_bytes) {
  memset(call, 0, sizeof(*call));
  call->fp.coll = (uint8_t)(coll + 1);
  call->fp.count = count;
  call->fp.type = (uint8_t)WEFT_FLOAT32;
  weft__req r;
  weft__req_init_send(&r, NULL, NULL, msg_bytes);
  r.call = call;
  return r;
}

/* Whether a send of msg_bytes (staged or not) in a call of coll over count floats goes single
 * copy, with a measured round trip of rt_ns to the receiver and the transport's copy verdict
 * (WEFT__SINGLE_COPY_*, 0: not measured). */
static int msg_wanted_measured(const struct weft_comm *comm, weft__coll_t coll, uint64_t count, size_t msg_bytes,
                               int staged, unsigned rt_ns, unsigned verdict) {
  weft__fp_call call;
  weft__req r = send_in_call(&call, coll, count, msg_bytes);
  r.staged = staged;
  return weft__req_single_copy_wanted(comm, &r, rt_ns, verdict);
}

static int msg_wanted(const struct weft_comm *comm, weft__coll_t coll, uint64_t count, size_t msg_bytes,
                      int staged, unsigned rt_ns) {
  return msg_wanted_measured(comm, coll, count, msg_bytes, staged, rt_ns, 0);
}

/* A 1 MiB message of a call of count floats, the probe not measured yet. */
static int wanted_on(const struct weft_comm *comm, weft__coll_t coll, uint64_t count) {
  return msg_wanted(comm, coll, count, 1 << 20, 0, 0);
}

static int wanted(weft__coll_t coll, uint64_t count) { return wanted_on(&comm2, coll, count); }

static void all_gather_and_all_to_all_go_single_copy(void **state) {
  (void)state;
  assert_true(wanted(WEFT__COLL_ALL_GATHER, 1 << 18));
  assert_true(wanted(WEFT__COLL_ALL_TO_ALL, 1 << 18));
  assert_true(wanted(WEFT__COLL_ALL_TO_ALLV, 0));
  assert_true(wanted(WEFT__COLL_ALL_GATHER, weft__mem_nt_threshold() / 2 / 4 - 1)); /* a block under 32 MiB */
  assert_true(wanted(WEFT__COLL_ALL_TO_ALL, (uint64_t)1 << 26)); /* 256 MiB per rank */
}

/* An all-gather block of at least twice the size that bypasses the cache
 * (weft__mem_nt_threshold, 16 MiB by default) goes on two copies, in place and out, even
 * where the probe measured one copy faster; all-to-all keeps one copy there. */
static void all_gather_blocks_past_the_cache_keep_two_copies(void **state) {
  (void)state;
  const unsigned one_copy_faster = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  uint64_t past = weft__mem_nt_threshold() / 4; /* floats */
  const weft__coll_t both_ways[] = {WEFT__COLL_ALL_GATHER, WEFT__COLL_ALL_TO_ALL};
  for (size_t i = 0; i < 2; i++) {
    int all_to_all = both_ways[i] == WEFT__COLL_ALL_TO_ALL;
    assert_true(msg_wanted_measured(&comm2, both_ways[i], past, 1 << 20, 0, 60, one_copy_faster));
    assert_true(msg_wanted_measured(&comm2, both_ways[i], 2 * past - 1, 1 << 20, 0, 60, one_copy_faster));
    assert_int_equal(msg_wanted_measured(&comm2, both_ways[i], 2 * past, 1 << 20, 0, 60, one_copy_faster),
                     all_to_all);
    assert_int_equal(msg_wanted(&comm2, both_ways[i], (uint64_t)1 << 26, 1 << 20, 0, 60), all_to_all);
  }
}

static void oversubscribed_ranks_go_single_copy_up_to_16_mib(void **state) {
  (void)state;
  assert_true(wanted_on(&comm4_on_2, WEFT__COLL_ALL_GATHER, (16u << 20) / 4 / 4));
  assert_false(wanted_on(&comm4_on_2, WEFT__COLL_ALL_GATHER, (16u << 20) / 4 / 4 + 1));
  assert_true(wanted_on(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, 1 << 16));
  assert_false(wanted_on(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, 1 << 22));
  assert_true(wanted_on(&comm4_on_2, WEFT__COLL_ALL_TO_ALLV, 0));
  assert_false(wanted_on(&comm4_on_2, WEFT__COLL_ALL_REDUCE, 1 << 10));
}

static void reductions_and_one_way_calls_keep_two_copies(void **state) {
  (void)state;
  const weft__coll_t two[] = {WEFT__COLL_ALL_REDUCE, WEFT__COLL_REDUCE, WEFT__COLL_REDUCE_SCATTER,
                              WEFT__COLL_BROADCAST, WEFT__COLL_GATHER, WEFT__COLL_SCATTER,
                              WEFT__COLL_SEND, WEFT__COLL_BARRIER};
  for (size_t i = 0; i < sizeof(two) / sizeof(two[0]); i++) {
    assert_false(wanted(two[i], 1 << 10));
    assert_false(wanted(two[i], (uint64_t)1 << 26));
  }
}

/* A broadcast message of at most 1 MiB goes single copy once the probe measured the cores
 * far apart (a round trip of 100 ns or more); not before it measured, not between near
 * cores, not above 1 MiB, not with more ranks than cores. */
static int broadcast_wanted(const struct weft_comm *comm, size_t bytes, unsigned rt_ns) {
  return msg_wanted(comm, WEFT__COLL_BROADCAST, bytes / 4, bytes, 0, rt_ns);
}

static void broadcast_goes_single_copy_up_to_1_mib_between_far_cores(void **state) {
  (void)state;
  assert_true(broadcast_wanted(&comm2, 256 << 10, 150));
  assert_true(broadcast_wanted(&comm2, 1 << 20, 100));
  assert_true(broadcast_wanted(&comm2, 64 << 10, 380));
  assert_false(broadcast_wanted(&comm2, 256 << 10, 0));  /* not measured yet */
  assert_false(broadcast_wanted(&comm2, 256 << 10, 99)); /* one fast L3 */
  assert_false(broadcast_wanted(&comm2, (1 << 20) + 4, 380));
  assert_false(broadcast_wanted(&comm4_on_2, 256 << 10, 380));
  /* a 512 KiB chunk of an 8 MiB broadcast (the chain's): the call's size decides */
  assert_false(msg_wanted(&comm2, WEFT__COLL_BROADCAST, (8u << 20) / 4, 512 << 10, 0, 380));
}

/* A message of `bytes` in a call of as many bytes, staged or not, between far cores. */
static int small_wanted(const struct weft_comm *comm, weft__coll_t coll, size_t bytes, int staged) {
  return msg_wanted(comm, coll, bytes / 4, bytes, staged, 380);
}

/* Below 64 KiB: out-of-place all-gather and all-to-all with a core per rank go single copy;
 * a staged send (in-place all-to-all), more ranks than cores and broadcast do not. */
static void below_64_kib_only_unstaged_messages_with_a_core_per_rank(void **state) {
  (void)state;
  assert_true(small_wanted(&comm2, WEFT__COLL_ALL_GATHER, 8 << 10, 0));
  assert_true(small_wanted(&comm2, WEFT__COLL_ALL_TO_ALL, 32 << 10, 0));
  assert_false(small_wanted(&comm2, WEFT__COLL_ALL_TO_ALL, 32 << 10, 1));
  assert_true(small_wanted(&comm2, WEFT__COLL_ALL_TO_ALL, 64 << 10, 1));
  assert_false(small_wanted(&comm4_on_2, WEFT__COLL_ALL_GATHER, (64 << 10) - 4, 0));
  assert_true(small_wanted(&comm4_on_2, WEFT__COLL_ALL_GATHER, 64 << 10, 0));
  assert_false(small_wanted(&comm2, WEFT__COLL_BROADCAST, 32 << 10, 0));
  assert_true(small_wanted(&comm2, WEFT__COLL_BROADCAST, 64 << 10, 0));
}

/* The transport measured two copies faster (the AMD VM): all-gather and all-to-all stay on
 * two copies at every size, and broadcast too, whatever the round trip says, with more
 * ranks than cores as well. */
static void measured_two_copies_faster_keeps_every_call_on_two_copies(void **state) {
  (void)state;
  const unsigned two = WEFT__SINGLE_COPY_MEASURED;
  const weft__coll_t both_ways[] = {WEFT__COLL_ALL_GATHER, WEFT__COLL_ALL_TO_ALL};
  for (size_t i = 0; i < 2; i++) {
    assert_false(msg_wanted_measured(&comm2, both_ways[i], 8 << 10, 32 << 10, 0, 380, two));
    assert_false(msg_wanted_measured(&comm2, both_ways[i], 1 << 18, 1 << 20, 0, 380, two));
    assert_false(msg_wanted_measured(&comm2, both_ways[i], (uint64_t)1 << 26, 1 << 20, 0, 380, two));
  }
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_GATHER, 1 << 16, 1 << 20, 0, 0, two));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_ALL_TO_ALLV, 0, 1 << 20, 0, 380, two));
  /* with more ranks than cores too: all-to-all(v) included (it kept the rules once) */
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, (2u << 20) / 4 / 4, 512 << 10, 0, 0, two));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, (16u << 20) / 4 / 4, 4 << 20, 0, 0, two));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, 8 << 10, 32 << 10, 0, 0, two));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALLV, 0, 1 << 20, 0, 0, two));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_GATHER, (2u << 20) / 4 / 4, 512 << 10, 0, 0, two));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_ALL_TO_ALL, (2u << 20) / 4 / 2, 1 << 20, 0, 380, two));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (256 << 10) / 4, 256 << 10, 0, 380, two));
}

/* One copy faster where both sides send, not against the slower copy alone (the Intel VM's
 * probe: 256 KiB read in 14 us sent again, copied in and out in 14 + 14): a broadcast message
 * of 256 KiB to 1 MiB goes single copy, since one FIFO piece's two copies do not overlap;
 * smaller ones stay on two copies, as do calls over 1 MiB and more ranks than cores. */
static void a_broadcast_of_a_slot_or_more_follows_the_two_way_verdict(void **state) {
  (void)state;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (256 << 10) / 4, 256 << 10, 0, 380, two_way));
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (1 << 20) / 4, 1 << 20, 0, 60, two_way));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (128 << 10) / 4, 128 << 10, 0, 380, two_way));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4, 64 << 10, 0, 380, two_way));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (2 << 20) / 4, 512 << 10, 0, 380, two_way));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_BROADCAST, (256 << 10) / 4, 256 << 10, 0, 0, two_way));
  /* from 64 KiB with the second read well ahead of the slower copy (AGAIN_ONE_WAY); not below,
   * not over 1 MiB, not with more ranks than cores */
  const unsigned again = two_way | WEFT__SINGLE_COPY_AGAIN_ONE_WAY;
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4, 64 << 10, 0, 60, again));
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (128 << 10) / 4, 128 << 10, 0, 380, again));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (32 << 10) / 4, 32 << 10, 0, 380, again));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (2 << 20) / 4, 512 << 10, 0, 380, again));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_BROADCAST, (128 << 10) / 4, 128 << 10, 0, 0, again));
  /* the one-way verdict alone still covers 64 KiB on */
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4, 64 << 10, 0, 60,
                                  WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_ONE_WAY));
}

/* The transport measured one copy faster (the Intel VM's case): the rules' bounds stay, and
 * broadcast follows the measurement instead of the round trip. */
static void measured_one_copy_faster_keeps_the_rules_bounds(void **state) {
  (void)state;
  const unsigned both = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY,
                 all = both | WEFT__SINGLE_COPY_ONE_WAY;
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_ALL_GATHER, 1 << 18, 1 << 20, 0, 60, both));
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_ALL_TO_ALL, 8 << 10, 32 << 10, 0, 60, both));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_ALL_TO_ALL, 8 << 10, 32 << 10, 1, 60, both));
  assert_true(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, (2u << 20) / 4 / 4, 512 << 10, 0, 0, both));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_TO_ALL, 1 << 22, 1 << 20, 0, 0, both));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_ALL_REDUCE, 1 << 18, 1 << 20, 0, 380, all));
  assert_true(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (256 << 10) / 4, 256 << 10, 0, 60, all));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (2 << 20) / 4, 512 << 10, 0, 60, all));
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_BROADCAST, (32 << 10) / 4, 32 << 10, 0, 60, all));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_BROADCAST, (256 << 10) / 4, 256 << 10, 0, 0, all));
}

/* The small class measured too (the Zen 4 VM's case: one 256 KiB probe in three tipped to
 * one copy, and 16-64 KiB all-gather ran 2-3x slower on it): messages below 64 KiB follow
 * the small measurement, the others the large one, either way round. */
static void below_64_kib_the_small_measurement_decides(void **state) {
  (void)state;
  const unsigned large_one = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY | WEFT__SINGLE_COPY_SMALL_MEASURED;
  const unsigned small_one = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_SMALL_MEASURED |
                             WEFT__SINGLE_COPY_SMALL_TWO_WAY;
  const weft__coll_t both_ways[] = {WEFT__COLL_ALL_GATHER, WEFT__COLL_ALL_TO_ALL};
  for (size_t i = 0; i < 2; i++) {
    assert_false(msg_wanted_measured(&comm2, both_ways[i], 4 << 10, 8 << 10, 0, 60, large_one));
    assert_false(msg_wanted_measured(&comm2, both_ways[i], 16 << 10, (64 << 10) - 4, 0, 60, large_one));
    assert_true(msg_wanted_measured(&comm2, both_ways[i], 16 << 10, 64 << 10, 0, 60, large_one));
    assert_true(msg_wanted_measured(&comm2, both_ways[i], 4 << 10, 8 << 10, 0, 60, small_one));
    assert_false(msg_wanted_measured(&comm2, both_ways[i], 16 << 10, 64 << 10, 0, 60, small_one));
  }
  /* the rules' bounds below 64 KiB still hold: not staged, a core per rank */
  assert_false(msg_wanted_measured(&comm2, WEFT__COLL_ALL_TO_ALL, 8 << 10, 32 << 10, 1, 60, small_one));
  assert_false(msg_wanted_measured(&comm4_on_2, WEFT__COLL_ALL_GATHER, 8 << 10, 32 << 10, 0, 0, small_one));
}

/* Puts (weft__req_put_wanted): broadcast messages of calls from 64 KiB, gather and scatter
 * messages from 64 KiB, with a core per rank, where the probe measured one copy faster than
 * copy-in plus copy-out; nothing else. */
static int put_wanted_msg(const struct weft_comm *comm, weft__coll_t coll, uint64_t count, size_t msg_bytes,
                          unsigned verdict) {
  weft__fp_call call;
  weft__req r = send_in_call(&call, coll, count, msg_bytes);
  return weft__req_put_wanted(comm, &r, verdict);
}

static int put_wanted(const struct weft_comm *comm, weft__coll_t coll, uint64_t count, unsigned verdict) {
  return put_wanted_msg(comm, coll, count, 1 << 20, verdict);
}

static void broadcast_gather_and_scatter_from_64_kib_go_as_puts_where_one_copy_is_faster(void **state) {
  (void)state;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  assert_true(put_wanted(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4, two_way));
  assert_true(put_wanted(&comm2, WEFT__COLL_BROADCAST, (uint64_t)1 << 26, two_way));
  assert_true(put_wanted(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4, two_way | WEFT__SINGLE_COPY_ONE_WAY));
  assert_false(put_wanted(&comm2, WEFT__COLL_BROADCAST, (64 << 10) / 4 - 1, two_way));
  assert_false(put_wanted(&comm2, WEFT__COLL_BROADCAST, (uint64_t)1 << 26, WEFT__SINGLE_COPY_MEASURED));
  assert_false(put_wanted(&comm2, WEFT__COLL_BROADCAST, (uint64_t)1 << 26, 0));
  assert_false(put_wanted(&comm4_on_2, WEFT__COLL_BROADCAST, (uint64_t)1 << 26, two_way));
  /* gather and scatter: by the message, not the call */
  const weft__coll_t rooted[] = {WEFT__COLL_GATHER, WEFT__COLL_SCATTER};
  for (size_t i = 0; i < 2; i++) {
    assert_true(put_wanted_msg(&comm2, rooted[i], 1, 64 << 10, two_way));
    assert_false(put_wanted_msg(&comm2, rooted[i], (uint64_t)1 << 26, (64 << 10) - 4, two_way));
    assert_false(put_wanted_msg(&comm2, rooted[i], (uint64_t)1 << 26, 1 << 20, WEFT__SINGLE_COPY_MEASURED));
    assert_false(put_wanted_msg(&comm4_on_2, rooted[i], (uint64_t)1 << 26, 1 << 20, two_way));
  }
  const weft__coll_t others[] = {WEFT__COLL_ALL_GATHER, WEFT__COLL_ALL_TO_ALL, WEFT__COLL_ALL_REDUCE,
                                 WEFT__COLL_REDUCE, WEFT__COLL_SEND, WEFT__COLL_BARRIER};
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
    assert_false(put_wanted(&comm2, others[i], (uint64_t)1 << 26, two_way));
  weft__req r;
  weft__req_init_send(&r, NULL, NULL, 1 << 20);
  assert_false(weft__req_put_wanted(&comm2, &r, two_way)); /* outside a call */
}

/* An out-of-place scatter's root copies its own block while its sends move
 * (weft__req.busy_sender): where a put would be wanted with a core per rank, its messages
 * go single copy as plain reads (with more ranks than cores too), not as puts; where none
 * would be, they keep two copies. */
static void a_busy_sender_reads_where_it_would_put(void **state) {
  (void)state;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  weft__fp_call call;
  weft__req r = send_in_call(&call, WEFT__COLL_SCATTER, 1 << 18, 1 << 20);
  r.busy_sender = 1;
  assert_false(weft__req_put_wanted(&comm2, &r, two_way));
  assert_true(weft__req_single_copy_wanted(&comm2, &r, 60, two_way));
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 60, WEFT__SINGLE_COPY_MEASURED));
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 60, 0));
  assert_true(weft__req_single_copy_wanted(&comm4_on_2, &r, 60, two_way));
  assert_false(weft__req_put_wanted(&comm4_on_2, &r, two_way));
  r.bytes = (64 << 10) - 4;
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 60, two_way));
  r.busy_sender = 0;
  r.bytes = 1 << 20;
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 60, two_way)); /* it goes as a put instead */
  assert_true(weft__req_put_wanted(&comm2, &r, two_way));
}

/* A send of an exchange (a group that also receives, into other bytes: sendrecv, a
 * pipeline's 1F1B step) goes single copy as an all-to-all message does, with more ranks than
 * cores at any size from 64 KiB (a rank receives the one message); a lone send stays one-way
 * traffic on two copies. */
static int p2p_wanted(const struct weft_comm *comm, size_t bytes, int exchange, unsigned verdict) {
  weft__fp_call call;
  weft__req r = send_in_call(&call, WEFT__COLL_SEND, bytes, bytes);
  call.fp.type = (uint8_t)WEFT_UINT8; /* as p2p.c's pair fingerprints */
  r.p2p_exchange = (unsigned char)exchange;
  return weft__req_single_copy_wanted(comm, &r, 60, verdict);
}

static void sends_of_an_exchange_go_single_copy(void **state) {
  (void)state;
  const unsigned one = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  const unsigned small_one = one | WEFT__SINGLE_COPY_SMALL_MEASURED | WEFT__SINGLE_COPY_SMALL_TWO_WAY;
  assert_true(p2p_wanted(&comm2, 1 << 20, 1, 0));
  assert_true(p2p_wanted(&comm2, (size_t)256 << 20, 1, one));
  assert_true(p2p_wanted(&comm2, 8 << 10, 1, small_one));
  assert_false(p2p_wanted(&comm2, 8 << 10, 1, one | WEFT__SINGLE_COPY_SMALL_MEASURED));
  assert_false(p2p_wanted(&comm2, 1 << 20, 1, WEFT__SINGLE_COPY_MEASURED)); /* two copies measured faster */
  assert_true(p2p_wanted(&comm4_on_2, 64 << 10, 1, one));
  assert_true(p2p_wanted(&comm4_on_2, 32 << 20, 1, one)); /* no 16 MiB bound: one message */
  assert_false(p2p_wanted(&comm4_on_2, 32 << 10, 1, small_one));
  assert_false(p2p_wanted(&comm2, 1 << 20, 0, one));
  assert_false(p2p_wanted(&comm2, (size_t)256 << 20, 0, 0));
}

/* Which sends of a group are exchanges (algos/p2p/p2p.h): a send next to a receive from
 * another rank, unless a receive writes into its bytes; receives from self do not count. */
static void a_group_send_is_an_exchange_unless_it_overlaps_a_receive(void **state) {
  (void)state;
  static char a[4096], b[4096], c[4096];
  const int self = 1;
  weft__p2p_op ops[4] = {{.is_send = 1, .peer = 2, .buf = a, .bytes = 1024},
                         {.is_send = 0, .peer = 0, .buf = b, .bytes = 1024}};
  weft__p2p_span span = weft__p2p_recv_span(ops, 2, self);
  assert_true(weft__p2p_send_in_exchange(ops, 2, self, &ops[0], span));
  /* in place: the receive lands where the send reads */
  ops[1].buf = a + 512;
  span = weft__p2p_recv_span(ops, 2, self);
  assert_false(weft__p2p_send_in_exchange(ops, 2, self, &ops[0], span));
  /* inside the receives' span but in a gap between them: still an exchange */
  ops[1] = (weft__p2p_op){.is_send = 0, .peer = 0, .buf = c, .bytes = 16};
  ops[2] = (weft__p2p_op){.is_send = 0, .peer = 2, .buf = c + 3000, .bytes = 16};
  ops[0].buf = c + 1000;
  span = weft__p2p_recv_span(ops, 3, self);
  assert_true(weft__p2p_send_in_exchange(ops, 3, self, &ops[0], span));
  ops[0].bytes = 2001; /* now reaches the second receive's first byte */
  assert_false(weft__p2p_send_in_exchange(ops, 3, self, &ops[0], span));
  /* only sends, or receives from self and empty ones: no exchange */
  ops[0] = (weft__p2p_op){.is_send = 1, .peer = 2, .buf = a, .bytes = 1024};
  ops[1] = (weft__p2p_op){.is_send = 0, .peer = self, .buf = b, .bytes = 1024};
  ops[2] = (weft__p2p_op){.is_send = 0, .peer = 0, .buf = c, .bytes = 0};
  ops[3] = (weft__p2p_op){.is_send = 1, .peer = self, .buf = a, .bytes = 1024};
  span = weft__p2p_recv_span(ops, 4, self);
  assert_false(weft__p2p_send_in_exchange(ops, 4, self, &ops[0], span));
  assert_false(weft__p2p_send_in_exchange(ops, 1, self, &ops[0], weft__p2p_recv_span(ops, 1, self)));
}

static void a_request_outside_a_call_keeps_two_copies(void **state) {
  (void)state;
  weft__req r;
  weft__req_init_send(&r, NULL, NULL, 1 << 20);
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 500, 0)); /* call NULL */
  weft__fp_call none;
  memset(&none, 0, sizeof(none)); /* fp.coll 0: no call */
  r.call = &none;
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 500, 0));
  assert_false(weft__req_single_copy_wanted(&comm2, &r, 500, WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY |
                                                                 WEFT__SINGLE_COPY_ONE_WAY));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(all_gather_and_all_to_all_go_single_copy),
      cmocka_unit_test(all_gather_blocks_past_the_cache_keep_two_copies),
      cmocka_unit_test(reductions_and_one_way_calls_keep_two_copies),
      cmocka_unit_test(oversubscribed_ranks_go_single_copy_up_to_16_mib),
      cmocka_unit_test(broadcast_goes_single_copy_up_to_1_mib_between_far_cores),
      cmocka_unit_test(below_64_kib_only_unstaged_messages_with_a_core_per_rank),
      cmocka_unit_test(measured_two_copies_faster_keeps_every_call_on_two_copies),
      cmocka_unit_test(a_broadcast_of_a_slot_or_more_follows_the_two_way_verdict),
      cmocka_unit_test(measured_one_copy_faster_keeps_the_rules_bounds),
      cmocka_unit_test(below_64_kib_the_small_measurement_decides),
      cmocka_unit_test(broadcast_gather_and_scatter_from_64_kib_go_as_puts_where_one_copy_is_faster),
      cmocka_unit_test(a_busy_sender_reads_where_it_would_put),
      cmocka_unit_test(sends_of_an_exchange_go_single_copy),
      cmocka_unit_test(a_group_send_is_an_exchange_unless_it_overlaps_a_receive),
      cmocka_unit_test(a_request_outside_a_call_keeps_two_copies),
  };
  return cmocka_run_group_tests_name("test_single_copy", tests, NULL, NULL);
}
