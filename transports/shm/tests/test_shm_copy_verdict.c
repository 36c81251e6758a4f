/* test_shm_copy_verdict.c: the copy probe's verdict from its times
 * (transports/shm/shm_copy_probe.h, weft__shm_copy_verdict, weft__shm_two_state_verdict,
 * weft__shm_pair_verdict): one copy only when the read
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

/* The pair's two verdicts (weft__shm_pair_verdict): one copy only where both directions
 * measured it; an unmeasured side leaves ours as it is. The Zen 4 VM's case first: 256 KiB
 * copied in slowly at the probe (23.5 us, against 5.6 out and a 21.6 us read) on one side,
 * 11.1 + 5.7 against 21.7 on the other. */
static void one_copy_needs_both_directions(void **unused) {
  (void)unused;
  const unsigned sm = WEFT__SINGLE_COPY_SMALL_MEASURED;
  unsigned slow_in = weft__shm_copy_verdict(23505, 5648, 21592) | sm;
  unsigned normal = weft__shm_copy_verdict(11117, 5658, 21703) | sm;
  assert_int_not_equal(slow_in & WEFT__SINGLE_COPY_TWO_WAY, 0);
  assert_int_equal(normal & WEFT__SINGLE_COPY_TWO_WAY, 0);
  assert_int_equal(weft__shm_pair_verdict(slow_in, normal), WEFT__SINGLE_COPY_MEASURED | sm);
  assert_int_equal(weft__shm_pair_verdict(normal, slow_in), normal);
  const unsigned all = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY | WEFT__SINGLE_COPY_ONE_WAY | sm |
                       WEFT__SINGLE_COPY_SMALL_TWO_WAY;
  assert_int_equal(weft__shm_pair_verdict(all, all), all); /* agreement: one copy stays */
  assert_int_equal(weft__shm_pair_verdict(all, all & ~WEFT__SINGLE_COPY_SMALL_TWO_WAY),
                   all & ~WEFT__SINGLE_COPY_SMALL_TWO_WAY); /* each bit on its own */
  assert_int_equal(weft__shm_pair_verdict(all, 0), all); /* the peer's side not measured */
  assert_int_equal(weft__shm_pair_verdict(0, normal), 0); /* ours not measured: the rules */
}

/* One size's verdict from both states (weft__shm_two_state_verdict): for calls where both
 * sides send, the read of a message sent again decides, unless a fresh message's read loses
 * to the two copies by more than WEFT__SHM_COPY_PROBE_FRESH_LOSS_PCT. */
static void a_message_sent_again_decides_where_a_fresh_one_loses_little(void **unused) {
  (void)unused;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  /* the Intel VM's probe (rank 0 -> 1, 256 KiB): fresh alone said two copies, and one copy ran
   * all-gather and all-to-all 1.3-2.2x faster */
  assert_int_equal(weft__shm_copy_verdict(13283, 17673, 34465), WEFT__SINGLE_COPY_MEASURED);
  assert_int_equal(weft__shm_two_state_verdict(13283, 17673, 34465, 14381), two_way);
  /* the Zen 4 VM's: a fresh read 1.29x the two copies keeps two copies however fast the second */
  assert_int_equal(weft__shm_two_state_verdict(11117, 5658, 21703, 5000), WEFT__SINGLE_COPY_MEASURED);
  /* the loss's edge: fresh exactly 1.25x the two copies is allowed, a nanosecond more is not */
  assert_int_equal(weft__shm_two_state_verdict(10000, 10000, 25000, 10000), two_way);
  assert_int_equal(weft__shm_two_state_verdict(10000, 10000, 25001, 10000), WEFT__SINGLE_COPY_MEASURED);
  /* one-way (broadcast) from the fresh read alone, as weft__shm_copy_verdict has it (the
   * second read within 30% of the slower copy: no AGAIN_ONE_WAY) */
  unsigned all = two_way | WEFT__SINGLE_COPY_ONE_WAY;
  assert_int_equal(weft__shm_two_state_verdict(10000, 16000, 13000, 12400), all);
  assert_int_equal(weft__shm_two_state_verdict(10000, 16000, 13400, 12400), two_way);
  assert_int_equal(weft__shm_two_state_verdict(10000, 16000, 13000, 30000),
                   WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_ONE_WAY);
  /* a slow second read keeps two copies, a fast fresh one or not */
  assert_int_equal(weft__shm_two_state_verdict(10000, 10000, 9000, 19000), WEFT__SINGLE_COPY_MEASURED);
}

/* With more ranks than cores (weft__shm_cpu_verdict): the verdict measured between two CPUs
 * serves the rank's connections, the successor's where it sits on another CPU, else the
 * predecessor's; a pair on one CPU, an unbound rank or an unmeasured verdict gives none.
 * The Intel VM's case: 4 ranks on 2 CPUs, rank 0 (CPU 0) measured two copies toward rank 2
 * on its own CPU (256 KiB in 4.6 + 4.6 us against a read of 8.1) and holds rank 3's (CPU 1)
 * one-copy verdict for the sends to it (12.6 + 13.3 against 8.8). */
/* The second read against the slower copy by 30% (WEFT__SINGLE_COPY_AGAIN_ONE_WAY, with
 * two-way only): the Intel VM of 2026-12-03 (family 6 model 167; 256 KiB in 11.7 us, out
 * 14.1, read 20.6 fresh and 9.4 sent again) has it; that of family 6 model 207 (in 11-15,
 * out 14-16, read 25-27 fresh and 13-16 sent again), whose 64-128 KiB broadcasts lost on one
 * copy, does not, even at its fastest read. */
static void a_message_sent_again_read_well_ahead_of_the_slower_copy(void **unused) {
  (void)unused;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  assert_int_equal(weft__shm_two_state_verdict(11739, 14067, 20590, 9387), two_way | WEFT__SINGLE_COPY_AGAIN_ONE_WAY);
  assert_int_equal(weft__shm_two_state_verdict(13283, 16000, 26000, 13000), two_way);
  assert_int_equal(weft__shm_two_state_verdict(15000, 14000, 26000, 13000), two_way);
  /* the margin's edge: 30% is not enough, a little more is */
  assert_int_equal(weft__shm_two_state_verdict(10000, 13000, 20000, 10000), two_way);
  assert_int_equal(weft__shm_two_state_verdict(10000, 13000, 20000, 9999), two_way | WEFT__SINGLE_COPY_AGAIN_ONE_WAY);
  /* not without two-way: a fresh read that loses too much (the Zen 4 VM's) */
  assert_int_equal(weft__shm_two_state_verdict(11117, 5658, 21703, 3000), WEFT__SINGLE_COPY_MEASURED);
  /* one copy in a pair needs it from both directions */
  const unsigned all = two_way | WEFT__SINGLE_COPY_AGAIN_ONE_WAY;
  assert_int_equal(weft__shm_pair_verdict(all, two_way), two_way);
  assert_int_equal(weft__shm_pair_verdict(all, all), all);
}

static void more_ranks_than_cores_take_the_verdict_between_cpus(void **unused) {
  (void)unused;
  const unsigned sm = WEFT__SINGLE_COPY_SMALL_MEASURED;
  unsigned same_cpu = weft__shm_two_state_verdict(4588, 4569, 8610, 8137) | sm;
  unsigned across = weft__shm_two_state_verdict(12647, 13286, 20237, 8819) | sm;
  assert_int_equal(same_cpu & WEFT__SINGLE_COPY_TWO_WAY, 0);
  assert_int_not_equal(across & WEFT__SINGLE_COPY_TWO_WAY, 0);
  /* rank 0: successor on its own CPU, predecessor on the other: the predecessor's */
  assert_int_equal(weft__shm_cpu_verdict(0, 0, same_cpu, 1, across), across);
  /* rank 2 (CPU 0): successor rank 1 on CPU 1, measured by rank 2 itself */
  assert_int_equal(weft__shm_cpu_verdict(0, 1, across, 0, same_cpu), across);
  /* both neighbours on other CPUs: the successor's, measured here */
  assert_int_equal(weft__shm_cpu_verdict(0, 1, across, 1, same_cpu), across);
  /* a successor on another CPU not measured: the predecessor's */
  assert_int_equal(weft__shm_cpu_verdict(0, 1, 0, 1, across), across);
  /* none between two CPUs: both neighbours on this CPU, or this rank or they unbound, or nothing measured */
  assert_int_equal(weft__shm_cpu_verdict(0, 0, same_cpu, 0, same_cpu), 0);
  assert_int_equal(weft__shm_cpu_verdict(-1, 1, across, 1, across), 0);
  assert_int_equal(weft__shm_cpu_verdict(0, -1, across, -1, across), 0);
  assert_int_equal(weft__shm_cpu_verdict(0, 1, 0, 1, 0), 0);
}

/* One size's rounds to a verdict (weft__shm_rounds_verdict): the small size takes each
 * state's medians, the large one the fastest rounds. The Intel VM's launch (16 KiB, ns,
 * copy-in / copy-out / read per round) whose fastest rounds took two copies below 64 KiB,
 * where the medians of the rounds counted now take one. */
static weft__shm_probe_rounds rounds(int n, const uint32_t (*t)[3]) {
  weft__shm_probe_rounds r = {.n = n};
  for (int i = 0; i < n; i++) {
    r.in[i] = t[i][0];
    r.out[i] = t[i][1];
    r.read[i] = t[i][2];
  }
  return r;
}

static void the_small_size_takes_medians(void **unused) {
  (void)unused;
  const unsigned two_way = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  /* the launch's rounds: a cold first one, fresh ones, then sent again */
  const uint32_t first[3] = {1063, 10453, 6296};
  const uint32_t fresh[5][3] = {{556, 1637, 3730}, {1322, 1634, 2716}, {1253, 1637, 2768}, {1426, 1639, 2629},
                                {1428, 1637, 2752}};
  const uint32_t again[5][3] = {{1570, 1585, 1059}, {818, 1645, 1104}, {868, 1659, 972}, {1025, 1649, 1144},
                                {845, 1645, 960}};
  /* as the probe had it: three rounds of each state, the cold one among them, the fastest
   * kept: 556 in + 1585 out against a 2716 read, 1.27x: two copies */
  const uint32_t old_fresh[3][3] = {{first[0], first[1], first[2]}, {556, 1637, 3730}, {1322, 1634, 2716}};
  weft__shm_probe_rounds of = rounds(3, old_fresh), oa = rounds(3, again);
  assert_int_equal(weft__shm_rounds_verdict(&of, &oa, 0), WEFT__SINGLE_COPY_MEASURED);
  /* medians of five after the uncounted one: 868 in + 1637 out against 2752, 1.10x: one copy */
  weft__shm_probe_rounds f = rounds(5, fresh), a = rounds(5, again);
  const unsigned small_bits = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY; /* what the small size keeps */
  assert_int_equal(weft__shm_rounds_verdict(&f, &a, 1) & small_bits, two_way);
  /* a slow read in two rounds of five moves no median; in three it does */
  weft__shm_probe_rounds slow = f;
  slow.read[0] = slow.read[1] = 9000;
  assert_int_equal(weft__shm_rounds_verdict(&slow, &a, 1) & small_bits, two_way);
  slow.read[2] = 9000;
  assert_int_equal(weft__shm_rounds_verdict(&slow, &a, 1) & small_bits, WEFT__SINGLE_COPY_MEASURED);
  /* the large size keeps the fastest: a cold first round among three changes nothing (the
   * Intel VM's 256 KiB rounds, ns to the nearest 100) */
  const uint32_t large_fresh[3][3] = {{20300, 122700, 21900}, {10900, 13100, 24500}, {11100, 13200, 19700}};
  const uint32_t large_again[3][3] = {{14200, 13200, 8300}, {11200, 13200, 8900}, {11300, 13200, 8200}};
  weft__shm_probe_rounds lf = rounds(3, large_fresh), la = rounds(3, large_again);
  assert_int_equal(weft__shm_rounds_verdict(&lf, &la, 0), two_way | WEFT__SINGLE_COPY_AGAIN_ONE_WAY);
  /* a state without rounds: two copies */
  weft__shm_probe_rounds none = {.n = 0};
  assert_int_equal(weft__shm_rounds_verdict(&f, &none, 1), WEFT__SINGLE_COPY_MEASURED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_read_just_under_the_two_copies_keeps_two_copies),
      cmocka_unit_test(a_clear_win_chooses_one_copy),
      cmocka_unit_test(a_slow_read_keeps_two_copies),
      cmocka_unit_test(one_copy_needs_both_directions),
      cmocka_unit_test(a_message_sent_again_decides_where_a_fresh_one_loses_little),
      cmocka_unit_test(more_ranks_than_cores_take_the_verdict_between_cpus),
      cmocka_unit_test(the_small_size_takes_medians),
      cmocka_unit_test(a_message_sent_again_read_well_ahead_of_the_slower_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
