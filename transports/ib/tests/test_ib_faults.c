/* test_ib_faults.c: the ib transport under the core, on the verbs emulator: which transport
 * the core picks (ib across emulated hosts, shm within, socket with WEFT_IB_DISABLE=1), and
 * the emulator's injected faults (WEFT_VERBS_EMU_FAULT on one rank: a work request failing
 * with a status, its QP moved to the error state, a fatal asynchronous event, completions
 * delayed past the communicator's timeout) met inside all-reduces between two emulated
 * hosts, and registered windows skipping the staging copy. Each fault must end, on every rank and within the timeout, in an error that names
 * the peer; on the faulty rank it also names what failed (the verbs status string, the
 * flush, the event, the deadline). Delays within the timeout must still deliver exact
 * results. Skips (TAP "# SKIP") only when the emulator is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "tests/harness.h"
#include "transports/ib/ib_transport.h"
#include "transports/ib/tests/verbs_emu_pair.h"
#include "transports/transport.h"

enum { TIMEOUT_MS = 2000, MARGIN_MS = 2500, COUNT = 256 * 1024 /* floats: 1 MiB */ };

/* ---- the choice of transport ------------------------------------------------------------- */
typedef struct {
  const char *hosts;     /* one letter per rank */
  const char *disable;   /* WEFT_IB_DISABLE, or NULL */
  const char *across;    /* the transport expected between hosts */
} choice_case;

static int body_choice(harness_rank *r) {
  const choice_case *c = r->arg;
  if (c->disable != NULL) setenv("WEFT_IB_DISABLE", c->disable, 1);
  if (harness_init_on_emulated_host(r, c->hosts) != 0) return r->failures;
  for (int p = 0; p < r->nranks; p++) {
    if (p == r->rank) continue;
    const char *want = c->hosts[p] == c->hosts[r->rank] ? "shm" : c->across;
    const weft__transport *tr = r->comm->conns[p].tr;
    if (tr == NULL || strcmp(tr->name, want) != 0)
      harness_fail(r, "peer %d (host %c): transport %s, expected %s", p, c->hosts[p], tr ? tr->name : "none", want);
  }
  float *b = calloc(COUNT, sizeof(float));
  for (int i = 0; i < COUNT; i++) b[i] = (float)(r->rank + i % 7);
  weft_status_t st = weft_all_reduce(b, b, COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  float want0 = 0;
  for (int q = 0; q < r->nranks; q++) want0 += (float)q;
  if (st != WEFT_SUCCESS) harness_fail(r, "all_reduce: %s: %s", harness_status_name(st), weft_get_last_error(r->comm));
  else if (b[0] != want0 || b[COUNT - 1] != want0 + (float)(r->nranks * ((COUNT - 1) % 7)))
    harness_fail(r, "all_reduce: wrong result %g", (double)b[0]);
  free(b);
  return r->failures;
}

static void run_choice(int n, const char *hosts, const char *disable, const char *across) {
  choice_case c = {hosts, disable, across};
  harness_opts o = {.nranks = n, .no_init = 1, .deadline_s = 60};
  harness_run(&o, body_choice, &c);
}

static void auto_choice_is_ib_across_hosts_and_shm_within(void **state) {
  (void)state;
  run_choice(4, "aabb", NULL, "ib");
}

static void ib_disable_falls_back_to_sockets_across_hosts(void **state) {
  (void)state;
  run_choice(3, "abb", "1", "socket");
}

/* Registered windows skip the staging copy: an all-gather whose buffers lie in a window
 * sends every slice straight from it and receives every slice straight into it (the
 * transport's counters say so), with exact results; a plain malloc'd buffer still goes
 * through staging. */
static int body_window(harness_rank *r) {
  if (harness_init_on_emulated_host(r, "ab") != 0) return r->failures;
  const size_t n = (size_t)3 << 20; /* floats per rank: 12 MiB, 24 slices */
  float *buf = NULL;
  weft_window_t win = NULL;
  if (weft_mem_alloc((void **)&buf, 2 * n * sizeof(float)) != WEFT_SUCCESS ||
      weft_comm_window_register(r->comm, buf, 2 * n * sizeof(float), &win, 0) != WEFT_SUCCESS)
    return harness_fail(r, "window: %s", weft_get_last_error(r->comm));
  ibt_state *st = weft__ibt_state_of(r->comm);
  for (size_t i = 0; i < n; i++) buf[(size_t)r->rank * n + i] = (float)(r->rank * 1000 + (int)(i % 997));
  weft_status_t s = weft_all_gather(buf + (size_t)r->rank * n, buf, n, WEFT_FLOAT32, r->comm, NULL);
  if (s != WEFT_SUCCESS) harness_fail(r, "all_gather: %s", weft_get_last_error(r->comm));
  for (size_t i = 0; i < 2 * n && s == WEFT_SUCCESS; i++)
    if (buf[i] != (float)((int)(i / n) * 1000 + (int)(i % n % 997))) {
      harness_fail(r, "all_gather: element %zu is %g", i, (double)buf[i]);
      break;
    }
  uint64_t sends = st->window_sends, recvs = st->window_recvs;
  harness_note(r, "window: %llu slices sent from it, %llu received into it", (unsigned long long)sends,
               (unsigned long long)recvs);
  if (sends < 24 || recvs < 24) harness_fail(r, "the window's slices went through staging");
  float *plain = calloc(n, sizeof(float)); /* outside every window: staged */
  s = weft_all_reduce(plain, plain, n, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  if (s != WEFT_SUCCESS) harness_fail(r, "all_reduce: %s", weft_get_last_error(r->comm));
  if (st->window_sends != sends || st->window_recvs != recvs) harness_fail(r, "a plain buffer counted as a window");
  free(plain);
  weft_comm_window_deregister(r->comm, win);
  weft_mem_free(buf);
  return r->failures;
}

static void registered_windows_skip_the_staging_copy(void **state) {
  (void)state;
  harness_opts o = {.nranks = 2, .no_init = 1, .deadline_s = 60};
  harness_run(&o, body_window, NULL);
}

/* WEFT_TRANSPORT=ib toward a host whose HCA is not usable (WEFT_IB_HCA excludes it there):
 * init fails on both ranks, naming the peer it cannot reach, instead of hanging. */
static int body_forced_without_hca(harness_rank *r) {
  setenv("WEFT_TRANSPORT", "ib", 1);
  if (r->rank == 1) setenv("WEFT_IB_HCA", "^weftemu", 1);
  setenv("WEFT_HOSTID", r->rank == 0 ? "weft-test-host-a" : "weft-test-host-b", 1);
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  const char *msg = weft_get_last_error(NULL);
  if (st == WEFT_SUCCESS) {
    harness_fail(r, "init over ib succeeded toward a host without a usable HCA");
    weft_comm_destroy(r->comm);
  } else {
    harness_note(r, "after %.0f ms: %s: %s", harness_now_ms() - t0, harness_status_name(st), msg);
    if (!harness_names_rank(msg, 1 - r->rank)) harness_fail(r, "the error does not name peer %d", 1 - r->rank);
    if (strstr(msg, "WEFT_TRANSPORT=ib") == NULL) harness_fail(r, "the error does not name WEFT_TRANSPORT=ib");
  }
  r->comm = NULL;
  return r->failures;
}

static void forced_ib_toward_a_host_without_an_hca_fails_naming_the_peer(void **state) {
  (void)state;
  harness_opts o = {.nranks = 2, .no_init = 1, .deadline_s = 60, .timeout_ms = TIMEOUT_MS};
  harness_run(&o, body_forced_without_hca, NULL);
}

/* Without a verbs library: every rank says so in one INFO line and the job runs over
 * sockets across hosts, as before the ib transport. In a fresh process (this program with
 * --nolib): the test's own has loaded the emulator already. */
static char g_self[4096];

static void nolib_child_test(void **state) {
  (void)state;
  run_choice(3, "abb", NULL, "socket");
}

static int nolib_main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(nolib_child_test)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

static void without_a_verbs_library_one_info_line_and_sockets_across_hosts(void **state) {
  (void)state;
  char cmd[4200], line[2048];
  snprintf(cmd, sizeof cmd, "'%s' --nolib 2>&1", g_self);
  setenv("WEFT_IB_LIBRARY", "/nonexistent/libibverbs.so.1", 1);
  setenv("WEFT_DEBUG", "INFO", 1);
  FILE *f = popen(cmd, "r");
  int unavailable = 0, other_ib = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "ib: transport unavailable") != NULL && strstr(line, "/nonexistent/libibverbs.so.1") != NULL)
      unavailable++;
    else if (strstr(line, " ib") != NULL && strstr(line, "WARN") != NULL) other_ib++, fprintf(stderr, "# %s", line);
  }
  int rc = f != NULL ? pclose(f) : -1;
  unsetenv("WEFT_DEBUG");
  const char *top = getenv("WEFT_TOP_BUILDDIR");
  snprintf(line, sizeof line, "%s/tests/verbs_emu/.libs/libweft_verbs_emu.so", top ? top : ".");
  setenv("WEFT_IB_LIBRARY", line, 1);
  fprintf(stderr, "# 3 ranks without a verbs library: exit status %d, %d 'unavailable' lines\n", rc, unavailable);
  assert_int_equal(rc, 0);
  assert_int_equal(unavailable, 3); /* one per rank process */
  assert_int_equal(other_ib, 0);
}

/* ---- faults ------------------------------------------------------------------------------ */
typedef struct {
  const char *fault;       /* WEFT_VERBS_EMU_FAULT on rank 0 */
  const char *rank0_says;  /* in rank 0's error; NULL: no error expected (delays within the timeout) */
} fault_case;

static int body_fault(harness_rank *r) {
  const fault_case *f = r->arg;
  if (r->rank == 0) setenv("WEFT_VERBS_EMU_FAULT", f->fault, 1);
  if (harness_init_on_emulated_host(r, "ab") != 0) return r->failures;
  float *b = calloc(COUNT, sizeof(float));
  double t0 = harness_now_ms(), t_call = t0;
  weft_status_t st = WEFT_SUCCESS;
  for (int iter = 0; iter < 8 && st == WEFT_SUCCESS; iter++) {
    for (int i = 0; i < COUNT; i++) b[i] = (float)(r->rank + iter);
    t_call = harness_now_ms();
    st = weft_all_reduce(b, b, COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (st == WEFT_SUCCESS && (b[0] != (float)(1 + 2 * iter) || b[COUNT - 1] != (float)(1 + 2 * iter)))
      harness_fail(r, "%s: all_reduce %d: wrong result %g", f->fault, iter, (double)b[0]);
  }
  double ms = harness_now_ms() - t_call;
  const char *msg = weft_get_last_error(r->comm);
  if (f->rank0_says == NULL) {
    if (st != WEFT_SUCCESS) harness_fail(r, "%s: %s: %s", f->fault, harness_status_name(st), msg);
  } else if (st == WEFT_SUCCESS) {
    harness_fail(r, "%s: every all-reduce succeeded", f->fault);
  } else {
    harness_note(r, "%s: error after %.0f ms: %s: %s", f->fault, ms, harness_status_name(st), msg);
    if (!harness_names_rank(msg, 1 - r->rank)) harness_fail(r, "the error does not name peer %d", 1 - r->rank);
    if (r->rank == 0 && strstr(msg, f->rank0_says) == NULL) harness_fail(r, "the error does not say '%s'", f->rank0_says);
    if (ms > TIMEOUT_MS + MARGIN_MS) harness_fail(r, "the error took %.0f ms (timeout %d ms)", ms, TIMEOUT_MS);
  }
  /* Abort only once both ranks have their error: the peer's error must come from the
   * fault, not from this rank's abort. A rank that never gets one fails the wait. */
  r->shared->flags[r->rank] = 1;
  if (!harness_wait_flag(r, 1 - r->rank, 1, 2 * TIMEOUT_MS + MARGIN_MS))
    harness_fail(r, "%s: peer %d never finished its all-reduces", f->fault, 1 - r->rank);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  free(b);
  return r->failures;
}

static void run_fault(const char *fault, const char *says) {
  fault_case f = {fault, says};
  harness_opts o = {.nranks = 2, .no_init = 1, .deadline_s = 60, .timeout_ms = TIMEOUT_MS};
  harness_run(&o, body_fault, &f);
}

static void fault_remote_access_error_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=3:rem_access", "remote access error");
}

static void fault_retry_exceeded_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=6:retry_exc", "transport retry counter exceeded");
}

static void fault_rnr_retry_exceeded_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=9:rnr_retry", "RNR retry counter exceeded");
}

static void fault_qp_in_error_state_flushes_and_fails(void **state) {
  (void)state;
  run_fault("qp_error=5", "flushed");
}

static void fault_fatal_async_event_fails_the_collective(void **state) {
  (void)state;
  run_fault("fatal=4", "asynchronous event");
}

static void fault_completions_delayed_past_the_timeout_end_in_timeout(void **state) {
  (void)state;
  run_fault("delay_us=5000000", "within 2000 ms");
}

static void fault_completions_delayed_within_the_timeout_still_deliver(void **state) {
  (void)state;
  run_fault("delay_us=20000", NULL);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--nolib") == 0) return nolib_main();
  ssize_t k = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
  g_self[k > 0 ? k : 0] = '\0';
  harness_filter_from_env();
  int rc;
  if (!emu_test_begin(&rc)) return rc;
  setenv("WEFT_IB_TIMEOUT", "12", 1); /* 16.8 ms per try: a dead peer is noticed in ~50 ms */
  setenv("WEFT_IB_RETRY_CNT", "2", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(auto_choice_is_ib_across_hosts_and_shm_within),
      cmocka_unit_test(ib_disable_falls_back_to_sockets_across_hosts),
      cmocka_unit_test(registered_windows_skip_the_staging_copy),
      cmocka_unit_test(without_a_verbs_library_one_info_line_and_sockets_across_hosts),
      cmocka_unit_test(forced_ib_toward_a_host_without_an_hca_fails_naming_the_peer),
      cmocka_unit_test(fault_remote_access_error_names_the_peer_and_status),
      cmocka_unit_test(fault_retry_exceeded_names_the_peer_and_status),
      cmocka_unit_test(fault_rnr_retry_exceeded_names_the_peer_and_status),
      cmocka_unit_test(fault_qp_in_error_state_flushes_and_fails),
      cmocka_unit_test(fault_fatal_async_event_fails_the_collective),
      cmocka_unit_test(fault_completions_delayed_past_the_timeout_end_in_timeout),
      cmocka_unit_test(fault_completions_delayed_within_the_timeout_still_deliver),
  };
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  emu_test_teardown();
  return rc;
}
