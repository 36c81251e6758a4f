/* test_mismatch.c: ranks that make different calls get errors, never success with wrong
 * data, and never hang (issue 15, defect 6).
 *
 * Each case runs on 3 rank processes over shm, over sockets and over ib (WEFT_TRANSPORT=ib
 * on the verbs emulator, tests/verbs_emu/; named "# SKIP" when it is not built) with a
 * short timeout. The
 * ranks call mismatched operations (sum against max; float32 against int32; a zero-count
 * call on rank 0 only, which shifts the pairing of the next; all-reduce against
 * all-gather; all-to-all against all-gather; broadcast from different roots; a send
 * against an all-reduce). Every rank must return an error; at least one must report the
 * mismatch, naming both ranks and both calls ("does not match rank R's ..." with the
 * fields that differ); the others fail too, by the same check or because the detecting
 * rank stopped (a timeout naming the peer). Without the fingerprint check the first cases
 * return WEFT_SUCCESS on every rank (over ib too, before it carried the fingerprint). Over
 * ib a send waits for the receiver's clear-to-send (a rendezvous, not eager), so in a send
 * against an all-reduce whose first step sends to the sending rank, no message is ever
 * taken: there every rank must fail naming a peer (a timeout), and none can see the
 * mismatch. A control case (sends between ranks 0 and 1 only,
 * then an all-reduce of all three) must still succeed: send/recv numbering per pair must
 * not shift the collectives' numbers. The same cases run again under WEFT_CHECK=1, where
 * every rank must report the mismatch itself. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/harness.h"

#define NR 3
#define TIMEOUT_MS 1500
#define FLAG_DONE 0    /* flags[FLAG_DONE + rank]: rank's call returned */
#define FLAG_SAW 8     /* flags[FLAG_SAW + rank]: its error reported the mismatch itself */

typedef struct {
  const char *name;
  /* Runs rank r's side of the mismatch; returns the status of its last call. */
  weft_status_t (*call)(harness_rank *r);
  /* What a reported mismatch must mention (NULL: nothing more; "a|b": a or b). */
  const char *words[3];
  /* A send completes once its bytes are handed over (eagerly), before the receiver looks at
   * them: rank 0's send may succeed (it returns no data), and under WEFT_CHECK=1 the rank
   * that waits for rank 0 in a collective only times out naming it. Over ib (rendezvous:
   * the send waits for the receive) no rank may see the mismatch; all must fail. */
  int rank0_sends;
  /* Ranks that only send in the call (broadcast roots) or receive only from ranks of the
   * same call may succeed with results that are right for their own call; the messages no
   * one took are then caught by the next call, which must fail. */
  int deferred;
} mismatch_case;

typedef struct {
  const mismatch_case *c;
  const char *transport;
  int full_check; /* WEFT_CHECK=1 */
} params;

static float fbuf_in[1 << 20], fbuf_out[3 << 20];

static weft_status_t op_sum_vs_max(harness_rank *r) {
  for (int i = 0; i < 16; i++) fbuf_in[i] = (float)(r->rank * 10 + i);
  return weft_all_reduce(fbuf_in, fbuf_out, 16, WEFT_FLOAT32, r->rank == 0 ? WEFT_SUM : WEFT_MAX, r->comm, NULL);
}

static weft_status_t float_vs_int(harness_rank *r) {
  size_t n = 1 << 20;
  for (size_t i = 0; i < n; i++) fbuf_in[i] = (float)i;
  return weft_all_reduce(fbuf_in, fbuf_out, n, r->rank == 0 ? WEFT_FLOAT32 : WEFT_INT32, WEFT_SUM, r->comm, NULL);
}

static weft_status_t zero_count_shift(harness_rank *r) {
  if (r->rank == 0) {
    weft_status_t st = weft_all_reduce(fbuf_in, fbuf_out, 0, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (st != WEFT_SUCCESS) return st; /* a zero-count call alone succeeds: it moves nothing */
  }
  for (int i = 0; i < 1000; i++) fbuf_in[i] = 1.0f;
  return weft_all_reduce(fbuf_in, fbuf_out, 1000, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
}

static weft_status_t reduce_vs_gather(harness_rank *r) {
  if (r->rank == 0) return weft_all_gather(fbuf_in, fbuf_out, 64, WEFT_FLOAT32, r->comm, NULL);
  return weft_all_reduce(fbuf_in, fbuf_out, 64, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
}

static weft_status_t alltoall_vs_gather(harness_rank *r) {
  if (r->rank == 2) return weft_all_gather(fbuf_in, fbuf_out, 4096, WEFT_FLOAT32, r->comm, NULL);
  return weft_all_to_all(fbuf_in, fbuf_out, 4096, WEFT_FLOAT32, r->comm, NULL);
}

static weft_status_t broadcast_roots(harness_rank *r) {
  return weft_broadcast(fbuf_in, fbuf_out, 256, WEFT_FLOAT32, r->rank == 0 ? 0 : 1, r->comm, NULL);
}

static weft_status_t send_vs_all_reduce(harness_rank *r) {
  if (r->rank == 0) return weft_send(fbuf_in, 16, WEFT_FLOAT32, 1, r->comm, NULL);
  return weft_all_reduce(fbuf_in, fbuf_out, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
}

/* Registered windows: the direct algorithm, where peers read each other's buffers, has
 * only its descriptor handshake as messages: the check rides that (and before it the
 * descriptors named collective and count, not the op). */
static weft_status_t windows_sum_vs_max(harness_rank *r) {
  size_t n = 1 << 14, bytes = n * sizeof(float);
  void *a = NULL, *b = NULL;
  weft_window_t wa = NULL, wb = NULL;
  weft_status_t st = weft_mem_alloc(&a, bytes);
  if (st == WEFT_SUCCESS) st = weft_mem_alloc(&b, bytes);
  if (st == WEFT_SUCCESS) st = weft_comm_window_register(r->comm, a, bytes, &wa, 0);
  if (st == WEFT_SUCCESS) st = weft_comm_window_register(r->comm, b, bytes, &wb, 0);
  if (st != WEFT_SUCCESS) {
    harness_fail(r, "window setup: %s: %s", harness_status_name(st), weft_get_last_error(r->comm));
    return WEFT_ERR_INTERNAL;
  }
  for (size_t i = 0; i < n; i++) ((float *)a)[i] = (float)(r->rank + (int)i);
  return weft_all_reduce(a, b, n, WEFT_FLOAT32, r->rank == 0 ? WEFT_SUM : WEFT_MAX, r->comm, NULL);
}

/* Local registration (weft_comm_register): rank 0 registers its buffers, the others do
 * not, so rank 0 runs the direct algorithm and its peers the usual one. NCCL calls that
 * undefined; here the descriptors carry their own fingerprint (WEFT__FP_DIRECT), so each
 * side refuses the other's messages. Over shm only: elsewhere registration changes
 * nothing and the call is right on every rank. */
static weft_status_t registered_on_rank_0_only(harness_rank *r) {
  size_t n = 1 << 14, bytes = n * sizeof(float);
  float *a = malloc(2 * bytes);
  if (a == NULL) return WEFT_ERR_NO_MEMORY;
  for (size_t i = 0; i < 2 * n; i++) a[i] = (float)(r->rank + (int)i);
  weft_reg_t reg = NULL;
  if (r->rank == 0) {
    weft_status_t st = weft_comm_register(r->comm, a, 2 * bytes, &reg);
    if (st != WEFT_SUCCESS) {
      harness_fail(r, "weft_comm_register: %s: %s", harness_status_name(st), weft_get_last_error(r->comm));
      return WEFT_ERR_INTERNAL;
    }
  }
  weft_status_t st = weft_all_reduce(a, a + n, n, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  weft_comm_deregister(r->comm, reg);
  return st; /* a stays allocated: a peer may still be reading it */
}

static const mismatch_case cases[] = {
    {"sum_against_max", op_sum_vs_max, {"sum", "max", "all_reduce #1"}, 0, 0},
    {"float32_against_int32", float_vs_int, {"float,", "int32", NULL}, 0, 0},
    {"zero_count_call_on_one_rank", zero_count_shift, {"#1", "#2|count 0,", NULL}, 0, 0},
    {"all_reduce_against_all_gather", reduce_vs_gather, {"all_reduce", "all_gather", NULL}, 0, 0},
    {"all_to_all_against_all_gather", alltoall_vs_gather, {"all_to_all", "all_gather", NULL}, 0, 0},
    {"broadcast_from_different_roots", broadcast_roots, {"broadcast #1", "root", NULL}, 0, 1},
    {"send_against_all_reduce", send_vs_all_reduce, {"all_reduce", NULL, NULL}, 1, 1},
    {"sum_against_max_on_registered_windows", windows_sum_vs_max, {"sum", "max", NULL}, 0, 0},
    {"buffers_registered_on_rank_0_only", registered_on_rank_0_only, {"registered", "all_reduce #1", NULL}, 0, 0},
};

/* The next call after a mismatched one that succeeded (a deferred case): it must fail. An
 * all-to-all receives from every peer, so it meets every message left unconsumed. */
static weft_status_t next_call(harness_rank *r) {
  return weft_all_to_all(fbuf_in, fbuf_out, 4, WEFT_FLOAT32, r->comm, NULL);
}

/* 1 when msg contains one of the '|'-separated alternatives of words. */
static int mentions(const char *msg, const char *words) {
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", words);
  for (char *save = NULL, *w = strtok_r(buf, "|", &save); w != NULL; w = strtok_r(NULL, "|", &save))
    if (strstr(msg, w) != NULL) return 1;
  return 0;
}

static int body(harness_rank *r) {
  const params *p = r->arg;
  weft_status_t st = p->c->call(r);
  if (st == WEFT_SUCCESS && p->c->deferred && !p->full_check) st = next_call(r);
  const char *msg = weft_get_last_error(r->comm);
  int saw = st != WEFT_SUCCESS && strstr(msg, "does not match rank") != NULL;
  if (st == WEFT_SUCCESS && !(p->c->rank0_sends && r->rank == 0))
    harness_fail(r, "%s: returned WEFT_SUCCESS though the ranks' calls differ", p->c->name);
  if (saw)
    for (int i = 0; i < 3; i++)
      if (p->c->words[i] != NULL && !mentions(msg, p->c->words[i]))
        harness_fail(r, "%s: the mismatch error does not mention \"%s\": \"%s\"", p->c->name, p->c->words[i], msg);
  if (st != WEFT_SUCCESS && !saw && !harness_names_rank(msg, 0) && !harness_names_rank(msg, 1) &&
      !harness_names_rank(msg, 2))
    harness_fail(r, "%s: the error names no peer: \"%s\"", p->c->name, msg);
  if (p->full_check && !saw && !p->c->rank0_sends)
    harness_fail(r, "%s: under WEFT_CHECK=1 every rank must report the mismatch itself; got %s: \"%s\"",
                 p->c->name, harness_status_name(st), msg);
  harness_note(r, "%s: %s: %s", p->c->name, harness_status_name(st), msg);
  atomic_store(&r->shared->flags[FLAG_SAW + r->rank], saw);
  atomic_store(&r->shared->flags[FLAG_DONE + r->rank], 1);
  /* Stay until every rank returned (a rank that exits early would be a failed peer to the
   * others, which would hide whether they detected the mismatch). */
  int any = 0;
  for (int k = 0; k < r->nranks; k++) {
    if (!harness_wait_flag(r, FLAG_DONE + k, 1, 4 * TIMEOUT_MS)) harness_fail(r, "rank %d never returned", k);
    any |= atomic_load(&r->shared->flags[FLAG_SAW + k]);
  }
  int rendezvous = p->c->rank0_sends && strcmp(p->transport, "ib") == 0;
  if (!any && r->rank == 0 && !rendezvous) harness_fail(r, "%s: no rank reported the mismatch", p->c->name);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* Runs body on NR ranks over p's transport with the short timeout (WEFT_CHECK=1 when
 * p->full_check). */
static void run_ranks(const params *p, harness_body_fn fn) {
  harness_opts o = {0};
  o.nranks = NR;
  o.transport = p->transport;
  o.timeout_ms = TIMEOUT_MS;
  o.deadline_s = 30;
  if (p->full_check) setenv("WEFT_CHECK", "1", 1);
  harness_run(&o, fn, (void *)p);
  unsetenv("WEFT_CHECK");
}

static void run(void **state) { run_ranks(*state, body); }

/* Marks this rank's call returned, waits until every rank's has (one leaving early would
 * be a failed peer to the others), and aborts the communicator. Returns the failures. */
static int leave_together(harness_rank *r) {
  atomic_store(&r->shared->flags[FLAG_DONE + r->rank], 1);
  for (int k = 0; k < r->nranks; k++) harness_wait_flag(r, FLAG_DONE + k, 1, 4 * TIMEOUT_MS);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* A call that fails logs one warning, the one naming the operation ("[in all_reduce #1 ..."):
 * the error a transport or the wait raised inside the call is recorded, not logged, while
 * the call drives its requests (weft_comm.errors_quiet, lib/task.c), else the log says the
 * same failure twice. Each rank points its stderr at a file for the call and counts. */
static int one_warning_body(harness_rank *r) {
  char path[] = "/tmp/weft-test-warnings-XXXXXX";
  int fd = mkstemp(path), saved = fd >= 0 ? dup(2) : -1;
  if (fd < 0 || saved < 0) {
    harness_fail(r, "cannot capture stderr in %s", path);
    return r->failures;
  }
  unlink(path);
  fflush(stderr);
  dup2(fd, 2);
  weft_status_t st = op_sum_vs_max(r);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char log[8192], copy[8192];
  ssize_t len = pread(fd, log, sizeof(log) - 1, 0);
  close(fd);
  log[len > 0 ? len : 0] = '\0';
  memcpy(copy, log, sizeof(copy));
  int warnings = 0, named = 0;
  for (char *save = NULL, *line = strtok_r(log, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
    if (strstr(line, " weft WARN ") == NULL) continue;
    warnings++;
    named += strstr(line, "[in all_reduce #1") != NULL;
  }
  if (st == WEFT_SUCCESS) harness_fail(r, "sum against max returned WEFT_SUCCESS");
  else if (warnings != 1 || named != 1)
    harness_fail(r, "the failed call logged %d warnings (%d naming the call), expected one naming it: %s", warnings,
                 named, copy);
  return leave_together(r);
}

static void run_one_warning(void **state) { run_ranks(*state, one_warning_body); }

/* The control: sends between ranks 0 and 1 only, then collectives of all, succeed. */
/* WEFT_CHECK=1 compares all_to_allv's pair counts: rank 0 sends 2 elements to rank 1,
 * which expects 3 from it; both must name the counts. */
static int a2av_body(harness_rank *r) {
  size_t sc[NR], sd[NR], rc[NR], rd[NR];
  for (int p = 0; p < NR; p++) sc[p] = rc[p] = 2, sd[p] = rd[p] = (size_t)p * 4;
  if (r->rank == 1) rc[0] = 3;
  weft_status_t st = weft_all_to_allv(fbuf_in, sc, sd, fbuf_out, rc, rd, WEFT_FLOAT32, r->comm, NULL);
  const char *msg = weft_get_last_error(r->comm);
  if (r->rank <= 1) {
    if (st != WEFT_ERR_INVALID_USAGE || (strstr(msg, "sends 2 elements to rank 1, which expects 3") == NULL &&
                                             strstr(msg, "expects 3 elements from rank 0, which sends 2") == NULL))
      harness_fail(r, "all_to_allv with disagreeing counts: %s: \"%s\"", harness_status_name(st), msg);
  } else if (st != WEFT_SUCCESS && !harness_names_rank(msg, 0) && !harness_names_rank(msg, 1)) {
    /* Rank 2's pairs agree; it fails only because ranks 0 and 1 stopped: naming one. */
    harness_fail(r, "rank 2's error names neither rank 0 nor 1: %s: \"%s\"", harness_status_name(st), msg);
  }
  harness_note(r, "%s: %s", harness_status_name(st), msg);
  return leave_together(r);
}

static void run_a2av(void **state) {
  const params *p = *state;
  setenv("WEFT_CHECK", "1", 1);
  harness_opts o = {0};
  o.nranks = NR;
  o.transport = p->transport;
  o.timeout_ms = TIMEOUT_MS;
  harness_run(&o, a2av_body, NULL);
  unsetenv("WEFT_CHECK");
}

static int control_body(harness_rank *r) {
  float a[16], b[16];
  for (int i = 0; i < 16; i++) a[i] = (float)(r->rank + 1);
  for (int k = 0; k < 3; k++) {
    weft_status_t st = WEFT_SUCCESS;
    if (r->rank == 0) st = weft_send(a, 16, WEFT_FLOAT32, 1, r->comm, NULL);
    if (r->rank == 1) st = weft_recv(b, 16, WEFT_FLOAT32, 0, r->comm, NULL);
    harness_expect_status(r, st, WEFT_SUCCESS, "send/recv between ranks 0 and 1");
  }
  weft_status_t st = weft_all_reduce(a, b, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce after sends on one pair");
  if (st == WEFT_SUCCESS && b[5] != 6.0f) harness_fail(r, "all_reduce gave %g, expected 6", b[5]);
  st = weft_all_reduce(a, b, 0, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  harness_expect_status(r, st, WEFT_SUCCESS, "zero-count all_reduce on every rank");
  st = weft_barrier(r->comm, NULL);
  harness_expect_status(r, st, WEFT_SUCCESS, "barrier after a zero-count all_reduce");
  return r->failures;
}

static void run_control(void **state) {
  const params *p = *state;
  if (p->full_check) setenv("WEFT_CHECK", "1", 1);
  harness_opts o = {0};
  o.nranks = NR;
  o.transport = p->transport;
  harness_run(&o, control_body, NULL);
  unsetenv("WEFT_CHECK");
}

/* The ib cases run on the verbs emulator when it is built (harness_verbs_emu_setup). */
static void skipped(void **state) { (void)state; }

#define CASE(i, name, tr, full, mode) \
  {name "_fails_on_every_rank_over_" #tr mode, run, NULL, NULL, &(params){&cases[i], #tr, full}}
#define ALL_CASES(tr, full, mode) \
  CASE(0, "sum_against_max", tr, full, mode), CASE(1, "float32_against_int32", tr, full, mode), \
  CASE(2, "zero_count_call_on_one_rank", tr, full, mode), \
  CASE(3, "all_reduce_against_all_gather", tr, full, mode), \
  CASE(4, "all_to_all_against_all_gather", tr, full, mode), \
  CASE(5, "broadcast_from_different_roots", tr, full, mode), \
  CASE(6, "send_against_all_reduce", tr, full, mode), \
  CASE(7, "sum_against_max_on_registered_windows", tr, full, mode)
/* An ib case, or its name marked "# SKIP" without the emulator. */
#define IB_SKIP " # SKIP the verbs emulator is not built"
#define CASE_IB(i, name, full, mode) \
  {have_emu ? name "_fails_on_every_rank_over_ib" mode : name "_fails_on_every_rank_over_ib" mode IB_SKIP, \
   have_emu ? run : skipped, NULL, NULL, &(params){&cases[i], "ib", full}}
#define ALL_CASES_IB(full, mode) \
  CASE_IB(0, "sum_against_max", full, mode), CASE_IB(1, "float32_against_int32", full, mode), \
  CASE_IB(2, "zero_count_call_on_one_rank", full, mode), \
  CASE_IB(3, "all_reduce_against_all_gather", full, mode), \
  CASE_IB(4, "all_to_all_against_all_gather", full, mode), \
  CASE_IB(5, "broadcast_from_different_roots", full, mode), \
  CASE_IB(6, "send_against_all_reduce", full, mode), \
  CASE_IB(7, "sum_against_max_on_registered_windows", full, mode)

int main(void) {
  int have_emu = harness_verbs_emu_setup("mismatch");
  const struct CMUnitTest tests[] = {
      ALL_CASES(shm, 0, ""),
      CASE(8, "buffers_registered_on_rank_0_only", shm, 0, ""),
      ALL_CASES(socket, 0, ""),
      ALL_CASES_IB(0, ""),
      ALL_CASES(shm, 1, "_under_WEFT_CHECK"),
      ALL_CASES(socket, 1, "_under_WEFT_CHECK"),
      {"all_to_allv_counts_that_disagree_are_named_under_WEFT_CHECK_over_shm", run_a2av, NULL, NULL, &(params){NULL, "shm", 1}},
      {"all_to_allv_counts_that_disagree_are_named_under_WEFT_CHECK_over_socket", run_a2av, NULL, NULL, &(params){NULL, "socket", 1}},
      {"a_failed_call_logs_one_warning_over_shm", run_one_warning, NULL, NULL, &(params){NULL, "shm", 0}},
      {"a_failed_call_logs_one_warning_over_socket", run_one_warning, NULL, NULL, &(params){NULL, "socket", 0}},
      {"sends_on_one_pair_leave_collectives_matched_over_shm", run_control, NULL, NULL, &(params){NULL, "shm", 0}},
      {"sends_on_one_pair_leave_collectives_matched_over_socket", run_control, NULL, NULL, &(params){NULL, "socket", 0}},
      {"sends_on_one_pair_leave_collectives_matched_under_full_check", run_control, NULL, NULL, &(params){NULL, "shm", 1}},
      {have_emu ? "sends_on_one_pair_leave_collectives_matched_over_ib"
                : "sends_on_one_pair_leave_collectives_matched_over_ib" IB_SKIP,
       have_emu ? run_control : skipped, NULL, NULL, &(params){NULL, "ib", 0}},
  };
  harness_filter_from_env();
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  harness_verbs_emu_teardown();
  return rc;
}
