/* test_failure.c: a rank that dies mid-job makes the others fail fast, naming it.
 *
 * 3 rank processes, communicator timeout 10 s. All run a few correct all_reduces, then
 * rank 1 goes away without destroying its communicator: it _exits right before the next
 * all_reduce, or _exits / is killed by SIGKILL VICTIM_DELAY_MS into a 64 MiB all_reduce it runs
 * on a stream (the others have started theirs: the transfer is usually in flight). On an idle
 * machine the whole 64 MiB call can end in ~14 ms, before the victim leaves; the survivors then
 * rightly succeed, so a success of that first call is tolerated once and the next call (the
 * victim is gone by then) must fail. Ranks 0 and 2 must
 * get WEFT_ERR_REMOTE or WEFT_ERR_TIMEOUT within the timeout plus a 3 s margin, with a
 * last error naming rank 1 ("rank 1" / "peer 1"), through the blocking call or through
 * weft_stream_synchronize and weft_comm_get_async_error; weft_comm_abort must then return.
 * The survivors abort only after both have their error (else the second may rightly blame
 * the first one's abort).
 * A last case: rank 1 stays alive but stops calling; with a 3 s timeout the others must
 * fail (WEFT_ERR_TIMEOUT, or WEFT_ERR_REMOTE when a peer timed out first) on time.
 * The mid-call and silent cases run over the ib transport too, on the verbs emulator
 * (tests/verbs_emu/), where it is built; elsewhere they are reported as skipped. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TIMEOUT_MS 10000
#define SILENT_TIMEOUT_MS 3000 /* shorter: the silent case always waits it out */
#define MARGIN_MS 3000
#define BIG_COUNT ((size_t)16 << 20) /* 64 MiB of float32 */
#define VICTIM 1
/* How long the victim runs inside its 64 MiB call before it leaves: short, so that the kill
 * usually lands while bytes move; the survivors tolerate the call ending first (see above). */
#ifndef VICTIM_DELAY_MS
#define VICTIM_DELAY_MS 2
#endif

enum { EXIT_BEFORE, EXIT_DURING, KILL_DURING, GO_SILENT };

/* flags[0] and flags[2]: that survivor is about to start the fatal collective.
 * flags[10]: the survivors are done (the silent rank may leave). */
#define FLAG_SURVIVORS_DONE 10

/* Three all_reduces that must succeed before anything goes wrong. */
static int warm_up(harness_rank *r) {
  for (int k = 0; k < 3; k++) {
    float v[4097];
    for (int i = 0; i < 4097; i++) v[i] = (float)(r->rank + k + i % 3);
    weft_status_t st = weft_all_reduce(v, v, 4097, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "warm-up all_reduce")) return 0;
    for (int i = 0; i < 4097; i++)
      if (v[i] != (float)(3 + 3 * k + 3 * (i % 3)))
        return harness_fail(r, "warm-up all_reduce %d: element %d: got %g", k, i, v[i]);
  }
  return 1;
}

static float *make_buffer(size_t count) {
  float *b = malloc(count * sizeof(float));
  if (!b) abort();
  for (size_t i = 0; i < count; i++) b[i] = 1.0f;
  return b;
}

/* Rank 1: waits until both survivors are about to call, starts its part on a stream, and
 * leaves VICTIM_DELAY_MS into it. */
static void victim_dies_mid_call(harness_rank *r, int kind) {
  float *b = make_buffer(BIG_COUNT);
  harness_wait_flag(r, 0, 1, 10000);
  harness_wait_flag(r, 2, 1, 10000);
  weft_stream_t s;
  if (weft_stream_create(&s) == WEFT_SUCCESS)
    weft_all_reduce(b, b, BIG_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, s);
  harness_sleep_ms(VICTIM_DELAY_MS);
  if (weft_stream_query(s) != WEFT_IN_PROGRESS)
    harness_note(r, "note: the 64 MiB all_reduce was no longer in flight after %d ms",
                 VICTIM_DELAY_MS);
  if (kind == KILL_DURING) kill(getpid(), SIGKILL);
  _exit(0);
}

/* The first 40-character stretch of msg that occurs in it twice, or NULL. */
static const char *repeated_text(const char *msg) {
  static __thread char window[41];
  size_t n = strlen(msg);
  for (size_t i = 0; i + 40 <= n; i++) {
    memcpy(window, msg + i, 40);
    window[40] = '\0';
    if (strstr(msg + i + 1, window) != NULL) return window;
  }
  return NULL;
}

/* Judges a survivor's failed call: status, time taken, the message naming rank 1 once. */
static void judge_failure(harness_rank *r, weft_status_t st, double ms, const char *what) {
  const char *msg = weft_get_last_error(r->comm);
  if (st != WEFT_ERR_REMOTE && st != WEFT_ERR_TIMEOUT) {
    harness_fail(r, "%s with rank %d gone returned %s, expected WEFT_ERR_REMOTE or "
                 "WEFT_ERR_TIMEOUT: \"%s\"", what, VICTIM, harness_status_name(st), msg);
    return;
  }
  if (ms > r->config.timeout_ms + MARGIN_MS)
    harness_fail(r, "%s failed only after %.0f ms (timeout %d ms)", what, ms,
                 r->config.timeout_ms);
  if (!harness_names_rank(msg, VICTIM))
    harness_fail(r, "%s: the error does not name rank %d: \"%s\"", what, VICTIM, msg);
  if (repeated_text(msg) != NULL)
    harness_fail(r, "%s: the error says \"%s\" twice: \"%s\"", what, repeated_text(msg), msg);
  harness_note(r, "%s failed after %.0f ms with %s: \"%s\"", what, ms, harness_status_name(st),
               msg);
}

/* A survivor's blocking 64 MiB all_reduce (or, for EXIT_BEFORE, a small one). A success is
 * tolerated once (rank 1 may have finished its part just before leaving); the next call
 * must fail. */
static void survivor_blocking(harness_rank *r, int kind) {
  size_t count = kind == EXIT_BEFORE || kind == GO_SILENT ? 4097 : BIG_COUNT;
  float *b = make_buffer(count);
  for (int attempt = 0; attempt < 2; attempt++) {
    atomic_store(&r->shared->flags[r->rank], 1);
    double t0 = harness_now_ms();
    weft_status_t st = weft_all_reduce(b, b, count, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    double ms = harness_now_ms() - t0;
    if (st == WEFT_SUCCESS && attempt == 0 && kind != EXIT_BEFORE && kind != GO_SILENT) {
      harness_note(r, "the in-flight all_reduce completed before rank 1 left; calling again");
      continue;
    }
    if (st == WEFT_SUCCESS) {
      harness_fail(r, "all_reduce succeeded although rank %d is gone", VICTIM);
      break;
    }
    if (kind == GO_SILENT) {
      if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_REMOTE)
        harness_fail(r, "all_reduce with a silent rank returned %s: \"%s\"",
                     harness_status_name(st), weft_get_last_error(r->comm));
      if (ms > r->config.timeout_ms + MARGIN_MS)
        harness_fail(r, "all_reduce with a silent rank failed only after %.0f ms", ms);
      harness_note(r, "all_reduce with a silent rank failed after %.0f ms with %s: \"%s\"", ms,
                   harness_status_name(st), weft_get_last_error(r->comm));
    } else {
      judge_failure(r, st, ms, "blocking all_reduce");
    }
    break;
  }
  free(b);
}

/* A survivor's 64 MiB all_reduce on a stream: the error comes from synchronize and
 * stays visible in weft_comm_get_async_error. As in survivor_blocking, a success of the
 * first call is tolerated once (rank 1 finished its part before it died); the next must fail. */
static void survivor_on_stream(harness_rank *r) {
  float *b = make_buffer(BIG_COUNT);
  weft_stream_t s;
  if (!harness_expect_status(r, weft_stream_create(&s), WEFT_SUCCESS, "weft_stream_create"))
    return;
  for (int attempt = 0; attempt < 2; attempt++) {
    atomic_store(&r->shared->flags[r->rank], 1);
    double t0 = harness_now_ms();
    weft_status_t st = weft_all_reduce(b, b, BIG_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, s);
    harness_expect_status(r, st, WEFT_SUCCESS, "enqueueing the all_reduce on a stream");
    st = weft_stream_synchronize(s);
    if (st == WEFT_SUCCESS && attempt == 0) {
      harness_note(r, "the in-flight all_reduce completed before rank 1 died; calling again");
      continue;
    }
    if (st == WEFT_SUCCESS) {
      harness_fail(r, "all_reduce on a stream succeeded although rank %d is gone", VICTIM);
      break;
    }
    judge_failure(r, st, harness_now_ms() - t0, "weft_stream_synchronize of an all_reduce");
    weft_status_t async = WEFT_SUCCESS;
    weft_comm_get_async_error(r->comm, &async);
    if (async != WEFT_ERR_REMOTE && async != WEFT_ERR_TIMEOUT)
      harness_fail(r, "weft_comm_get_async_error after the failed stream operation: %s",
                   harness_status_name(async));
    break;
  }
  weft_stream_destroy(s);
  free(b);
}

static void abort_comm(harness_rank *r) {
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_abort(r->comm);
  double ms = harness_now_ms() - t0;
  r->comm = NULL;
  if (st != WEFT_SUCCESS) harness_fail(r, "weft_comm_abort returned %s", harness_status_name(st));
  if (ms > r->config.timeout_ms + MARGIN_MS) harness_fail(r, "weft_comm_abort took %.0f ms", ms);
}

static int failure_body(harness_rank *r) {
  int kind = *(const int *)r->arg;
  if (!warm_up(r)) return r->failures;
  if (r->rank == VICTIM) {
    if (kind == EXIT_BEFORE) _exit(0);
    if (kind == GO_SILENT) {
      harness_wait_flag(r, FLAG_SURVIVORS_DONE, 2, 2 * (r->config.timeout_ms + MARGIN_MS));
      abort_comm(r);
      return r->failures;
    }
    victim_dies_mid_call(r, kind);
  }
  if (kind == KILL_DURING) survivor_on_stream(r);
  else survivor_blocking(r, kind);
  /* Abort only once both survivors have their error: a survivor's abort closes its
   * connections, and the other would then (rightly) blame that survivor instead. */
  atomic_fetch_add(&r->shared->flags[FLAG_SURVIVORS_DONE], 1);
  harness_wait_flag(r, FLAG_SURVIVORS_DONE, 2, r->config.timeout_ms + 2 * MARGIN_MS);
  abort_comm(r);
  return r->failures;
}

typedef struct {
  const char *transport;
  int kind;
  int timeout_ms;
} failure_params;

static void run_failure(void **state) {
  failure_params *p = *state;
  harness_opts o = {0};
  o.nranks = 3;
  o.transport = p->transport;
  o.timeout_ms = p->timeout_ms;
  o.deadline_s = 60;
  o.may_be_killed = p->kind == KILL_DURING ? 1u << VICTIM : 0;
  harness_run(&o, failure_body, &p->kind);
}

/* The ib transport's cases run on the verbs emulator when it is built (harness_verbs_emu_setup). */
static void skipped(void **state) { (void)state; }

#define FT(name, tr, kind) \
  {name "_over_" #tr, run_failure, NULL, NULL, \
   &(failure_params){#tr, kind, kind == GO_SILENT ? SILENT_TIMEOUT_MS : TIMEOUT_MS}}

/* An ib case, or its name marked "# SKIP" without the emulator. */
#define FT_IB(name, kind) \
  {have_emu ? name "_over_ib" : name "_over_ib # SKIP the verbs emulator is not built", \
   have_emu ? run_failure : skipped, NULL, NULL, \
   &(failure_params){"ib", kind, kind == GO_SILENT ? SILENT_TIMEOUT_MS : TIMEOUT_MS}}

int main(void) {
  int have_emu = harness_verbs_emu_setup("failure");
  const struct CMUnitTest tests[] = {
      FT("rank_exiting_before_an_all_reduce_fails_the_others_naming_it", shm, EXIT_BEFORE),
      FT("rank_exiting_before_an_all_reduce_fails_the_others_naming_it", socket, EXIT_BEFORE),
      FT("rank_exiting_during_a_64_mib_all_reduce_fails_the_others_naming_it", shm,
         EXIT_DURING),
      FT("rank_exiting_during_a_64_mib_all_reduce_fails_the_others_naming_it", socket,
         EXIT_DURING),
      FT("rank_killed_during_a_64_mib_all_reduce_fails_the_others_streams_naming_it", shm,
         KILL_DURING),
      FT("rank_killed_during_a_64_mib_all_reduce_fails_the_others_streams_naming_it", socket,
         KILL_DURING),
      FT("rank_that_stops_calling_makes_the_others_time_out_within_the_deadline", socket,
         GO_SILENT),
      FT_IB("rank_exiting_during_a_64_mib_all_reduce_fails_the_others_naming_it", EXIT_DURING),
      FT_IB("rank_killed_during_a_64_mib_all_reduce_fails_the_others_streams_naming_it", KILL_DURING),
      FT_IB("rank_that_stops_calling_makes_the_others_time_out_within_the_deadline", GO_SILENT),
  };
  harness_filter_from_env();
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  harness_verbs_emu_teardown();
  return rc;
}
