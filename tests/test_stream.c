/* test_stream.c: streams, groups and non-blocking init, on real rank processes.
 *
 * Checks: twenty all_reduces enqueued on a stream all complete, correctly, at
 * weft_stream_synchronize; a call on a stream returns at once even when its peer has not
 * called yet, weft_stream_query says WEFT_IN_PROGRESS meanwhile and the caller can compute;
 * a large all_reduce on a stream overlaps with the caller's own work; past 1024 queued
 * calls the next one waits for room (and every queued call still completes correctly); a group of
 * collectives runs at weft_group_end (NULL stream) or at synchronize (on a stream); a
 * non-blocking init returns WEFT_IN_PROGRESS at once, reports WEFT_SUCCESS through
 * weft_comm_get_async_error once all ranks joined, and a collective called before that
 * waits for it.
 *
 * Values: element i of rank r's buffer b is (r + 2 i + b) mod 7, so sums on <= 3 ranks are
 * exact in every datatype used here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tests/harness.h"

static long value(int rank, size_t i, int b) {
  return (long)(((size_t)rank + 2 * i + (size_t)b) % 7);
}

static void *make_buf(size_t count, weft_datatype_t dt, int rank, int b) {
  uint8_t *p = malloc(count * harness_esize(dt) + 1);
  if (!p) abort();
  for (size_t i = 0; i < count; i++) harness_store(p, i, dt, value(rank, i, b));
  return p;
}

/* Checks that buf holds the sum over nranks of buffer b; returns 1 when it does. */
static int check_sum(harness_rank *r, const char *desc, const void *buf, size_t count,
                     weft_datatype_t dt, int b) {
  for (size_t i = 0; i < count; i++) {
    long want = 0;
    for (int q = 0; q < r->nranks; q++) want += value(q, i, b);
    double got = harness_load(buf, i, dt);
    if (got != (double)want) {
      harness_fail(r, "%s: element %zu: got %.9g, expected %ld", desc, i, got, want);
      return 0;
    }
  }
  return 1;
}

/* Something for the caller to compute while weft works: a checksum loop of ~ms. */
static double compute_for(int ms) {
  volatile double acc = 0;
  double end = harness_now_ms() + ms;
  while (harness_now_ms() < end)
    for (int i = 0; i < 10000; i++) acc += (double)i * 1e-9;
  return acc;
}

/* ---- twenty all_reduces, one synchronize ---------------------------------------------- */

#define NUM_QUEUED 20

static int twenty_body(harness_rank *r) {
  static const weft_datatype_t dts[] = {WEFT_FLOAT32, WEFT_INT32, WEFT_BFLOAT16, WEFT_FLOAT64,
                                        WEFT_UINT8};
  weft_stream_t stream;
  if (!harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS, "weft_stream_create"))
    return r->failures;
  void *bufs[NUM_QUEUED];
  size_t counts[NUM_QUEUED];
  for (int b = 0; b < NUM_QUEUED; b++) {
    counts[b] = b % 4 == 3 ? ((size_t)1 << 20) + (size_t)b : 1000 + 37 * (size_t)b;
    bufs[b] = make_buf(counts[b], dts[b % 5], r->rank, b);
  }
  double t0 = harness_now_ms();
  for (int b = 0; b < NUM_QUEUED; b++) {
    weft_status_t st = weft_all_reduce(bufs[b], bufs[b], counts[b], dts[b % 5], WEFT_SUM,
                                       r->comm, stream);
    harness_expect_status(r, st, WEFT_SUCCESS, "weft_all_reduce enqueued on a stream");
  }
  double enqueue_ms = harness_now_ms() - t0;
  if (enqueue_ms > 1000)
    harness_fail(r, "enqueueing 20 all_reduces took %.0f ms: the calls are not asynchronous",
                 enqueue_ms);
  weft_status_t q = weft_stream_query(stream);
  if (q != WEFT_IN_PROGRESS && q != WEFT_SUCCESS)
    harness_fail(r, "weft_stream_query after enqueueing returned %s", harness_status_name(q));
  harness_expect_status(r, weft_stream_synchronize(stream), WEFT_SUCCESS,
                        "weft_stream_synchronize after 20 all_reduces");
  harness_expect_status(r, weft_stream_query(stream), WEFT_SUCCESS,
                        "weft_stream_query after synchronize");
  for (int b = 0; b < NUM_QUEUED; b++) {
    char desc[96];
    snprintf(desc, sizeof desc, "queued all_reduce #%d (count %zu %s sum)", b, counts[b],
             harness_dt_name(dts[b % 5]));
    check_sum(r, desc, bufs[b], counts[b], dts[b % 5], b);
    free(bufs[b]);
  }
  if (r->rank == 0)
    harness_note(r, "enqueueing 20 all_reduces took %.1f ms, all done after %.1f ms",
                 enqueue_ms, harness_now_ms() - t0);
  harness_expect_status(r, weft_stream_destroy(stream), WEFT_SUCCESS, "weft_stream_destroy");
  return r->failures;
}

/* ---- a full queue makes the caller wait for room ----------------------------------------- */

#define FULL_QUEUE_CALLS 1536 /* past the 1024 a stream queues (weft_stream_create) */
#define FULL_QUEUE_COUNT 8
#define FULL_QUEUE_LATE_MS 300

/* Rank 0 enqueues FULL_QUEUE_CALLS small all_reduces on a stream while rank 1 holds back
 * for FULL_QUEUE_LATE_MS after rank 0 began (flag 1): the call after the 1024th must wait
 * until rank 1's calls let the queue drain, so rank 0's loop lasts at least that long. An
 * unbounded queue took the whole loop in about a millisecond, and grew the heap by every
 * queued call. Then both synchronize and every result is checked. */
static int full_queue_body(harness_rank *r) {
  float *send = make_buf(FULL_QUEUE_COUNT, WEFT_FLOAT32, r->rank, 1);
  float *recv = calloc((size_t)FULL_QUEUE_CALLS * FULL_QUEUE_COUNT, sizeof(float));
  weft_stream_t stream;
  if (recv == NULL ||
      !harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS, "weft_stream_create")) {
    free(send);
    free(recv);
    return r->failures + 1;
  }
  if (r->rank == 1) {
    if (!harness_wait_flag(r, 1, 1, 15000)) harness_fail(r, "rank 0 never began its calls");
    double seen = harness_now_ms();
    while (harness_now_ms() - seen < FULL_QUEUE_LATE_MS) harness_sleep_ms(10);
  } else {
    atomic_store(&r->shared->flags[1], 1);
  }
  double t0 = harness_now_ms();
  for (int c = 0; c < FULL_QUEUE_CALLS && r->failures == 0; c++)
    harness_expect_status(r,
                          weft_all_reduce(send, recv + (size_t)c * FULL_QUEUE_COUNT, FULL_QUEUE_COUNT,
                                          WEFT_FLOAT32, WEFT_SUM, r->comm, stream),
                          WEFT_SUCCESS, "all_reduce on a stream");
  double loop_ms = harness_now_ms() - t0;
  if (r->rank == 0 && loop_ms < FULL_QUEUE_LATE_MS - 10)
    harness_fail(r, "enqueueing %d calls took %.1f ms while the peer held back %d ms: the "
                 "stream's queue took them all", FULL_QUEUE_CALLS, loop_ms, FULL_QUEUE_LATE_MS);
  if (r->rank == 0) harness_note(r, "enqueueing %d calls took %.0f ms", FULL_QUEUE_CALLS, loop_ms);
  if (harness_expect_status(r, weft_stream_synchronize(stream), WEFT_SUCCESS, "weft_stream_synchronize"))
    for (int c = 0; c < FULL_QUEUE_CALLS; c++) {
      char desc[64];
      snprintf(desc, sizeof desc, "queued all_reduce #%d", c);
      if (!check_sum(r, desc, recv + (size_t)c * FULL_QUEUE_COUNT, FULL_QUEUE_COUNT, WEFT_FLOAT32, 1)) break;
    }
  harness_expect_status(r, weft_stream_destroy(stream), WEFT_SUCCESS, "weft_stream_destroy");
  free(send);
  free(recv);
  return r->failures;
}

/* ---- a call on a stream returns before its peer has even called ------------------------ */

/* Rank 1 calls its all_reduce only after rank 0 (flag 0) has enqueued its own, found the
 * stream in progress and computed for 200 ms: a blocking enqueue would deadlock here until
 * the 20 s timeout. */
static int late_peer_body(harness_rank *r) {
  const size_t count = (size_t)1 << 20;
  float *buf = make_buf(count, WEFT_FLOAT32, r->rank, 3);
  if (r->rank == 1) {
    if (!harness_wait_flag(r, 0, 1, 15000))
      harness_fail(r, "rank 0 never reported that its stream call returned");
    weft_status_t st = weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (harness_expect_status(r, st, WEFT_SUCCESS, "late blocking all_reduce"))
      check_sum(r, "late blocking all_reduce", buf, count, WEFT_FLOAT32, 3);
    free(buf);
    return r->failures;
  }
  weft_stream_t stream;
  if (!harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS, "weft_stream_create"))
    return r->failures;
  double t0 = harness_now_ms();
  weft_status_t st = weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, r->comm, stream);
  double call_ms = harness_now_ms() - t0;
  harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce on a stream");
  if (call_ms > 500)
    harness_fail(r, "all_reduce on a stream took %.0f ms to return (peer not there yet)",
                 call_ms);
  compute_for(200);
  weft_status_t q = weft_stream_query(stream);
  if (q != WEFT_IN_PROGRESS)
    harness_fail(r, "weft_stream_query returned %s while the peer had not called yet",
                 harness_status_name(q));
  atomic_store(&r->shared->flags[0], 1);
  st = weft_stream_synchronize(stream);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "weft_stream_synchronize"))
    check_sum(r, "all_reduce on a stream", buf, count, WEFT_FLOAT32, 3);
  harness_expect_status(r, weft_stream_destroy(stream), WEFT_SUCCESS, "weft_stream_destroy");
  free(buf);
  return r->failures;
}

/* ---- overlap ------------------------------------------------------------------------- */

/* Every rank enqueues a 32 MiB all_reduce, computes for 300 ms, then synchronizes. The
 * wall time must be well below the sum of both when they overlap; this is measured and
 * noted, and only a gross serialization (enqueue taking the whole transfer) fails. */
static int overlap_body(harness_rank *r) {
  const size_t count = (size_t)8 << 20;
  float *buf = make_buf(count, WEFT_FLOAT32, r->rank, 5);
  weft_stream_t stream;
  if (!harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS, "weft_stream_create"))
    return r->failures;
  double t0 = harness_now_ms();
  weft_status_t st = weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, r->comm, stream);
  double call_ms = harness_now_ms() - t0;
  harness_expect_status(r, st, WEFT_SUCCESS, "32 MiB all_reduce on a stream");
  int in_progress = weft_stream_query(stream) == WEFT_IN_PROGRESS;
  compute_for(300);
  double sync_t0 = harness_now_ms();
  st = weft_stream_synchronize(stream);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "weft_stream_synchronize"))
    check_sum(r, "32 MiB all_reduce overlapped with computation", buf, count, WEFT_FLOAT32, 5);
  if (call_ms > 250)
    harness_fail(r, "enqueueing a 32 MiB all_reduce took %.0f ms: the call is not "
                 "asynchronous", call_ms);
  if (r->rank == 0)
    harness_note(r, "32 MiB all_reduce: enqueue %.1f ms, in progress after enqueue: %s, "
                 "synchronize waited %.1f ms after 300 ms of computing, total %.1f ms",
                 call_ms, in_progress ? "yes" : "no", harness_now_ms() - sync_t0,
                 harness_now_ms() - t0);
  harness_expect_status(r, weft_stream_destroy(stream), WEFT_SUCCESS, "weft_stream_destroy");
  free(buf);
  return r->failures;
}

/* ---- groups of collectives ----------------------------------------------------------- */

/* all_reduce, broadcast (root nranks-1), all_gather and reduce_scatter in one group. */
static int group_body(harness_rank *r) {
  int n = r->nranks, last = n - 1;
  const int on_stream = *(const int *)r->arg;
  const size_t count = 4097;
  weft_stream_t stream = NULL;
  if (on_stream && !harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS,
                                          "weft_stream_create"))
    return r->failures;
  float *a = make_buf(count, WEFT_FLOAT32, r->rank, 1);
  float *b = make_buf(count, WEFT_FLOAT32, r->rank == last ? 100 : r->rank, 2);
  int32_t *c_send = make_buf(count, WEFT_INT32, r->rank, 0);
  int32_t *c = make_buf(count * (size_t)n, WEFT_INT32, 0, 9);
  int32_t *d_send = make_buf(count * (size_t)n, WEFT_INT32, r->rank, 4);
  int32_t *d = make_buf(count, WEFT_INT32, 0, 9);
  weft_group_start();
  weft_status_t s[4];
  s[0] = weft_all_reduce(a, a, count, WEFT_FLOAT32, WEFT_SUM, r->comm, stream);
  s[1] = weft_broadcast(b, b, count, WEFT_FLOAT32, last, r->comm, stream);
  s[2] = weft_all_gather(c_send, c, count, WEFT_INT32, r->comm, stream);
  s[3] = weft_reduce_scatter(d_send, d, count, WEFT_INT32, WEFT_SUM, r->comm, stream);
  int ok = 1;
  for (int k = 0; k < 4; k++)
    ok &= harness_expect_status(r, s[k], WEFT_SUCCESS, "collective recorded in a group");
  ok &= harness_expect_status(r, weft_group_end(), WEFT_SUCCESS, "weft_group_end");
  if (stream)
    ok &= harness_expect_status(r, weft_stream_synchronize(stream), WEFT_SUCCESS,
                                "weft_stream_synchronize after a group");
  if (ok) {
    check_sum(r, "all_reduce in a group", a, count, WEFT_FLOAT32, 1);
    for (size_t i = 0; i < count; i++)
      if (harness_load(b, i, WEFT_FLOAT32) != (double)value(100, i, 2)) {
        harness_fail(r, "broadcast in a group: element %zu: got %g, expected %ld", i,
                     harness_load(b, i, WEFT_FLOAT32), value(100, i, 2));
        break;
      }
    for (size_t i = 0; i < count * (size_t)n; i++)
      if (c[i] != value((int)(i / count), i % count, 0)) {
        harness_fail(r, "all_gather in a group: element %zu: got %d, expected %ld", i, c[i],
                     value((int)(i / count), i % count, 0));
        break;
      }
    for (size_t i = 0; i < count; i++) {
      long want = 0;
      for (int q = 0; q < n; q++) want += value(q, (size_t)r->rank * count + i, 4);
      if (d[i] != want) {
        harness_fail(r, "reduce_scatter in a group: element %zu: got %d, expected %ld", i,
                     d[i], want);
        break;
      }
    }
  }
  if (stream) weft_stream_destroy(stream);
  free(a), free(b), free(c_send), free(c), free(d_send), free(d);
  return r->failures;
}

/* ---- non-blocking init --------------------------------------------------------------- */

/* Ranks other than 0 start their init 500 ms late: rank 0's non-blocking init must return
 * WEFT_IN_PROGRESS at once and report WEFT_SUCCESS later. */
static int nonblocking_init_body(harness_rank *r) {
  const int call_early = *(const int *)r->arg;
  if (r->rank != 0) harness_sleep_ms(500);
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  double init_ms = harness_now_ms() - t0;
  if (!harness_expect_status(r, st, WEFT_IN_PROGRESS, "non-blocking weft_comm_init_rank_config"))
    return r->failures;
  if (r->rank == 0 && init_ms > 300)
    harness_fail(r, "non-blocking init took %.0f ms to return", init_ms);
  if (!call_early) {
    weft_status_t async = WEFT_IN_PROGRESS;
    int seen_in_progress = 0;
    while (async == WEFT_IN_PROGRESS && harness_now_ms() - t0 < 15000) {
      st = weft_comm_get_async_error(r->comm, &async);
      if (!harness_expect_status(r, st, WEFT_SUCCESS, "weft_comm_get_async_error"))
        return r->failures;
      seen_in_progress |= async == WEFT_IN_PROGRESS;
      if (async == WEFT_IN_PROGRESS) harness_sleep_ms(2);
    }
    if (!harness_expect_status(r, async, WEFT_SUCCESS, "async error after non-blocking init"))
      return r->failures;
    if (r->rank == 0 && !seen_in_progress)
      harness_fail(r, "weft_comm_get_async_error never said WEFT_IN_PROGRESS although rank 1 "
                   "joined 500 ms late");
  }
  float *buf = make_buf(4097, WEFT_FLOAT32, r->rank, 6);
  st = weft_all_reduce(buf, buf, 4097, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  if (harness_expect_status(r, st, WEFT_SUCCESS, call_early
                                                     ? "all_reduce right after non-blocking init"
                                                     : "all_reduce after non-blocking init"))
    check_sum(r, "all_reduce after non-blocking init", buf, 4097, WEFT_FLOAT32, 6);
  free(buf);
  return r->failures;
}

/* ---- tests --------------------------------------------------------------------------- */

typedef struct {
  int nranks;
  const char *transport;
  harness_body_fn body;
  int arg;
  int no_init;
  int nonblocking;
} stream_params;

static void run_stream(void **state) {
  stream_params *p = *state;
  harness_opts o = {0};
  o.nranks = p->nranks;
  o.transport = p->transport;
  o.no_init = p->no_init;
  o.nonblocking = p->nonblocking;
  harness_run(&o, p->body, &p->arg);
}

#define ST(name, n, tr, body, arg, noinit, nb) \
  {name "_on_" #n "_ranks_over_" #tr, run_stream, NULL, NULL, \
   &(stream_params){n, #tr, body, arg, noinit, nb}}

int main(void) {
  const struct CMUnitTest tests[] = {
      ST("twenty_all_reduces_on_a_stream_complete_at_synchronize", 3, shm, twenty_body, 0, 0, 0),
      ST("twenty_all_reduces_on_a_stream_complete_at_synchronize", 3, socket, twenty_body, 0, 0,
         0),
      ST("stream_call_returns_before_the_peer_calls_and_query_says_in_progress", 2, shm,
         late_peer_body, 0, 0, 0),
      ST("stream_call_returns_before_the_peer_calls_and_query_says_in_progress", 2, socket,
         late_peer_body, 0, 0, 0),
      ST("full_stream_queue_makes_the_caller_wait_for_room", 2, shm, full_queue_body, 0, 0, 0),
      ST("full_stream_queue_makes_the_caller_wait_for_room", 2, socket, full_queue_body, 0, 0, 0),
      ST("large_all_reduce_on_a_stream_overlaps_with_caller_computation", 2, shm, overlap_body,
         0, 0, 0),
      ST("large_all_reduce_on_a_stream_overlaps_with_caller_computation", 3, socket,
         overlap_body, 0, 0, 0),
      ST("group_of_collectives_completes_at_group_end", 3, shm, group_body, 0, 0, 0),
      ST("group_of_collectives_on_a_stream_completes_at_synchronize", 3, socket, group_body, 1,
         0, 0),
      ST("nonblocking_init_returns_in_progress_then_reports_success", 2, shm,
         nonblocking_init_body, 0, 1, 1),
      ST("collective_called_right_after_nonblocking_init_waits_for_it", 3, socket,
         nonblocking_init_body, 1, 1, 1),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
