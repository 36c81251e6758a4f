/* test_proto.c: the shm transport's LL protocol, WEFT_PROTO, and futex waiting.
 *
 * Checks: WEFT_PROTO parsing in NCCL_PROTO's grammar (lists, ^exclusion, case, LL128 as a
 * name of LL) and clear errors for unknown names and lists that leave nothing, also at init;
 * point-to-point messages and all-reduces exact, element by element, at sizes around LL's
 * line (56 B), chunk (1792 B) and default threshold (512 B), under the default choice, LL only,
 * Simple only, and a tiny threshold (LL and bulk messages interleaved on one connection); a
 * message that one side sends LL and the other expects bulk fails as a size mismatch naming
 * both sizes, not as a timeout; a rank asleep on its futex is woken by the sender's ring
 * (sleeps are made 10 s long, so only a ring can wake it in time), also when sends race the
 * moment it falls asleep, with membarrier(2) or fences on the send path; a receive that nothing
 * answers still times out at the communicator's deadline; 8 ranks on 2 cores run 300
 * small all-reduces in seconds (no livelock); and a broadcast root that runs every LL
 * buffer or FIFO slot ahead of a late receiver, prefetching its next message's lines for
 * writing (WEFT_SHM_PREFETCH) or not, delivers every byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lib/proto.h"
#include "tests/harness.h"

/* ---- WEFT_PROTO parsing (in process) -------------------------------------------------- */

static void expect_mask(const char *spec, unsigned want) {
  char err[256] = "";
  unsigned mask = 0;
  int rc = weft__proto_parse(spec, &mask, err, sizeof err);
  if (rc != 0 || mask != want)
    fail_msg("WEFT_PROTO=\"%s\": rc %d mask %u, expected mask %u (%s)", spec ? spec : "(null)",
             rc, mask, want, err);
}

static void expect_error(const char *spec, const char *needle) {
  char err[256] = "";
  unsigned mask = 0;
  if (weft__proto_parse(spec, &mask, err, sizeof err) == 0)
    fail_msg("WEFT_PROTO=\"%s\" was accepted (mask %u)", spec, mask);
  if (strstr(err, needle) == NULL) fail_msg("WEFT_PROTO=\"%s\": error \"%s\" lacks \"%s\"", spec, err, needle);
}

static void weft_proto_follows_nccl_grammar(void **state) {
  (void)state;
  expect_mask(NULL, WEFT__PROTO_ALL);
  expect_mask("", WEFT__PROTO_ALL);
  expect_mask("LL", WEFT__PROTO_LL);
  expect_mask("ll128", WEFT__PROTO_LL);
  expect_mask("Simple", WEFT__PROTO_SIMPLE);
  expect_mask("SIMPLE,ll", WEFT__PROTO_ALL);
  expect_mask(" LL , Simple ", WEFT__PROTO_ALL);
  expect_mask("^LL", WEFT__PROTO_SIMPLE);
  expect_mask("^simple", WEFT__PROTO_LL);
  expect_error("bogus", "\"bogus\"");
  expect_error("LL,fast", "\"fast\"");
  expect_error("LL,", "unknown protocol");
  expect_error("^LL,Simple", "leaves no protocol");
}

/* ---- exactness around the LL boundaries (2 rank processes over shm) ------------------- */

static const size_t sizes[] = {0,    1,    8,    55,   56,   57,    112,   127,  128, 129,  511,
                               512,  513,  1000, 1784, 1792, 1800, 3584, 7168, 7176, 16392, 50000};

static long p2p_value(size_t j, size_t bytes) { return (long)((j * 7 + bytes) % 251); }

/* Rank 0 sends each size to rank 1 and back; both check every byte and the guards. */
static int p2p_sizes_body(harness_rank *r) {
  int peer = 1 - r->rank;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    uint8_t *snd = harness_guarded_alloc(n, 0), *rcv = harness_guarded_alloc(n, 0xEE);
    for (size_t j = 0; j < n; j++) snd[j] = (uint8_t)p2p_value(j, n);
    weft_status_t st = weft_group_start();
    if (st == WEFT_SUCCESS) st = weft_send(snd, n, WEFT_UINT8, peer, r->comm, NULL);
    if (st == WEFT_SUCCESS) st = weft_recv(rcv, n, WEFT_UINT8, peer, r->comm, NULL);
    weft_status_t st2 = weft_group_end();
    char what[64];
    snprintf(what, sizeof what, "send/recv of %zu bytes", n);
    if (!harness_expect_status(r, st == WEFT_SUCCESS ? st2 : st, WEFT_SUCCESS, what)) return r->failures;
    for (size_t j = 0; j < n; j++)
      if (rcv[j] != (uint8_t)p2p_value(j, n)) {
        harness_fail(r, "%s: byte %zu is %u, expected %u", what, j, rcv[j], (unsigned)p2p_value(j, n));
        break;
      }
    harness_guarded_check(r, rcv, n, what);
    harness_guarded_free(snd);
    harness_guarded_free(rcv);
  }
  return r->failures;
}

/* All-reduce (sum) of every size in a 1-, 2- and 8-byte type, checked element by element. */
static int all_reduce_sizes_body(harness_rank *r) {
  static const weft_datatype_t dts[] = {WEFT_INT8, WEFT_BFLOAT16, WEFT_FLOAT64};
  for (size_t d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      weft_datatype_t dt = dts[d];
      size_t es = harness_esize(dt), count = sizes[i] / es;
      uint8_t *snd = harness_guarded_alloc(count * es, 0), *rcv = harness_guarded_alloc(count * es, 0xEE);
      for (size_t j = 0; j < count; j++) harness_store(snd, j, dt, harness_red_value(WEFT_SUM, dt, r->rank, j));
      char what[96];
      snprintf(what, sizeof what, "all_reduce %s sum count %zu", harness_dt_name(dt), count);
      weft_status_t st = weft_all_reduce(snd, rcv, count, dt, WEFT_SUM, r->comm, NULL);
      if (!harness_expect_status(r, st, WEFT_SUCCESS, what)) return r->failures;
      for (size_t j = 0; j < count; j++) {
        long want = 0;
        for (int k = 0; k < r->nranks; k++) want += harness_red_value(WEFT_SUM, dt, k, j);
        if (harness_load(rcv, j, dt) != (double)want) {
          harness_fail(r, "%s: element %zu is %g, expected %ld", what, j, harness_load(rcv, j, dt), want);
          break;
        }
      }
      harness_guarded_check(r, rcv, count * es, what);
      harness_guarded_free(snd);
      harness_guarded_free(rcv);
    }
  return r->failures;
}

/* The root broadcasts 400 messages of sizes that cycle through one line, several lines and
 * a whole LL chunk and more, while the receiver starts 50 ms late: the root runs ahead until
 * every LL buffer (64) or FIFO slot (8) waits for credit, so its prefetch of the next
 * message's lines (weft__shm_prefetch_write) meets buffers the receiver has not read yet and
 * must leave them alone. Every byte of every message is checked. */
static int broadcast_run_ahead_body(harness_rank *r) {
  static const size_t bytes[] = {8, 56, 57, 200, 1792, 1800, 0, 3000};
  enum { CALLS = 400, MAX = 3000 };
  uint8_t buf[MAX];
  if (r->rank != 0) harness_sleep_ms(50);
  for (int i = 0; i < CALLS; i++) {
    size_t n = bytes[i % (sizeof bytes / sizeof *bytes)];
    for (size_t j = 0; j < n; j++) buf[j] = r->rank == 0 ? (uint8_t)(i * 31 + j) : 0xEE;
    char what[64];
    snprintf(what, sizeof what, "broadcast %d of %zu bytes", i, n);
    if (!harness_expect_status(r, weft_broadcast(buf, buf, n, WEFT_UINT8, 0, r->comm, NULL), WEFT_SUCCESS, what))
      return r->failures;
    for (size_t j = 0; j < n; j++)
      if (buf[j] != (uint8_t)(i * 31 + j))
        return harness_fail(r, "%s: byte %zu is %u, expected %u", what, j, buf[j], (uint8_t)(i * 31 + j));
  }
  return r->failures;
}

typedef struct {
  const char *proto;     /* WEFT_PROTO for the ranks, NULL: unset */
  const char *threshold; /* WEFT_LL_THRESHOLD, NULL: unset */
  harness_body_fn body;
  int nranks;
  const char *prefetch;  /* WEFT_SHM_PREFETCH, NULL: unset */
} env_params;

static void run_with_env(void **state) {
  const env_params *p = *state;
  if (p->proto) setenv("WEFT_PROTO", p->proto, 1);
  else unsetenv("WEFT_PROTO");
  if (p->threshold) setenv("WEFT_LL_THRESHOLD", p->threshold, 1);
  else unsetenv("WEFT_LL_THRESHOLD");
  if (p->prefetch) setenv("WEFT_SHM_PREFETCH", p->prefetch, 1);
  else unsetenv("WEFT_SHM_PREFETCH");
  harness_run_simple(p->nranks, "shm", p->body, NULL);
  unsetenv("WEFT_PROTO");
  unsetenv("WEFT_LL_THRESHOLD");
  unsetenv("WEFT_SHM_PREFETCH");
}

/* ---- a bad WEFT_PROTO fails init with a clear message --------------------------------- */

static int bad_proto_body(harness_rank *r) {
  weft_comm_t comm = NULL;
  weft_status_t st = weft_comm_init_rank_config(&comm, r->nranks, r->id, r->rank, &r->config);
  const char *msg = weft_get_last_error(comm);
  if (st == WEFT_SUCCESS) harness_fail(r, "init with WEFT_PROTO=fast succeeded");
  else if (strstr(msg, "WEFT_PROTO") == NULL || strstr(msg, "fast") == NULL)
    harness_fail(r, "init error does not name WEFT_PROTO and the bad value: \"%s\"", msg);
  if (comm) weft_comm_abort(comm);
  return r->failures;
}

static void bad_weft_proto_fails_init_naming_the_value(void **state) {
  (void)state;
  setenv("WEFT_PROTO", "fast", 1);
  harness_opts o = {.nranks = 2, .transport = "shm", .no_init = 1, .timeout_ms = 5000};
  harness_run(&o, bad_proto_body, NULL);
  unsetenv("WEFT_PROTO");
}

/* ---- LL on one side, bulk on the other: a size mismatch, not a timeout ----------------- */

static int ll_vs_bulk_body(harness_rank *r) {
  static uint8_t buf[64 * 1024];
  if (r->rank == 0) {
    weft_send(buf, 8, WEFT_UINT8, 1, r->comm, NULL); /* LL */
    if (!harness_wait_flag(r, 0, 1, 30000)) harness_fail(r, "rank 1 never finished its check");
  } else {
    double t0 = harness_now_ms();
    weft_status_t st = weft_recv(buf, sizeof buf, WEFT_UINT8, 0, r->comm, NULL); /* bulk */
    const char *msg = weft_get_last_error(r->comm);
    if (st == WEFT_SUCCESS) harness_fail(r, "a 64 KiB recv matched an 8-byte send");
    else if (st == WEFT_ERR_TIMEOUT || !strstr(msg, "mismatch") || !strstr(msg, "65536") ||
             !strstr(msg, "8 bytes"))
      harness_fail(r, "expected a size mismatch naming 8 and 65536 bytes, got %s: \"%s\"",
                   harness_status_name(st), msg);
    else
      harness_note(r, "mismatch seen in %.1f ms: \"%s\"", harness_now_ms() - t0, msg);
    atomic_store(&r->shared->flags[0], 1);
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void ll_send_against_bulk_recv_fails_as_size_mismatch(void **state) {
  (void)state;
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 10000};
  harness_run(&o, ll_vs_bulk_body, NULL);
}

/* ---- futex: a sleeping receiver is woken by the ring ---------------------------------- */

/* Rank 1 posts a receive and falls asleep on its futex (sleeps may last 10 s); rank 0
 * waits 100 ms, notes the time and sends. Rank 1 must have the message within 500 ms of
 * that (a ring wakes it in tens of microseconds; without one it would sleep 10 s). */
static int futex_wake_body(harness_rank *r) {
  uint64_t v = 0;
  for (int round = 0; round < 3; round++) {
    if (r->rank == 0) {
      struct timespec ts = {0, 100000000};
      nanosleep(&ts, NULL);
      atomic_store(&r->shared->values[round], (long long)(harness_now_ms() * 1000));
      v = 42 + (uint64_t)round;
      if (!harness_expect_status(r, weft_send(&v, 1, WEFT_UINT64, 1, r->comm, NULL), WEFT_SUCCESS, "send"))
        return r->failures;
    } else {
      if (!harness_expect_status(r, weft_recv(&v, 1, WEFT_UINT64, 0, r->comm, NULL), WEFT_SUCCESS, "recv"))
        return r->failures;
      double late_ms = harness_now_ms() - (double)atomic_load(&r->shared->values[round]) / 1000;
      if (v != 42 + (uint64_t)round) harness_fail(r, "round %d: got %llu", round, (unsigned long long)v);
      if (late_ms > 500) harness_fail(r, "round %d: woken %.1f ms after the send: no ring?", round, late_ms);
      else harness_note(r, "round %d: woken %.3f ms after the send", round, late_ms);
    }
  }
  return r->failures;
}

static void sleeping_receiver_is_woken_by_the_senders_ring(void **state) {
  (void)state;
  setenv("WEFT_SHM_SLEEP_MAX_US", "10000000", 1);
  harness_run_simple(2, "shm", futex_wake_body, NULL);
  unsetenv("WEFT_SHM_SLEEP_MAX_US");
}

/* ---- futex: no ring is lost when it races the sleep -------------------------------------- */

/* A ping-pong of 8-byte messages where each send follows a spin of 150-250 us, around the
 * 0.2 ms of idling after which a waiting rank goes to sleep (lib/task.c): over the rounds the
 * sender's publish-then-look and the receiver's announce-then-look meet in every order. Sleeps
 * are made 10 s long and the deadline is 4 s, so a ring lost to a missing fence (on either
 * side: the sender's, or membarrier's in its place, shm_doorbell.h) fails the call. */
enum { RING_RACE_ROUNDS = 3000 };

static void spin_us(double us) {
  double end = harness_now_ms() + us / 1000;
  while (harness_now_ms() < end) {
  }
}

static int ring_race_body(harness_rank *r) {
  unsigned seed = 7919u * (unsigned)(r->rank + 1);
  int late = 0;
  for (int i = 0; i < RING_RACE_ROUNDS; i++) {
    uint64_t v = (uint64_t)i;
    if (r->rank == i % 2) {
      spin_us(180 + rand_r(&seed) % 51);
      if (!harness_expect_status(r, weft_send(&v, 1, WEFT_UINT64, 1 - r->rank, r->comm, NULL), WEFT_SUCCESS,
                                 "send"))
        return r->failures;
      continue;
    }
    double t0 = harness_now_ms();
    v = ~0ull;
    if (!harness_expect_status(r, weft_recv(&v, 1, WEFT_UINT64, 1 - r->rank, r->comm, NULL), WEFT_SUCCESS,
                               "recv")) {
      harness_fail(r, "round %d: the receive failed (a lost ring leaves the receiver asleep)", i);
      return r->failures;
    }
    if (v != (uint64_t)i) harness_fail(r, "round %d: got %llu", i, (unsigned long long)v);
    if (harness_now_ms() - t0 > 1000) late++;
  }
  if (late) harness_fail(r, "%d receives took over 1 s (a lost ring, woken by chance)", late);
  return r->failures;
}

static void no_ring_is_lost_when_it_races_the_sleep(void **state) {
  (void)state;
  setenv("WEFT_SHM_SLEEP_MAX_US", "10000000", 1);
  const char *modes[] = {"1", "0"}; /* membarrier in place of the sender's fence; fences */
  for (int m = 0; m < 2; m++) {
    setenv("WEFT_SHM_MEMBARRIER", modes[m], 1);
    harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 4000};
    harness_run(&o, ring_race_body, NULL);
  }
  unsetenv("WEFT_SHM_MEMBARRIER");
  unsetenv("WEFT_SHM_SLEEP_MAX_US");
}

/* ---- deadlines still fire while asleep ------------------------------------------------ */

static int deadline_body(harness_rank *r) {
  if (r->rank == 0) {
    if (!harness_wait_flag(r, 0, 1, 30000)) harness_fail(r, "rank 1 never timed out");
  } else {
    uint64_t v;
    double t0 = harness_now_ms();
    weft_status_t st = weft_recv(&v, 1, WEFT_UINT64, 0, r->comm, NULL);
    double ms = harness_now_ms() - t0;
    if (st != WEFT_ERR_TIMEOUT) harness_fail(r, "recv nobody answers returned %s", harness_status_name(st));
    if (ms < 250 || ms > 5000) harness_fail(r, "timeout of 300 ms fired after %.0f ms", ms);
    atomic_store(&r->shared->flags[0], 1);
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void unanswered_recv_times_out_at_the_deadline_while_sleeping(void **state) {
  (void)state;
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 300};
  harness_run(&o, deadline_body, NULL);
}

/* ---- 8 ranks on 2 cores: no livelock -------------------------------------------------- */

static int many_small_body(harness_rank *r) {
  double t0 = harness_now_ms();
  for (int i = 0; i < 300; i++) {
    double x = r->rank + i, y = 0;
    if (!harness_expect_status(r, weft_all_reduce(&x, &y, 1, WEFT_FLOAT64, WEFT_SUM, r->comm, NULL),
                               WEFT_SUCCESS, "all_reduce"))
      return r->failures;
    double want = (double)r->nranks * i + r->nranks * (r->nranks - 1) / 2.0;
    if (y != want) return harness_fail(r, "call %d: %g, expected %g", i, y, want);
  }
  double ms = harness_now_ms() - t0;
  if (ms > 20000) harness_fail(r, "300 all-reduces of 8 bytes took %.0f ms", ms);
  else if (r->rank == 0) harness_note(r, "300 all-reduces of 8 bytes on %d ranks: %.1f ms", r->nranks, ms);
  return r->failures;
}

#define ENV_TEST(name, proto, thr, body, n) \
  {name, run_with_env, NULL, NULL, &(env_params){proto, thr, body, n, NULL}}
#define PREFETCH_TEST(name, proto, prefetch, body) \
  {name, run_with_env, NULL, NULL, &(env_params){proto, NULL, body, 2, prefetch}}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(weft_proto_follows_nccl_grammar),
      ENV_TEST("p2p_exact_around_ll_line_chunk_and_threshold_default", NULL, NULL, p2p_sizes_body, 2),
      ENV_TEST("p2p_exact_around_ll_boundaries_ll_only", "LL", NULL, p2p_sizes_body, 2),
      ENV_TEST("p2p_exact_around_ll_boundaries_simple_only", "^LL", NULL, p2p_sizes_body, 2),
      ENV_TEST("p2p_exact_with_ll_and_bulk_interleaved_threshold_100", NULL, "100", p2p_sizes_body, 2),
      ENV_TEST("all_reduce_exact_around_ll_boundaries_default_on_2_ranks", NULL, NULL, all_reduce_sizes_body, 2),
      ENV_TEST("all_reduce_exact_around_ll_boundaries_ll_only_on_3_ranks", "LL", NULL, all_reduce_sizes_body, 3),
      ENV_TEST("all_reduce_exact_threshold_1000_on_4_ranks", NULL, "1000", all_reduce_sizes_body, 4),
      PREFETCH_TEST("p2p_exact_around_ll_boundaries_ll_only_without_prefetch", "LL", "0", p2p_sizes_body),
      PREFETCH_TEST("broadcast_running_ahead_of_a_late_receiver_exact", "LL", NULL, broadcast_run_ahead_body),
      PREFETCH_TEST("broadcast_running_ahead_exact_prefetching_one_line", "LL", "1", broadcast_run_ahead_body),
      PREFETCH_TEST("broadcast_running_ahead_through_the_fifo_exact", "^LL", NULL, broadcast_run_ahead_body),
      PREFETCH_TEST("broadcast_running_ahead_through_the_fifo_exact_without_prefetch", "^LL", "0",
                    broadcast_run_ahead_body),
      cmocka_unit_test(bad_weft_proto_fails_init_naming_the_value),
      cmocka_unit_test(ll_send_against_bulk_recv_fails_as_size_mismatch),
      cmocka_unit_test(sleeping_receiver_is_woken_by_the_senders_ring),
      cmocka_unit_test(no_ring_is_lost_when_it_races_the_sleep),
      cmocka_unit_test(unanswered_recv_times_out_at_the_deadline_while_sleeping),
      ENV_TEST("small_all_reduces_on_8_ranks_do_not_livelock", NULL, NULL, many_small_body, 8),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
