/* test_harden.c: the failures issue 15 found, each made to fail fast and name its cause.
 *
 * Placement probe (transports/shm/shm_placement.c): the first 2-rank all-reduce of 256 KiB
 * over shm runs the probe, which waits for its partner; a dead partner must fail it in
 * milliseconds naming the partner, weft_comm_abort from another thread must end it, and a
 * partner that does not come must be waited for asleep, not at 100% CPU. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/harness.h"

#define PROBE_COUNT (256 * 1024 / 4) /* float32 elements: the probe's threshold */
#define FLAG_DONE 0                  /* flags[0]: rank 0 is done, the partner may leave */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A small all-reduce that must work: the communicator is up on both ranks. */
static int small_all_reduce(harness_rank *r) {
  float v[16] = {0};
  return harness_expect_status(r, weft_all_reduce(v, v, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL),
                               WEFT_SUCCESS, "warm-up all_reduce of 16 float32");
}

/* CPU seconds this process used so far (user + system). */
static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

/* Rank 0's probing all-reduce; returns its status and fills ms and cpu. */
static weft_status_t probing_all_reduce(harness_rank *r, double *ms, double *cpu) {
  float *b = calloc(PROBE_COUNT, sizeof(float));
  double t0 = harness_now_ms(), c0 = cpu_s();
  weft_status_t st = weft_all_reduce(b, b, PROBE_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  *ms = harness_now_ms() - t0;
  *cpu = cpu_s() - c0;
  free(b);
  return st;
}

/* Rank 1 exits; rank 0's probe must fail within 2 s (timeout 20 s) naming rank 1. */
static int dead_partner_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) _exit(0);
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  const char *msg = weft_get_last_error(r->comm);
  if (st != WEFT_ERR_REMOTE)
    harness_fail(r, "256 KiB all_reduce with rank 1 gone returned %s: \"%s\"", harness_status_name(st), msg);
  if (ms > 2000) harness_fail(r, "it failed only after %.0f ms (timeout %d ms)", ms, r->config.timeout_ms);
  if (!harness_names_rank(msg, 1)) harness_fail(r, "the error does not name rank 1: \"%s\"", msg);
  harness_note(r, "failed after %.0f ms: \"%s\"", ms, msg);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void placement_probe_with_a_dead_partner_fails_in_ms_naming_it(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 20000, .deadline_s = 60};
  harness_run(&o, dead_partner_body, NULL);
}

static void *abort_later(void *arg) {
  sleep_ms(300);
  weft_comm_abort(arg);
  return NULL;
}

/* Rank 1 stays alive but never joins; rank 0 aborts from another thread after 300 ms. */
static int abort_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) {
    harness_wait_flag(r, FLAG_DONE, 1, 30000);
    weft_comm_abort(r->comm);
    r->comm = NULL;
    return r->failures;
  }
  pthread_t t;
  pthread_create(&t, NULL, abort_later, r->comm);
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  if (st == WEFT_SUCCESS) harness_fail(r, "256 KiB all_reduce succeeded with rank 1 absent");
  if (ms > 2300) harness_fail(r, "an abort 300 ms into the call ended it only after %.0f ms", ms);
  harness_note(r, "ended after %.0f ms with %s", ms, harness_status_name(st));
  pthread_join(t, NULL);
  r->comm = NULL; /* destroyed by the abort */
  atomic_store(&r->shared->flags[FLAG_DONE], 1);
  return r->failures;
}

static void placement_probe_ends_at_an_abort_from_another_thread(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 20000, .deadline_s = 60};
  harness_run(&o, abort_body, NULL);
}

/* Rank 1 stays alive but never joins: rank 0 times out after 1.5 s, using well under one
 * core meanwhile (spinning used 100%). */
static int absent_partner_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) {
    harness_wait_flag(r, FLAG_DONE, 1, 30000);
    weft_comm_abort(r->comm);
    r->comm = NULL;
    return r->failures;
  }
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  if (st != WEFT_ERR_TIMEOUT) harness_fail(r, "256 KiB all_reduce with rank 1 absent returned %s: \"%s\"",
                                           harness_status_name(st), weft_get_last_error(r->comm));
  if (cpu > 0.3 * ms / 1000)
    harness_fail(r, "waiting %.0f ms for the probe's partner used %.0f ms of CPU", ms, cpu * 1000);
  harness_note(r, "timed out after %.0f ms using %.0f ms of CPU", ms, cpu * 1000);
  atomic_store(&r->shared->flags[FLAG_DONE], 1);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void placement_probe_waits_for_an_absent_partner_without_spinning(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 1500, .deadline_s = 60};
  harness_run(&o, absent_partner_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(placement_probe_with_a_dead_partner_fails_in_ms_naming_it),
      cmocka_unit_test(placement_probe_ends_at_an_abort_from_another_thread),
      cmocka_unit_test(placement_probe_waits_for_an_absent_partner_without_spinning),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
