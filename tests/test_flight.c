/* test_flight.c: the flight recorder and its reader on real hangs (issue 15).
 *
 * 1. Not calling: 4 ranks run 5 all-reduces; rank 3 then stays out of the 6th. Ranks 0-2
 *    time out (WEFT_TIMEOUT_MS 1000) and write their records; rank 3 is sent SIGUSR1 and
 *    writes its record from the recorder's thread while idle. tools/weft_flight.py must
 *    say that ranks 0-2 are in all_reduce #6, that rank 3 is idle after #5, and name rank 3
 *    as the one they wait for.
 * 2. SIGSTOP mid-call: 4 ranks loop on 256 KiB all-reduces; rank 0 stops rank 3 with
 *    SIGSTOP after 20 calls. The others time out and write records; a timeout later rank 3 is
 *    continued, times out itself, and writes its record. The reader must name rank 3.
 * 3. weft_comm_flight_record: the public call returns the JSON (sizes, the too-small-
 *    buffer error) and it parses as the reader expects; its times are CLOCK_MONOTONIC ns
 *    in order around the calls (64 KiB: timed from their start), a 50 ms sleep between two
 *    of them 50 ms apart. On one rank a 64-byte call, which never waits, takes no clock
 *    reading (start and end 0: two TSC reads cost an 8-byte broadcast 13%); a 64 KiB one is
 *    timed.
 * 4. On the coarse clock (machines without an invariant TSC; forced here), a long call that
 *    never waits (a 256 MiB all-reduce on one rank: a copy) is recorded as long as it took:
 *    its end was once taken as its start when the call had not waited.
 * 5. A send that its receive feeds piece by piece as they land (the ring's forwarding,
 *    weft__req.fwd) counts in the "sent" bytes of the in-flight record before the driver
 *    posts it, and once only after (its bytes were missing from the record until then).
 * Cases 1-4 fail without the recorder (no files: the reader exits 1). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "lib/task.h"
#include "tests/harness.h"

#define TIMEOUT_MS 1000
#define FLAG_FAILED 0  /* flags[FLAG_FAILED + r]: rank r's call failed (and it dumped) */
#define FLAG_GO 8      /* flags[FLAG_GO]: rank 3 may go */
#define VAL_PID 0      /* values[VAL_PID + r]: rank r's pid */

static char dir[256];
static float sendb[1 << 16], recvb[1 << 16];

/* Waits until ranks 0..2 failed; 0 on time out. */
static int wait_others(harness_rank *r) {
  for (int k = 0; k < 3; k++)
    if (!harness_wait_flag(r, FLAG_FAILED + k, 1, 20 * TIMEOUT_MS)) return 0;
  return 1;
}

static int idle_body(harness_rank *r) {
  for (int i = 0; i < 5; i++)
    harness_expect_status(r, weft_all_reduce(sendb, recvb, 1024, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                          "all_reduce before the hang");
  atomic_store(&r->shared->values[VAL_PID + r->rank], getpid());
  if (r->rank == 3) {
    if (!wait_others(r)) harness_fail(r, "ranks 0-2 never failed");
    kill(getpid(), SIGUSR1); /* the recorder's thread writes the file */
    usleep(300 * 1000);
    atomic_store(&r->shared->flags[FLAG_GO], 1);
  } else {
    weft_status_t st = weft_all_reduce(sendb, recvb, 1024, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_REMOTE)
      harness_fail(r, "all_reduce without rank 3 returned %s, expected a timeout", harness_status_name(st));
    atomic_store(&r->shared->flags[FLAG_FAILED + r->rank], 1);
    harness_wait_flag(r, FLAG_GO, 1, 30 * TIMEOUT_MS); /* alive until rank 3 wrote its file */
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static int stop_body(harness_rank *r) {
  atomic_store(&r->shared->values[VAL_PID + r->rank], getpid());
  weft_status_t st = WEFT_SUCCESS;
  for (int i = 0; st == WEFT_SUCCESS && i < 100000; i++) {
    if (r->rank == 0 && i == 20) kill((pid_t)atomic_load(&r->shared->values[VAL_PID + 3]), SIGSTOP);
    st = weft_all_reduce(sendb, recvb, 1 << 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  }
  if (st == WEFT_SUCCESS) harness_fail(r, "100000 all-reduces succeeded: rank 3 was never stopped");
  if (r->rank != 3) {
    atomic_store(&r->shared->flags[FLAG_FAILED + r->rank], 1);
    if (r->rank == 0) {
      if (!wait_others(r)) harness_fail(r, "ranks 1-2 never failed");
      /* Stopped a while longer, as a stopped rank is. Where the stop caught rank 3 in the
       * same call as the others, all four wait in a cycle and its late failure is the only
       * trace the reader has (more than half a timeout after the first); continued at once,
       * it failed with the others and the reader could not name it (a CI run on the AMD
       * VM, 2026-11-27). */
      struct timespec pause = {TIMEOUT_MS / 1000, (TIMEOUT_MS % 1000) * 1000000L};
      nanosleep(&pause, NULL);
      kill((pid_t)atomic_load(&r->shared->values[VAL_PID + 3]), SIGCONT);
    }
    harness_wait_flag(r, FLAG_GO, 1, 30 * TIMEOUT_MS);
  } else {
    atomic_store(&r->shared->flags[FLAG_GO], 1);
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* Runs the reader on dir; its output into buf. Returns its exit status. */
static int run_reader(char *buf, size_t len) {
  const char *top = getenv("WEFT_TOP_SRCDIR");
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "python3 %s/tools/weft_flight.py %s 2>&1", top ? top : "..", dir);
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  size_t n = fread(buf, 1, len - 1, p);
  buf[n] = '\0';
  int rc = pclose(p);
  printf("# weft-flight %s:\n", dir);
  for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    printf("#   %s\n", line);
    line[strlen(line)] = '\n'; /* strtok cut it: restore for the callers' searches */
  }
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void fresh_dir(const char *name) {
  snprintf(dir, sizeof(dir), "/tmp/weft-flight-test-%d-%s", (int)getpid(), name);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
  if (system(cmd) != 0) fail_msg("cannot make %s", dir);
  setenv("WEFT_FLIGHT_RECORDER_DIR", dir, 1);
}

static void end_dir(void) {
  unsetenv("WEFT_FLIGHT_RECORDER_DIR");
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "# cannot remove %s\n", dir);
}

static void expect_in(const char *report, const char *what) {
  if (strstr(report, what) == NULL) fail_msg("weft-flight's report does not say \"%s\":\n%s", what, report);
}

/* The reader is a Python 3 script: without python3 the reader's cases are skipped. */
static void need_python(void) {
  if (system("python3 -c 'import json' >/dev/null 2>&1") != 0) skip();
}

static void rank_not_calling_is_named_by_the_reader(void **state) {
  (void)state;
  need_python();
  fresh_dir("idle");
  harness_opts o = {.nranks = 4, .transport = "shm", .timeout_ms = TIMEOUT_MS, .deadline_s = 60};
  harness_run(&o, idle_body, NULL);
  char buf[8192];
  int rc = run_reader(buf, sizeof(buf));
  if (rc != 0) fail_msg("weft-flight exited %d:\n%s", rc, buf);
  expect_in(buf, "ranks 0-2 are in all_reduce #6");
  expect_in(buf, "rank 3 is idle after all_reduce #5 (done) and has not called #6 yet");
  expect_in(buf, "waiting for rank");
  expect_in(buf, "stuck: rank 3 is behind");
  end_dir();
}

static void rank_stopped_mid_call_is_named_by_the_reader(void **state) {
  (void)state;
  need_python();
  fresh_dir("sigstop");
  harness_opts o = {.nranks = 4, .transport = "shm", .timeout_ms = TIMEOUT_MS, .deadline_s = 60};
  harness_run(&o, stop_body, NULL);
  char buf[8192];
  int rc = run_reader(buf, sizeof(buf));
  if (rc != 0) fail_msg("weft-flight exited %d:\n%s", rc, buf);
  expect_in(buf, "stuck: ");
  const char *stuck = strstr(buf, "stuck: ");
  if (stuck == NULL || (strstr(stuck, "rank 3 (") == NULL && strstr(stuck, "for rank 3") == NULL))
    fail_msg("weft-flight does not name rank 3 as the stuck one:\n%s", buf);
  end_dir();
}

/* CLOCK_MONOTONIC in ns, as the record's times are. */
static uint64_t monotonic_ns(void) { return (uint64_t)(harness_now_ms() * 1e6); }

/* The start_ns and end_ns of entry seq in a record: 1, or 0 when they are not there. */
static int entry_times(const char *json, int seq, uint64_t *start, uint64_t *end) {
  char key[40];
  snprintf(key, sizeof(key), "{\"seq\": %d, ", seq);
  const char *e = strstr(json, key);
  const char *t = e != NULL ? strstr(e, "\"start_ns\": ") : NULL;
  unsigned long long s, f;
  if (t == NULL || sscanf(t, "\"start_ns\": %llu, \"end_ns\": %llu", &s, &f) != 2) return 0;
  *start = s;
  *end = f;
  return 1;
}

/* The record's times are CLOCK_MONOTONIC ns whatever clock the recorder reads (the TSC where
 * it is invariant): between readings taken around the calls, in order, and 50 ms apart where
 * the program slept 50 ms. Slack: the coarse clock, used without an invariant TSC, may lag
 * by a kernel tick (at most 10 ms at 100 Hz). */
static void check_times(harness_rank *r, const char *json, uint64_t before, uint64_t after) {
  const uint64_t slack = 20000000ull;
  uint64_t s2, e2, s3, e3, now;
  const char *n = strstr(json, "\"now_ns\": ");
  if (!entry_times(json, 2, &s2, &e2) || !entry_times(json, 3, &s3, &e3) || n == NULL ||
      sscanf(n, "\"now_ns\": %" SCNu64, &now) != 1) {
    harness_fail(r, "no times of calls #2 and #3 or now_ns in the record: %s", json);
    return;
  }
  if (s2 + slack < before || s2 > e2 || e2 > s3 || s3 > e3 || e3 > after + slack || now + slack < after ||
      s3 - e2 + slack < 50000000ull)
    harness_fail(r, "record times not in CLOCK_MONOTONIC ns around the calls: before %" PRIu64 ", #2 %" PRIu64
                 "-%" PRIu64 ", 50 ms sleep, #3 %" PRIu64 "-%" PRIu64 ", after %" PRIu64 ", now_ns %" PRIu64,
                 before, s2, e2, s3, e3, after, now);
}

static int api_body(harness_rank *r) {
  uint64_t before = monotonic_ns();
  for (int i = 0; i < 3; i++) {
    if (i == 2) usleep(50 * 1000);
    harness_expect_status(r, weft_all_reduce(sendb, recvb, 16384, WEFT_FLOAT32, WEFT_MAX, r->comm, NULL),
                          WEFT_SUCCESS, "all_reduce");
  }
  uint64_t after = monotonic_ns();
  size_t need = 0;
  char small[16];
  weft_status_t st = weft_comm_flight_record(r->comm, small, sizeof(small), &need);
  harness_expect_status(r, st, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_flight_record into 16 bytes");
  if (need <= sizeof(small) || strlen(small) != sizeof(small) - 1)
    harness_fail(r, "needed %zu, truncated text of %zu bytes", need, strlen(small));
  char *buf = malloc(need);
  size_t need2 = 0;
  st = weft_comm_flight_record(r->comm, buf, need, &need2);
  harness_expect_status(r, st, WEFT_SUCCESS, "weft_comm_flight_record into the size it asked for");
  if (st == WEFT_SUCCESS && (strlen(buf) + 1 != need2 || !strstr(buf, "\"coll\": \"all_reduce\", \"count\": 16384") ||
                             !strstr(buf, "\"op\": \"max\"") || !strstr(buf, "\"seq\": 3") ||
                             !strstr(buf, "\"state\": \"done\"") || !strstr(buf, "\"in_flight\": null")))
    harness_fail(r, "the record lacks the calls made: %s", buf);
  if (st == WEFT_SUCCESS) check_times(r, buf, before, after);
  free(buf);
  harness_expect_status(r, weft_comm_flight_record(NULL, NULL, 0, NULL), WEFT_ERR_INVALID_ARGUMENT, "comm NULL");
  harness_expect_status(r, weft_comm_flight_record(r->comm, NULL, 5, NULL), WEFT_ERR_INVALID_ARGUMENT,
                        "buf NULL, len 5");
  return r->failures;
}

static void public_call_returns_the_record(void **state) {
  (void)state;
  harness_run_simple(2, "shm", api_body, NULL);
}

/* One rank: a 64-byte all-reduce never waits and is not timed; a 64 KiB one is. */
static int untimed_body(harness_rank *r) {
  uint64_t before = monotonic_ns();
  harness_expect_status(r, weft_all_reduce(sendb, recvb, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                        "64-byte all_reduce");
  harness_expect_status(r, weft_all_reduce(sendb, recvb, 16384, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                        "64 KiB all_reduce");
  uint64_t after = monotonic_ns();
  size_t need = 1 << 20;
  char *json = malloc(need);
  uint64_t s1 = 1, e1 = 1, s2 = 0, e2 = 0;
  if (json == NULL || weft_comm_flight_record(r->comm, json, need, NULL) != WEFT_SUCCESS ||
      !entry_times(json, 1, &s1, &e1) || !entry_times(json, 2, &s2, &e2))
    harness_fail(r, "no entries of the two calls in the record: %s", json != NULL ? json : "(no memory)");
  else if (s1 != 0 || e1 != 0)
    harness_fail(r, "the 64-byte call, which never waited, read the clock: %" PRIu64 "-%" PRIu64, s1, e1);
  else if (s2 + 20000000ull < before || s2 > e2 || e2 > after + 20000000ull)
    harness_fail(r, "the 64 KiB call is not timed around the calls: before %" PRIu64 ", %" PRIu64 "-%" PRIu64
                 ", after %" PRIu64, before, s2, e2, after);
  free(json);
  return r->failures;
}

static void short_call_that_never_waits_is_not_timed(void **state) {
  (void)state;
  harness_run_simple(1, "shm", untimed_body, NULL);
}

static int coarse_body(harness_rank *r) {
  r->comm->flight.tsc = 0; /* the coarse clock, as where the TSC is not invariant */
  size_t count = (size_t)64 << 20; /* 256 MiB of floats */
  /* calloc: the call is the first to touch out's pages, which makes it longer (0.26-0.32 s
   * here, against 8-12 ms once they are there): far above the coarse clock's tick */
  float *in = calloc(count, sizeof(float)), *out = calloc(count, sizeof(float));
  if (in == NULL || out == NULL) {
    harness_fail(r, "no memory for two 256 MiB buffers");
    free(in);
    free(out);
    return r->failures;
  }
  uint64_t before = monotonic_ns();
  harness_expect_status(r, weft_all_reduce(in, out, count, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                        "256 MiB all_reduce on one rank");
  uint64_t took = monotonic_ns() - before;
  size_t need = 1 << 20; /* 256 entries need about 64 KiB */
  char *json = malloc(need);
  uint64_t s = 0, e = 0; /* the call is the communicator's first: #1 */
  if (json == NULL || weft_comm_flight_record(r->comm, json, need, NULL) != WEFT_SUCCESS ||
      !entry_times(json, 1, &s, &e))
    harness_fail(r, "no entry of the 256 MiB call in the record: %s", json != NULL ? json : "(no memory)");
  /* Slack: two ticks of the coarse clock (at most 10 ms each at 100 Hz). */
  else if (e < s || e - s + 20000000ull < took)
    harness_fail(r, "the call took %" PRIu64 " ns but is recorded from %" PRIu64 " to %" PRIu64 " (%" PRIu64
                 " ns)", took, s, e, e - s);
  harness_note(r, "256 MiB call: took %" PRIu64 " ns, recorded %" PRIu64 " ns", took, e - s);
  free(json);
  free(in);
  free(out);
  return r->failures;
}

static void long_call_is_timed_on_the_coarse_clock(void **state) {
  (void)state;
  harness_run_simple(1, "shm", coarse_body, NULL);
}

/* The in-flight record's "sent" bytes to peer, or UINT64_MAX when it has no such peer. */
static uint64_t sent_to(harness_rank *r, int peer, char *json, size_t len) {
  weft__flight_json(r->comm, json, len, "test", NULL);
  char key[48];
  snprintf(key, sizeof key, "{\"peer\": %d, \"sent\": ", peer);
  const char *at = strstr(json, key);
  return at != NULL ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
}

/* A receive from the previous rank in progress, 192 KiB landed, feeding a send to the next
 * one; the record is taken as if an all-reduce were running (no call runs: nothing moves). */
static int fed_body(harness_rank *r) {
  struct weft_comm *comm = r->comm;
  int prev = (r->rank + 2) % 3, next = (r->rank + 1) % 3;
  size_t landed = (size_t)3 << 16;
  weft__flight_entry e = {.seq = 7, .coll = WEFT__COLL_ALL_REDUCE, .state = WEFT__FLIGHT_RUNNING};
  weft__req send = {0}, recv = {0};
  send.kind = WEFT__REQ_SEND, send.conn = &comm->conns[next], send.bytes = 1 << 20, send.done = landed;
  recv.kind = WEFT__REQ_RECV, recv.conn = &comm->conns[prev], recv.bytes = 1 << 20, recv.done = landed;
  char json[8192];
  comm->flight.cur = &e;
  comm->conns[prev].recv_head = &recv;
  uint64_t alone = sent_to(r, next, json, sizeof json);
  recv.fwd = &send; /* its pieces went on as they landed: the send is not posted yet */
  uint64_t fed = sent_to(r, next, json, sizeof json);
  comm->conns[next].send_head = &send; /* posted: its bytes count as the head's */
  uint64_t posted = sent_to(r, next, json, sizeof json);
  comm->conns[next].send_head = NULL;
  comm->conns[prev].recv_head = NULL;
  comm->flight.cur = NULL;
  if (alone == UINT64_MAX) return harness_fail(r, "no peer %d in the in-flight record: %s", next, json);
  if (fed != alone + landed)
    harness_fail(r, "sent to peer %d: %" PRIu64 " with a fed send of %zu bytes not yet posted, %" PRIu64
                 " without it: the fed bytes are not counted", next, fed, landed, alone);
  if (posted != fed)
    harness_fail(r, "sent to peer %d: %" PRIu64 " once the fed send is posted, %" PRIu64 " before", next, posted,
                 fed);
  return r->failures;
}

static void fed_send_counts_before_it_is_posted(void **state) {
  (void)state;
  harness_run_simple(3, "shm", fed_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(public_call_returns_the_record),
      cmocka_unit_test(short_call_that_never_waits_is_not_timed),
      cmocka_unit_test(long_call_is_timed_on_the_coarse_clock),
      cmocka_unit_test(rank_not_calling_is_named_by_the_reader),
      cmocka_unit_test(rank_stopped_mid_call_is_named_by_the_reader),
      cmocka_unit_test(fed_send_counts_before_it_is_posted),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
